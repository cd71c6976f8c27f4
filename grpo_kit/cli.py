"""``grpo-kit``: the command line. A user mistake prints one line and exits 2; ``--debug`` shows the traceback."""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shutil
import sys
import time
from pathlib import Path

from grpo_kit.errors import GRPOKitError

__all__ = ["main"]  # the command line; notebooks call it as `main([...])`


class UsageError(GRPOKitError):
    pass


class _WarningLine(logging.Handler):
    """The kit's warnings (skipped rows, bad rewards) as one line each on the current stderr."""

    def emit(self, record):
        print(f"grpo-kit: warning: {record.getMessage()}", file=sys.stderr)


def _show_warnings() -> None:
    kit = logging.getLogger("grpo_kit")
    if not any(isinstance(h, _WarningLine) for h in kit.handlers):
        kit.addHandler(_WarningLine(logging.WARNING))


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, not argparse's usage dump
        raise UsageError(f"{message[:300]} (see '{self.prog} --help')")


def _positive_int(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {s!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {v}")
    return v


def _port(s: str) -> int:
    v = _positive_int(s)
    if v > 65535:
        raise argparse.ArgumentTypeError(f"a port is a whole number from 0 to 65535, got {v} (0 picks a free one)")
    return v


def _seconds(s: str) -> float:
    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {s!r}") from None
    if not (v > 0 and v != float("inf")):
        raise argparse.ArgumentTypeError(f"expected a finite number of seconds > 0, got {s}")
    return v


def _number(s: str) -> int | float:
    """A whole number as an int, any other number as a float: the config's rule for the field then judges it."""
    try:
        return int(s)
    except ValueError:
        pass
    try:
        return float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {s!r}") from None


# grpo-kit eval's sampling flags: (GRPOConfig field, type, default (off), what it does)
EVAL_SAMPLING = (("temperature", float, 1.0, "sampling temperature"),
                 ("top_k", int, 0, "keep the k most likely tokens"),
                 ("top_p", float, 1.0, "nucleus: the most likely tokens up to this probability mass"),
                 ("min_p", float, 0.0, "drop tokens under min_p x the top token's probability"),
                 ("repetition_penalty", float, 1.0, "CTRL's penalty on tokens already in the prompt or completion"))


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="grpo-kit", description="Learn and experiment with GRPO on a tiny model or a real one.")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = p.add_subparsers(dest="command", parser_class=_Parser)
    d = sub.add_parser("demo", help="GRPO on the shipped tiny model: before/after accuracy, plots")
    d.add_argument("--seed", type=_positive_int, default=0)
    d.add_argument("--steps", type=_positive_int, default=None, help="GRPO steps (default: the config's)")
    d.add_argument("--out", default=None, help="output folder (default runs/demo, replaced on each demo)")
    d.add_argument("--overwrite", action="store_true", help="replace the run already in --out")
    t = sub.add_parser("train", help="GRPO from a YAML config")
    t.add_argument("--config", required=True)
    t.add_argument("--model")
    t.add_argument("--dataset", help="training items: a .jsonl, .parquet or .csv file, a folder written by "
                                     "Dataset.save_to_disk, or a Hugging Face Hub name owner/name")
    t.add_argument("--dataset-split", help="the split of a dataset with splits (a Hub dataset, a DatasetDict "
                                           "folder); default train")
    t.add_argument("--dataset-config", help="the configuration of a Hub dataset (e.g. main for openai/gsm8k)")
    t.add_argument("--steps", type=_positive_int)
    t.add_argument("--out", default="runs/train")
    t.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in --out")
    t.add_argument("--overwrite", action="store_true", help="delete the run already in --out and start afresh")
    t.add_argument("--allow-schedule-change", action="store_true",
                   help="with --resume and another --steps: accept that the learning-rate and other fraction-based "
                        "schedules are stretched over the new total (their values at the resumed step change)")
    t.add_argument("--engine", choices=("kit", "trl"), default="kit",
                   help="kit: the kit's own loop (default); trl: TRL's GRPOTrainer with trl_kwargs(cfg), the same "
                        "run folder files (history.jsonl, plots, diagnostics)")
    t.add_argument("--trl-arg", action="append", default=[], metavar="KEY=VALUE",
                   help="with --engine trl: an extra trl.GRPOConfig argument, e.g. use_vllm=true (repeatable)")
    e = sub.add_parser("eval", help="greedy accuracy and pass@k of a model on a dataset")
    e.add_argument("--model", default="tiny")
    e.add_argument("--dataset", help="jsonl items (default: the task's held-out test split)")
    e.add_argument("--task", default="add2")
    e.add_argument("--samples", type=_positive_int, default=0, help="K sampled completions per item for pass@K")
    e.add_argument("--self-consistency", type=_positive_int, default=0, metavar="K",
                   help="K sampled completions per item, majority vote on their answers (ties: the answer "
                        "that appeared first among the samples)")
    e.add_argument("--batch-size", type=_positive_int, default=512,
                   help="completions generated at once (lower it when memory is short; default 512)")
    for name, _, off, what in EVAL_SAMPLING:  # GRPOConfig's fields of these names, checked by their rules
        e.add_argument("--" + name.replace("_", "-"), type=_number, default=None,
                       help=f"{what}, for --samples / --self-consistency ({'default' if name == 'temperature' else 'off'}: "
                            f"{off}; the rule of GRPOConfig.{name})")
    x = sub.add_parser("export", help="write a run's latest model (LoRA merged), tokenizer and generation config to a folder "
                                          "that from_pretrained and vLLM load")
    x.add_argument("--run", required=True)
    x.add_argument("--to", required=True)
    x.add_argument("--overwrite", action="store_true", help="replace what is already in --to")
    v = sub.add_parser("export-verl", help="print the verl command (Hydra overrides) for the same run as a config")
    v.add_argument("--config", required=True)
    v.add_argument("--data-out", default=None,
                   help="folder to write train.parquet / val.parquet in verl's layout (the config's items)")
    v.add_argument("--max-prompt-length", type=_positive_int, default=512, help="prompt tokens verl reserves")
    v.add_argument("--rollout", default="vllm", help="verl's rollout engine (actor_rollout_ref.rollout.name)")
    v.add_argument("--overwrite", action="store_true", help="replace train.parquet / val.parquet in --data-out")
    g = sub.add_parser("pregen", help="sample K responses per prompt, judge every pair, write preference groups")
    g.add_argument("--model", default="tiny")
    g.add_argument("--task", default="add2")
    g.add_argument("--prompts", type=_positive_int, default=256, help="prompts from the task's train split")
    g.add_argument("--k", type=_positive_int, default=8, help="responses per prompt")
    g.add_argument("--seed", type=_positive_int, default=0)
    g.add_argument("--out", required=True, help="jsonl file to write")
    o = sub.add_parser("train-offline", help="train on preference groups recorded beforehand (grpo-kit pregen): margin, "
                                             "Bradley-Terry or REINFORCE with a learned per-group baseline, staged")
    o.add_argument("--config", required=True, help="a YAML of OfflineConfig fields (grpo_kit/config.py)")
    o.add_argument("--out", default="runs/offline")
    o.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in --out")
    o.add_argument("--overwrite", action="store_true", help="delete the run already in --out and start afresh")
    j = sub.add_parser("train-judge", help="train a learned judge on preference groups; print held-out agreement")
    j.add_argument("--data", required=True, help="preference groups jsonl (grpo-kit pregen writes one)")
    j.add_argument("--out", required=True, help="folder for the judge (use it as reward_funcs: [learned:FOLDER])")
    j.add_argument("--steps", type=_positive_int, default=200)
    j.add_argument("--seed", type=_positive_int, default=0, help="initialises the head, orders pairs, picks held-out groups")
    j.add_argument("--base", default="tiny", help="model folder the judge starts from (default: the shipped tiny base)")
    j.add_argument("--heldout", type=float, default=0.2, help="fraction of groups held out for agreement (default 0.2)")
    j.add_argument("--batch-size", type=_positive_int, default=64, help="preference pairs per step")
    j.add_argument("--lr", type=float, default=1e-3)
    j.add_argument("--include-ties", action="store_true", help="also train on tied pairs (target 0.5)")
    j.add_argument("--overwrite", action="store_true", help="replace what is already in --out")
    v = sub.add_parser("serve-judge", help="serve judges over HTTP (OpenRLHF's POST /get_reward protocol)")
    v.add_argument("--judge", action="append", required=True, metavar="SPEC",
                   help="a reward_funcs entry: a name of judges.REWARD_FUNCS, package.module:function, "
                        "learned:PATH or remote:URL; repeat for several (the rewards are their sum)")
    v.add_argument("--port", type=_port, default=5000, help="0 picks a free port (printed)")
    v.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1: this machine only; an IPv6 one such as ::1 serves IPv6)")
    v.add_argument("--judge-timeout", type=_seconds, default=20.0, metavar="SECONDS",
                   help="time limit of one judge call (default 20); a call past it answers 503 naming the judge, "
                        "and GET /health answers 503 while it is still running")
    m = sub.add_parser("make-base", help="rebuild the tiny base model by supervised training from its seed")
    m.add_argument("--task", default="add2")
    m.add_argument("--seed", type=_positive_int, default=0)
    m.add_argument("--out", default=None, help="folder (default: the shipped checkpoint inside the package)")
    m.add_argument("--overwrite", action="store_true", help="replace the base model make-base wrote in --out")
    return p


def run_training(cfg, out: Path, resume: bool = False, quiet: bool = False, overwrite: bool = False,
                 engine: str = "kit", trl_args: dict | None = None, allow_schedule_change: bool = False):
    """Train with a progress bar; write history.jsonl, summary.json and plots into ``out``.

    The folder is locked for the whole run; a new run needs an empty folder (or ``overwrite``),
    ``resume`` a folder with a checkpoint, and a refused resume writes nothing. ``engine="trl"``
    trains with TRL's GRPOTrainer (``engines.trl_engine``) and writes the same files.
    """
    from tqdm.auto import tqdm

    from grpo_kit.data.runfolder import (
        RunLock,
        atomic_write_text,
        check_out_folder,
        check_path,
    )
    from grpo_kit.loop.train import resume_run, setup, train

    out = check_path(out, "--out")
    if engine == "trl" and resume:
        raise UsageError("--resume works with the kit's engine only (TRL's checkpoints are another format); "
                         "start a new --out folder")
    if engine == "trl" and not main_process():  # under accelerate launch: process 0 owns the run folder
        from grpo_kit.engines.trl_engine import train_with_trl

        train_with_trl(cfg, out, overrides=trl_args, quiet=True)
        return None, None
    if (resume and not out.is_dir()) or (out.exists() and not out.is_dir()):
        check_out_folder(out, resume=resume)  # raises (nothing to resume; a file) before a lock makes the folder
    with _no_empty_folder_left(out), RunLock(out):
        data = cfg.dataset if isinstance(cfg.dataset, str) else None  # not a datasets object given in Python
        check_out_folder(out, resume, overwrite, inputs=(_model_folder(cfg.model) if overwrite else None,
                                                         data))  # a model or dataset in out: refused
        t0 = time.time()
        if engine == "trl":
            from grpo_kit.engines.trl_engine import train_with_trl

            atomic_write_text(out / "config.yaml", cfg.to_yaml())
            h = train_with_trl(cfg, out, overrides=trl_args, quiet=quiet)
            return None, _write_results(cfg, h.history, h.evals, out, len(h.history), time.time() - t0, None, quiet,
                                        "trl")
        run = setup(cfg)
        if resume:
            resume_run(run, out, allow_schedule_change)
            if cfg.steps < run.step:
                raise UsageError(f"--steps {cfg.steps}: the run in {out} is already at step {run.step}; "
                                 f"pass a larger --steps to continue it")
        atomic_write_text(out / "config.yaml", cfg.to_yaml())  # only once the resume is accepted
        from grpo_kit.loop.schedules import samples_per_step

        total = -(-cfg.completion_budget // samples_per_step(cfg)) if cfg.completion_budget else cfg.steps  # steps to run
        with tqdm(total=total, desc="GRPO", unit="step", disable=quiet, mininterval=0.5,
                  initial=run.step) as bar:  # closed (its line ended) before an error is printed
            for m in train(cfg, run, out_dir=out):
                bar.update(1)
                bar.set_postfix(reward=f"{m['reward']:.2f}", acc=f"{run.evals[-1][1]:.2f}", refresh=False)
        from grpo_kit.loop.schedules import budget_spent, state

        summary = _write_results(cfg, run.history, run.evals, out, run.step, time.time() - t0, run.stopped_by,
                                 quiet, budget=(budget_spent(run), state(run).generated))
    return run, summary


@contextlib.contextmanager
def _no_empty_folder_left(out: Path):
    """A folder made for a run that fails before writing anything (a dataset refused while loading) is removed again."""
    made = not out.exists()
    try:
        yield
    except BaseException:
        if made and out.is_dir() and not any(out.iterdir()):
            out.rmdir()
        raise


def main_process() -> bool:
    """False in the processes other than the first of a distributed launch (``RANK`` > 0, which
    ``accelerate launch`` / torchrun set): they train but leave the run folder to process 0."""
    return os.environ.get("RANK", "0").strip() in ("", "0")


def _write_results(cfg, history: list[dict], evals: list, out: Path, steps: int, wall: float, stopped_by,
                   quiet: bool, engine: str = "kit", budget: tuple[bool, int] | None = None) -> dict:
    """history.jsonl, curves.png/.html, the diagnostics report and summary.json of a finished run.

    ``budget``: (whether ``completion_budget`` ended the run, completions generated), with a budget."""
    from grpo_kit.data.runfolder import atomic_write_text
    from grpo_kit.eval.diagnostics import diagnose, report
    from grpo_kit.loop.train import write_history
    from grpo_kit.view.plotting import plot_history, plotly_history

    write_history(history, out / "history.jsonl")
    title = f"GRPO on {cfg.model} ({cfg.task}), seed {cfg.seed}" + (f", engine {engine}" if engine != "kit" else "")
    plot_history(history, evals, title, out / "curves.png")
    plotly_history(history, evals, title, out / "curves.html")
    findings = diagnose(history, cfg)
    if not quiet:
        print(report(findings))
    acc = [a for _, a in evals]
    summary = {"base_accuracy": acc[0] if acc else None, "final_accuracy": acc[-1] if acc else None,
               "steps": steps, "wall_seconds": round(wall, 1), "seed": cfg.seed,
               "evals": evals, "stopped_by": stopped_by, "findings": [f.to_dict() for f in findings],
               "engine": engine, "config": cfg.to_dict()}
    if cfg.completion_budget and budget is not None:
        summary["budget_spent"], summary["completions"] = bool(budget[0]), int(budget[1])
    atomic_write_text(out / "summary.json", json.dumps(summary, indent=2) + "\n")
    return summary


def _written(out: Path) -> str:
    """What a run folder holds, for the closing line (only what is really there)."""
    names = ["summary.json", "history.jsonl", "completions.jsonl", "curves.png", "curves.html", "config.yaml"]
    have = [n for n in names if (out / n).is_file()]
    if (out / "checkpoints" / "latest").is_file():
        have.append(f"checkpoints/ (latest {(out / 'checkpoints' / 'latest').read_text().strip()})")
    elif (out / "model" / "config.json").is_file():
        have.append("model/ (the trained model, from_pretrained loads it)")
    elif (out / "model" / "adapter_config.json").is_file():
        have.append("model/ (the trained LoRA adapter, peft's PeftModel.from_pretrained loads it on its base)")
    else:
        have.append("no checkpoint (no step was trained)")
    return f"{out}/: " + ", ".join(have)


def _model_folder(name) -> Path | None:
    """The local or shipped folder a model name loads from (an input no output may overwrite); None for a hub name."""
    from grpo_kit.model.tiny import resolve_model

    try:
        p = resolve_model(name, warn=False)
    except GRPOKitError:
        return None
    return p if isinstance(p, Path) else None


def cmd_demo(args) -> int:
    from grpo_kit.config import GRPOConfig
    from grpo_kit.data.tasks import heldout_split
    from grpo_kit.eval.inference import greedy_accuracy
    from grpo_kit.model.tiny import load_model

    cfg = GRPOConfig(seed=args.seed)
    if args.steps is not None:
        cfg = cfg.replace(steps=args.steps)
    # the default folder is the demo's own: each demo replaces the last one (make demo is idempotent)
    overwrite = args.overwrite or args.out is None
    out = Path(args.out if args.out is not None else "runs/demo")
    base, tok = load_model(cfg.model)
    examples = heldout_split(cfg.task)[:8]
    _, before, _ = greedy_accuracy(base, tok, examples, return_completions=True)
    print(f"grpo-kit demo: GRPO on the shipped tiny model, task {cfg.task}, seed {cfg.seed}, {cfg.steps} steps "
          f"of {cfg.num_prompts} prompts x {cfg.num_generations} completions")
    run, summary = run_training(cfg, out, overwrite=overwrite)
    if _ended_early(summary, cfg):
        return _stopped_early(summary, cfg, out)
    _, after, _ = greedy_accuracy(run.policy, run.tokenizer, examples, return_completions=True)
    print("\nsample completions (the model writes the sum least-significant digit first):")
    print(f"  {'prompt':<10}{'correct':<10}{'before':<10}{'after':<10}")
    for it, b, a in zip(examples, before, after):
        print(f"  {it['prompt']:<10}{it['completion']:<10}{b:<10}{a:<10}")
    print(f"\n  held-out greedy accuracy ({len(run.eval_items)} problems): "
          f"base {summary['base_accuracy']:.1%} -> after GRPO {summary['final_accuracy']:.1%} "
          f"({100 * (summary['final_accuracy'] - summary['base_accuracy']):+.1f} points) "
          f"in {summary['wall_seconds']:.0f} s")
    print(f"  wrote {_written(out)}")
    return 0


def cmd_train(args) -> int:
    from grpo_kit.config import GRPOConfig

    cfg = GRPOConfig.from_yaml(args.config)
    changes = {k: v for k, v in {"model": args.model, "dataset": args.dataset, "dataset_split": args.dataset_split,
                                 "dataset_config": args.dataset_config, "steps": args.steps}.items()
               if v is not None}
    cfg = cfg.replace(**changes)
    if cfg.dataset is not None:  # needs no torch: a Hub name offline (or a missing file) fails in a fraction of a second
        from grpo_kit.data.sources import check_source, hub_reachable, source_of

        check_source(source_of(cfg.dataset), cfg.dataset_split, cfg.dataset_config, online=hub_reachable)
    from grpo_kit.loop.checks import check_config  # imports torch

    cfg = check_config(cfg)  # every name it gives, before a folder is made or a model loaded
    if args.trl_arg and args.engine != "trl":
        raise UsageError("--trl-arg needs --engine trl")
    trl_args = None
    if args.engine == "trl":
        from grpo_kit.engines.trl_engine import (
            check_trl_engine,
            check_trl_packages,
            num_processes,
            parse_trl_overrides,
            trl_kwargs,
        )

        check_trl_engine(cfg)  # the fields TRL's trainer has no equivalent of, before a folder is made
        trl_kwargs(cfg, num_processes())  # what TRL cannot express with this many processes, before a folder is made
        trl_args = parse_trl_overrides(args.trl_arg, cfg)
        check_trl_packages(trl_args)  # before the run folder is made
    if args.allow_schedule_change and not args.resume:
        raise UsageError("--allow-schedule-change only applies with --resume")
    _, summary = run_training(cfg, args.out, resume=args.resume, overwrite=args.overwrite, engine=args.engine,
                              trl_args=trl_args, allow_schedule_change=args.allow_schedule_change)
    if summary is None:  # not process 0 of a distributed launch: process 0 reports
        return 0
    if _ended_early(summary, cfg):
        return _stopped_early(summary, cfg, args.out)
    acc = (f"accuracy {summary['base_accuracy']:.1%} -> {summary['final_accuracy']:.1%}"
           if summary["base_accuracy"] is not None else "accuracy not measured")
    budget = (f" (completion_budget={cfg.completion_budget} spent: {summary['completions']} completions generated)"
              if summary.get("budget_spent") else "")
    print(f"{acc} after {summary['steps']} steps{budget}; wrote {_written(Path(args.out))}")
    return 0


def _ended_early(summary: dict, cfg) -> bool:
    """A signal (or the TRL engine's run) ended it before ``cfg.steps``; a spent ``completion_budget``
    is a normal end, however many steps it took."""
    return summary.get("stopped_by") is not None or (summary["steps"] < cfg.steps and not summary.get("budget_spent"))


def _stopped_early(summary: dict, cfg, out) -> int:
    """A run that Ctrl-C, SIGTERM or SIGHUP ended after a step: say where it stopped and how to continue; exit 130."""
    why = summary.get("stopped_by") or "Ctrl-C"
    if summary["steps"] == 0:
        msg = (f"grpo-kit: stopped by {why} before the first step; nothing was trained; start again with "
               f"--overwrite --out {out}")
    else:
        msg = (f"grpo-kit: stopped by {why} after step {summary['steps']} of {cfg.steps}; the checkpoint, "
               f"history and plots are in {out}; continue with --resume --out {out}")
    try:  # after SIGHUP the terminal may be gone
        print(msg, file=sys.stderr)
    except (OSError, ValueError):
        pass
    return 130


def _eval_sampling(args):
    """``grpo-kit eval``'s temperature and :class:`SamplingControls`, each flag checked by the rule of the
    GRPOConfig field of its name (the config's own error, after the flag); they act on sampled completions
    only, so a flag without ``--samples`` or ``--self-consistency`` is refused."""
    from grpo_kit.config import GRPOConfig
    from grpo_kit.errors import ConfigError
    from grpo_kit.model.sampling import SamplingControls

    given = {name: getattr(args, name) for name, *_ in EVAL_SAMPLING if getattr(args, name) is not None}
    for name, value in given.items():
        try:
            GRPOConfig(**{name: value}).validate()
        except ConfigError as e:
            raise UsageError(f"--{name.replace('_', '-')}: {e}") from None
    if given and not (args.samples or args.self_consistency):
        raise UsageError(f"--{next(iter(given)).replace('_', '-')} sets how completions are sampled, and greedy "
                         f"accuracy samples none; add --samples K or --self-consistency K")
    values = {name: kind(given.get(name, off)) for name, kind, off, _ in EVAL_SAMPLING}
    return values.pop("temperature"), SamplingControls(**values)


def cmd_eval(args) -> int:
    from grpo_kit.data.tasks import heldout_split, load_items
    from grpo_kit.eval.inference import greedy_accuracy, pass_at_k_eval
    from grpo_kit.model.tiny import load_model

    if args.batch_size < 1:
        raise UsageError("--batch-size must be at least 1")
    if args.self_consistency == 1:
        raise UsageError("--self-consistency 1 is one sample, no vote; pass K >= 2 (or 0 for none)")
    temperature, controls = _eval_sampling(args)
    model, tok = load_model(args.model)
    items = load_items(args.dataset) if args.dataset else heldout_split(args.task)
    if args.dataset:
        from grpo_kit.eval.inference import check_prompts, max_answer_tokens
        items = check_prompts(model, tok, items, max_answer_tokens(items), where=args.dataset)
    acc = greedy_accuracy(model, tok, items, batch_size=args.batch_size)
    result = {"items": len(items), "greedy_accuracy": acc}
    if args.samples:
        result.update(pass_at_k_eval(model, tok, items, args.samples, temperature, batch_size=args.batch_size,
                                     controls=controls))
    if args.self_consistency:
        from grpo_kit.eval.inference import self_consistency_eval

        result.update(self_consistency_eval(model, tok, items, args.self_consistency, temperature,
                                            batch_size=args.batch_size, controls=controls))
    print(json.dumps(result))
    return 0


def cmd_export(args) -> int:
    """The latest checkpoint's model into ``--to`` (see export.py): built in a temp folder inside ``--to``,
    then the previous export's files (only those) are removed and the new ones renamed into place."""
    import os

    from grpo_kit.data.runfolder import check_output, check_path, remove_own
    from grpo_kit.engines.export import OWN_FILES, SKIP, vllm_command, write_export
    from grpo_kit.loop.train import STATE_FILE, latest_checkpoint, read_trainer_state

    run_dir, dest = check_path(args.run, "--run"), check_path(args.to, "--to")
    ckpt = latest_checkpoint(run_dir)
    if ckpt is None:
        ckpt, run_config = _trl_run_model(run_dir, args.run)
    else:
        state = read_trainer_state(ckpt)  # CheckpointError for a crafted or broken file; runs no code
        run_config = state.get("config") if isinstance(state, dict) else None
        if not isinstance(run_config, dict):
            raise UsageError(f"{ckpt}: {STATE_FILE} holds no run config; export an intact checkpoint")
        if state.get("kind") == "offline":  # it sampled nothing: the export samples with GRPOConfig's defaults
            from grpo_kit.config import GRPOConfig

            run_config = {**GRPOConfig().to_dict(), "model": run_config.get("model")}
    here, there = run_dir.resolve(), dest.resolve()
    if here == there or here in there.parents or there in here.parents:
        raise UsageError(f"--to {dest} overlaps the run folder {run_dir}; export to a folder outside the run")
    base = _model_folder(run_config.get("model")) if run_config.get("lora") is not None else None
    own = (*OWN_FILES, *(f.name for f in ckpt.iterdir() if f.is_file() and f.name not in SKIP))  # what it copies
    old = check_output(dest, own, args.overwrite, inputs=(base,), what="--to", marker="grpo_config.yaml",
                       kind="an earlier export")
    made = not dest.exists()
    dest.mkdir(parents=True, exist_ok=True)
    tmp = dest / f".grpo-kit-export-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir()
        write_export(ckpt, tmp, run_config)  # weights (a LoRA adapter merged), tokenizer, generation_config.json
        if (run_dir / "config.yaml").is_file():
            shutil.copy2(run_dir / "config.yaml", tmp / "grpo_config.yaml")
        else:
            import yaml
            (tmp / "grpo_config.yaml").write_text(yaml.safe_dump(run_config, sort_keys=False))
        remove_own(dest, old)  # the previous export's files only, once the new one is whole
        for f in sorted(tmp.iterdir()):
            os.replace(f, dest / f.name)
        tmp.rmdir()
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if made and dest.is_dir() and not any(dest.iterdir()):
            dest.rmdir()
        from grpo_kit.data.runfolder import disk_full, is_disk_full
        if is_disk_full(e):
            raise disk_full(e, dest, "nothing was exported") from e
        raise
    merged = " (LoRA adapter merged into the weights)" if run_config.get("lora") is not None else ""
    print(f"exported {ckpt} -> {dest}{merged}; load it with AutoModelForCausalLM.from_pretrained and "
          f"AutoTokenizer.from_pretrained, or serve it with vLLM:\n  {vllm_command(dest)}")
    return 0


def _trl_run_model(run_dir: Path, shown) -> tuple[Path, dict]:
    """An ``--engine trl`` run's ``model/`` folder (full weights or a LoRA adapter) and its settings.

    The settings are ``config.yaml`` read as plain YAML over the defaults (nothing it names is
    imported). UsageError when ``run_dir`` is no finished run of either engine.
    """
    import yaml

    from grpo_kit.config import GRPOConfig

    model = run_dir / "model"
    if not ((model / "config.json").is_file() or (model / "adapter_config.json").is_file()):
        if (run_dir / "history.jsonl").is_file() and not (run_dir / "summary.json").is_file():
            raise UsageError(f"{shown}: the run has no checkpoints/latest and no model/ (an --engine trl run saves "
                             f"its model only when it finishes); train it to the end, then export")
        raise UsageError(f"{shown}: neither checkpoints/latest (a kit run) nor model/ (an --engine trl run); "
                         f"pass the --out folder of a finished run")
    try:
        saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    except (OSError, yaml.YAMLError) as e:
        raise UsageError(f"{shown}: cannot read config.yaml of the --engine trl run ({type(e).__name__}); the "
                         f"export needs the run's settings (model, temperature)") from None
    if not isinstance(saved, dict):
        raise UsageError(f"{shown}: config.yaml is not a mapping of settings; export a run grpo-kit wrote")
    return model, {**GRPOConfig().to_dict(), **saved}


def cmd_export_verl(args) -> int:
    """Print ``python3 -m verl.trainer.main_ppo`` with ``verl_overrides(cfg)``; with ``--data-out`` write the data too."""
    from grpo_kit.config import GRPOConfig
    from grpo_kit.engines.verl_export import verl_command, verl_overrides, verl_rows
    from grpo_kit.loop.checks import check_config

    cfg = check_config(GRPOConfig.from_yaml(args.config))
    overrides = verl_overrides(cfg, max_prompt_length=args.max_prompt_length, rollout=args.rollout)
    files = {}
    if args.data_out:
        from datasets import Dataset, disable_progress_bars
        from grpo_kit.data.runfolder import check_path
        from grpo_kit.data.tasks import get_task, heldout_split
        from grpo_kit.loop.train import dataset_items

        disable_progress_bars()
        out = check_path(args.data_out, "--data-out")
        if out.exists() and not out.is_dir():
            raise UsageError(f"--data-out {out} is a file; choose a folder")
        targets = [out / "train.parquet", out / "val.parquet"]
        there = [p.name for p in targets if p.exists()]
        if there and not args.overwrite:
            raise UsageError(f"--data-out {out} already holds {' and '.join(there)}; pass --overwrite to replace "
                             f"them (nothing else there is touched), or choose another folder")
        if cfg.dataset and any(p.exists() and p.resolve() == Path(cfg.dataset).expanduser().resolve()
                               for p in targets):
            raise UsageError(f"--data-out {out}: the config's dataset {cfg.dataset} would be replaced; choose "
                             f"another folder")
        out.mkdir(parents=True, exist_ok=True)
        train = dataset_items(cfg) if cfg.dataset is not None else get_task(cfg.task).splits()["train"]
        for path, items in zip(targets, (train, heldout_split(cfg.task)[:cfg.eval_size])):
            files[path.stem] = str(path.resolve())
            tmp = path.with_name(f".{path.name}.tmp")  # written whole, then renamed over the old file
            try:
                Dataset.from_list(verl_rows(items)).to_parquet(str(tmp))
                os.replace(tmp, path)
            finally:
                tmp.unlink(missing_ok=True)
    print(verl_command(overrides, files.get("train", "TRAIN.parquet"), files.get("val", "VAL.parquet")))
    return 0


def cmd_pregen(args) -> int:
    import random

    from grpo_kit.data.tasks import get_task
    from grpo_kit.lab.offline import pregenerate
    from grpo_kit.model.tiny import load_model
    from grpo_kit.rewards.pairwise import write_preference_groups

    if args.k < 2:
        raise UsageError(f"--k {args.k}: a preference group needs at least 2 responses")
    out, model_dir = Path(os.path.expanduser(args.out)), _model_folder(args.model)
    if out.is_dir():
        raise UsageError(f"--out {out} is a folder; pregen writes one jsonl file: name it, e.g. {out / 'prefs.jsonl'}")
    if model_dir is not None and model_dir.resolve() in out.resolve().parents:
        raise UsageError(f"--out {out} is inside the model folder {model_dir} it reads; write it elsewhere")
    model, tok = load_model(args.model)
    train = get_task(args.task).splits()["train"]
    items = random.Random(args.seed).sample(train, min(args.prompts, len(train)))
    records = pregenerate(model, tok, items, k=args.k, seed=args.seed)
    write_preference_groups(records, args.out)
    clear = sum(1 for r in records for row in r["preference_matrix"] for v in row if v == 1.0)
    print(f"wrote {len(records)} groups of {args.k} responses to {args.out} ({clear} clear right-over-wrong pairs)")
    return 0


def cmd_train_offline(args) -> int:
    """An offline preference run (``lab/offline_run.py``) into a run folder with the online run's rules:
    every input is checked before the folder is touched; a refused resume writes nothing."""
    from tqdm.auto import tqdm

    from grpo_kit.config import OfflineConfig
    from grpo_kit.data.runfolder import (
        RunLock,
        atomic_write_text,
        check_out_folder,
        check_path,
    )
    from grpo_kit.lab.offline_run import (
        offline_inputs,
        resume_offline,
        setup_offline,
        train_offline_run,
    )

    cfg = OfflineConfig.from_yaml(args.config)
    records, eval_items = offline_inputs(cfg)  # the preference file, the model's path, the task
    out = check_path(args.out, "--out")
    if (args.resume and not out.is_dir()) or (out.exists() and not out.is_dir()):
        check_out_folder(out, resume=args.resume)  # raises (nothing to resume; a file) before a lock makes the folder
    with _no_empty_folder_left(out), RunLock(out):
        check_out_folder(out, args.resume, args.overwrite,
                         inputs=(_model_folder(cfg.model) if args.overwrite else None, cfg.preferences))
        run = setup_offline(cfg, records, eval_items)
        if args.resume:
            resume_offline(run, out)
            if cfg.steps < run.step:
                raise UsageError(f"steps: {cfg.steps}: the run in {out} is already at step {run.step}; set a larger "
                                 f"steps in {args.config} to continue it")
        atomic_write_text(out / "config.yaml", cfg.to_yaml())  # only once the resume is accepted
        t0 = time.time()
        with tqdm(total=cfg.steps, desc=f"offline {cfg.loss}", unit="step", mininterval=0.5, initial=run.step) as bar:
            for m in train_offline_run(run, out_dir=out):
                bar.update(1)
                bar.set_postfix(loss=f"{m['loss']:.3f}", acc=f"{run.evals[-1][1]:.2f}", refresh=False)
        summary = _write_offline_results(run, out, time.time() - t0)
    print(f"accuracy {summary['base_accuracy']:.1%} -> {summary['final_accuracy']:.1%} after {run.step} offline "
          f"steps ({cfg.loss} loss); wrote {_written(out)}")
    return 0


def _write_offline_results(run, out: Path, wall: float) -> dict:
    """history.jsonl (whole), curves.png/.html (loss, accuracy, the winners' NLL, grad norm) and summary.json."""
    from grpo_kit.data.runfolder import atomic_write_text
    from grpo_kit.loop.train import write_history
    from grpo_kit.view.plotting import OFFLINE_PANELS, plot_history, plotly_history

    cfg = run.cfg
    write_history(run.history, out / "history.jsonl")
    title = f"offline {cfg.loss} on {Path(cfg.preferences).name} ({cfg.model}), seed {cfg.seed}"
    plot_history(run.history, run.evals, title, out / "curves.png", panels=OFFLINE_PANELS)
    plotly_history(run.history, run.evals, title, out / "curves.html", panels=OFFLINE_PANELS)
    summary = {"kind": "offline", "base_accuracy": run.evals[0][1], "final_accuracy": run.evals[-1][1],
               "steps": run.step, "wall_seconds": round(wall, 1), "seed": cfg.seed, "evals": run.evals,
               "config": cfg.to_dict()}
    atomic_write_text(out / "summary.json", json.dumps(summary, indent=2) + "\n")
    return summary


def cmd_train_judge(args) -> int:
    """Train a learned judge on preference groups, hold out whole groups, save it with its metadata."""
    import math

    from grpo_kit.data.runfolder import (
        MODEL_FILES,
        check_output,
        check_path,
        remove_own,
    )
    from grpo_kit.rewards.learned_judge import (
        METADATA,
        pairwise_agreement,
        preference_pairs,
        save_learned_judge,
        split_groups,
        train_learned_judge,
    )
    from grpo_kit.rewards.pairwise import load_preference_groups

    out = check_path(args.out, "--out")
    old = check_output(out, (*MODEL_FILES, METADATA), args.overwrite, inputs=(args.data, _model_folder(args.base)),
                       marker=METADATA,
                       kind="an earlier learned judge")  # deletes nothing yet: training may still fail
    for flag, value, ok, rule in (("--lr", args.lr, math.isfinite(args.lr) and args.lr > 0, "a finite number > 0"),
                                  ("--steps", args.steps, args.steps >= 1, "at least 1"),
                                  ("--batch-size", args.batch_size, args.batch_size >= 1, "at least 1 pair per step"),
                                  ("--heldout", args.heldout, 0 <= args.heldout < 1, "a fraction in [0, 1)")):
        if not ok:
            raise UsageError(f"{flag} {value}: choose {rule}")
    records = load_preference_groups(args.data)
    train, held = split_groups(records, args.heldout, args.seed)
    model, tok, report = train_learned_judge(train, steps=args.steps, batch_size=args.batch_size, lr=args.lr,
                                             seed=args.seed, base=args.base, include_ties=args.include_ties,
                                             log=print)
    meta = {"data": str(args.data), "base": str(args.base), "seed": args.seed, "steps": args.steps,
            "batch_size": args.batch_size, "lr": args.lr, "heldout_frac": args.heldout,
            "include_ties": args.include_ties, "train_groups": len(train), "heldout_groups": len(held), **report}
    if held:
        meta["heldout_pairs"] = len(preference_pairs(held))
    if held and not meta["heldout_pairs"]:  # agreement is measured on pairs with a preferred side only
        print(f"the {len(held)} held-out groups have only tied pairs: agreement not measured")
    elif held:
        meta["heldout_agreement"] = pairwise_agreement(model, tok, held)
        print(f"held-out pairwise agreement {meta['heldout_agreement']:.3f} on {meta['heldout_pairs']} non-tied "
              f"pairs of {len(held)} groups never trained on (chance 0.5)")
    else:
        print("no held-out groups (--heldout 0): agreement not measured")
    remove_own(out, old)  # the previous judge's files only
    save_learned_judge(model, tok, out, meta)
    print(f"wrote {out}/ (use it as reward_funcs: [learned:{out}])")
    return 0


def cmd_serve_judge(args) -> int:
    """Serve judges until Ctrl-C; the first line printed names the bound address."""
    from grpo_kit.rewards.serve import make_server

    server = make_server(args.judge, args.host, args.port, judge_timeout_s=args.judge_timeout)
    host, port = server.server_address[:2]
    shown = f"[{host}]" if ":" in host else host  # an IPv6 address, as a URL writes it
    print(f"grpo-kit serve-judge: listening on http://{shown}:{port}/get_reward (judges: "
          f"{', '.join(map(str, args.judge))})", flush=True)
    if host not in ("127.0.0.1", "localhost", "::1"):
        print(f"grpo-kit: warning: bound to {host}: anyone who can reach this machine can call the judges",
              file=sys.stderr)
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0


def cmd_make_base(args) -> int:
    """Train the tiny base; the shipped folder is replaced each time, another ``--out`` by the same rule as export."""
    from grpo_kit.data.runfolder import (
        MODEL_FILES,
        check_output,
        check_path,
        remove_own,
    )
    from grpo_kit.lab.base import BASE_REPORT, save_base, train_base
    from grpo_kit.model.tiny import shipped_path

    out = check_path(args.out, "--out") if args.out else shipped_path("tiny" if args.task == "add2"
                                                                        else f"tiny-{args.task}")
    old = check_output(out, (*MODEL_FILES, BASE_REPORT), args.overwrite or args.out is None, marker=BASE_REPORT,
                       kind="an earlier make-base model")
    model, tok, report = train_base(task=args.task, seed=args.seed)
    remove_own(out, old)  # the previous base's files only, once the new one is trained
    save_base(model, tok, report, out)
    print(json.dumps(report))
    return 0


COMMANDS = {"demo": cmd_demo, "train": cmd_train, "eval": cmd_eval, "export": cmd_export, "pregen": cmd_pregen,
            "train-offline": cmd_train_offline, "make-base": cmd_make_base, "train-judge": cmd_train_judge, "serve-judge": cmd_serve_judge,
            "export-verl": cmd_export_verl}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # "Loading weights" bars: noise for a one-file tiny model
    hf_logging.set_verbosity_error()
    debug = "--debug" in argv  # anywhere on the line, before or after the command
    argv = [a for a in argv if a != "--debug"]
    _show_warnings()
    try:
        args = build_parser().parse_args(argv)
        if args.command is None:
            raise UsageError("no command given: use one of demo, train, eval, export, export-verl, pregen, "
                             "train-offline, make-base, train-judge, serve-judge (see grpo-kit --help)")
        for name in ("out", "to", "config", "dataset", "model", "run", "data", "data_out"):
            if isinstance(getattr(args, name, None), str):
                from grpo_kit.data.runfolder import check_path
                check_path(getattr(args, name), f"--{name}")
        return COMMANDS[args.command](args)
    except GRPOKitError as e:
        if debug:
            raise
        print(f"grpo-kit: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # a path the user gave cannot be read or written
        if debug:
            raise
        name = f": {str(e.filename)[:200]}{'...' if len(str(e.filename)) > 200 else ''}" if e.filename else ""
        print(f"grpo-kit: error: {str(e.strerror or e)[:300]}{name}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("grpo-kit: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
