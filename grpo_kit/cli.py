"""``grpo-kit``: the command line. A user mistake prints one line and exits 2; ``--debug`` shows the traceback."""
from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import time
from pathlib import Path

from .errors import GRPOKitError


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
        raise UsageError(f"{message} (see 'grpo-kit {self.prog.split()[-1]} --help')")


def _positive_int(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {s!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {v}")
    return v


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="grpo-kit", description="Learn and experiment with GRPO on a tiny model or a real one.")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = p.add_subparsers(dest="command", parser_class=_Parser)
    d = sub.add_parser("demo", help="GRPO on the shipped tiny model: before/after accuracy, plots")
    d.add_argument("--seed", type=_positive_int, default=0)
    d.add_argument("--steps", type=_positive_int, default=None, help="GRPO steps (default: the config's)")
    d.add_argument("--out", default="runs/demo", help="output folder (default runs/demo)")
    t = sub.add_parser("train", help="GRPO from a YAML config")
    t.add_argument("--config", required=True)
    t.add_argument("--model")
    t.add_argument("--dataset")
    t.add_argument("--steps", type=_positive_int)
    t.add_argument("--out", default="runs/train")
    t.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in --out")
    e = sub.add_parser("eval", help="greedy accuracy and pass@k of a model on a dataset")
    e.add_argument("--model", default="tiny")
    e.add_argument("--dataset", help="jsonl items (default: the task's held-out test split)")
    e.add_argument("--task", default="add2")
    e.add_argument("--samples", type=_positive_int, default=0, help="K sampled completions per item for pass@K")
    x = sub.add_parser("export", help="copy a run's latest model to a folder any HF/vLLM loader reads")
    x.add_argument("--run", required=True)
    x.add_argument("--to", required=True)
    g = sub.add_parser("pregen", help="sample K responses per prompt, judge every pair, write preference groups")
    g.add_argument("--model", default="tiny")
    g.add_argument("--task", default="add2")
    g.add_argument("--prompts", type=_positive_int, default=256, help="prompts from the task's train split")
    g.add_argument("--k", type=_positive_int, default=8, help="responses per prompt")
    g.add_argument("--seed", type=_positive_int, default=0)
    g.add_argument("--out", required=True, help="jsonl file to write")
    m = sub.add_parser("make-base", help="rebuild the tiny base model by supervised training from its seed")
    m.add_argument("--task", default="add2")
    m.add_argument("--seed", type=_positive_int, default=0)
    m.add_argument("--out", default=None, help="folder (default: the shipped checkpoint inside the package)")
    return p


def run_training(cfg, out: Path, resume: bool = False, quiet: bool = False):
    """Train with a progress bar; write history.jsonl, summary.json and plots into ``out``."""
    from tqdm.auto import tqdm

    from .plotting import plot_history, plotly_history
    from .train import setup, train, write_history

    out.mkdir(parents=True, exist_ok=True)
    cfg.to_yaml(out / "config.yaml")
    t0 = time.time()
    run = setup(cfg)
    from .schedules import samples_per_step

    total = -(-cfg.completion_budget // samples_per_step(cfg)) if cfg.completion_budget else cfg.steps  # [steer]
    bar = tqdm(total=total, desc="GRPO", unit="step", disable=quiet, mininterval=0.5)
    for m in train(cfg, run, out_dir=out, resume=resume):
        if bar.n == 0 and run.step > 1:
            bar.update(run.step - 1)
        bar.update(1)
        bar.set_postfix(reward=f"{m['reward']:.2f}", acc=f"{run.evals[-1][1]:.2f}", refresh=False)
    bar.close()
    wall = time.time() - t0
    write_history(run.history, out / "history.jsonl")
    title = f"GRPO on {cfg.model} ({cfg.task}), seed {cfg.seed}"
    plot_history(run.history, run.evals, title, out / "curves.png")
    plotly_history(run.history, run.evals, title, out / "curves.html")
    summary = {"base_accuracy": run.evals[0][1], "final_accuracy": run.evals[-1][1], "steps": run.step,
               "wall_seconds": round(wall, 1), "seed": cfg.seed, "evals": run.evals,
               "config": cfg.to_dict()}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return run, summary


def cmd_demo(args) -> int:
    from .config import GRPOConfig
    from .inference import greedy_accuracy
    from .tasks import heldout_split
    from .tiny import load_model

    cfg = GRPOConfig(seed=args.seed)
    if args.steps is not None:
        cfg = cfg.replace(steps=args.steps)
    out = Path(args.out)
    base, tok = load_model(cfg.model)
    examples = heldout_split(cfg.task)[:8]
    _, before, _ = greedy_accuracy(base, tok, examples, return_completions=True)
    print(f"grpo-kit demo: GRPO on the shipped tiny model, task {cfg.task}, seed {cfg.seed}, {cfg.steps} steps "
          f"of {cfg.num_prompts} prompts x {cfg.num_generations} completions")
    run, summary = run_training(cfg, out)
    if summary["steps"] < cfg.steps:
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
    print(f"  wrote {out}/summary.json, history.jsonl, curves.png, curves.html, checkpoints/")
    return 0


def cmd_train(args) -> int:
    from .config import GRPOConfig

    cfg = GRPOConfig.from_yaml(args.config)
    changes = {k: v for k, v in {"model": args.model, "dataset": args.dataset, "steps": args.steps}.items()
               if v is not None}
    cfg = cfg.replace(**changes)
    _, summary = run_training(cfg, Path(args.out), resume=args.resume)
    if summary["steps"] < cfg.steps:
        return _stopped_early(summary, cfg, args.out)
    print(f"accuracy {summary['base_accuracy']:.1%} -> {summary['final_accuracy']:.1%} "
          f"after {summary['steps']} steps; wrote {args.out}")
    return 0


def _stopped_early(summary: dict, cfg, out) -> int:
    """A run that Ctrl-C ended after a step: say where it stopped and how to continue; exit 130."""
    print(f"grpo-kit: stopped by Ctrl-C after step {summary['steps']} of {cfg.steps}; the checkpoint, "
          f"history and plots are in {out}; continue with --resume --out {out}", file=sys.stderr)
    return 130


def cmd_eval(args) -> int:
    from .inference import greedy_accuracy, pass_at_k_eval
    from .tasks import load_items, heldout_split
    from .tiny import load_model

    model, tok = load_model(args.model)
    items = load_items(args.dataset) if args.dataset else heldout_split(args.task)
    acc = greedy_accuracy(model, tok, items)
    result = {"items": len(items), "greedy_accuracy": acc}
    if args.samples:
        result.update(pass_at_k_eval(model, tok, items, args.samples))
    print(json.dumps(result))
    return 0


def cmd_export(args) -> int:
    from .train import latest_checkpoint

    ckpt = latest_checkpoint(args.run)
    if ckpt is None:
        raise UsageError(f"{args.run}: no checkpoints/latest; pass the --out folder of a finished run")
    dest = Path(args.to)
    dest.mkdir(parents=True, exist_ok=True)
    for f in ckpt.iterdir():
        if f.name != "trainer_state.pt":
            shutil.copy2(f, dest / f.name)
    if (Path(args.run) / "config.yaml").is_file():
        shutil.copy2(Path(args.run) / "config.yaml", dest / "grpo_config.yaml")
    print(f"exported {ckpt} -> {dest} (load with AutoModelForCausalLM.from_pretrained or vllm.LLM)")
    return 0


def cmd_pregen(args) -> int:
    import random

    from .offline import pregenerate
    from .preferences import write_preference_groups
    from .tasks import get_task
    from .tiny import load_model

    if args.k < 2:
        raise UsageError(f"--k {args.k}: a preference group needs at least 2 responses")
    model, tok = load_model(args.model)
    train = get_task(args.task).splits()["train"]
    items = random.Random(args.seed).sample(train, min(args.prompts, len(train)))
    records = pregenerate(model, tok, items, k=args.k, seed=args.seed)
    write_preference_groups(records, args.out)
    clear = sum(1 for r in records for row in r["preference_matrix"] for v in row if v == 1.0)
    print(f"wrote {len(records)} groups of {args.k} responses to {args.out} ({clear} clear right-over-wrong pairs)")
    return 0


def cmd_make_base(args) -> int:
    from .tiny import shipped_path, train_base

    out = Path(args.out) if args.out else shipped_path("tiny" if args.task == "add2" else f"tiny-{args.task}")
    _, _, report = train_base(task=args.task, seed=args.seed, out_dir=out)
    print(json.dumps(report))
    return 0


COMMANDS = {"demo": cmd_demo, "train": cmd_train, "eval": cmd_eval, "export": cmd_export, "pregen": cmd_pregen,
            "make-base": cmd_make_base}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # "Loading weights" bars: noise for a one-file tiny model
    hf_logging.set_verbosity_error()
    debug = "--debug" in argv
    _show_warnings()
    try:
        args = build_parser().parse_args(argv)
        if args.command is None:
            raise UsageError("no command given: use one of demo, train, eval, export, pregen, make-base "
                             "(see grpo-kit --help)")
        return COMMANDS[args.command](args)
    except GRPOKitError as e:
        if debug:
            raise
        print(f"grpo-kit: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # a path the user gave cannot be read or written
        if debug:
            raise
        print(f"grpo-kit: error: {e.strerror or e}{f': {e.filename}' if e.filename else ''}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("grpo-kit: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
