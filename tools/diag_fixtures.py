"""Write the run histories the diagnostics tests read (tests/data/*.jsonl), trimmed to the metrics
``diagnostics.diagnose`` reads and rounded, so the fixtures stay small.

    python tools/diag_fixtures.py healthy_seed0 healthy_nb02_grpo failure_sign_error ...
    python tools/diag_fixtures.py all
    python tools/diag_fixtures.py heldout        # tests/data/heldout/: seed 11, never used to set a threshold

healthy_seedN: ``grpo-kit demo --seed N`` (500 steps, defaults); healthy_nb02_<v>: the notebook-02
variant v (200 steps, num_iterations=2); failure_<name>: ``failures.run_failure(name, seed=0)``;
heldout/failure_<name>_s<seed>[_fixed]: ``run_failure(name, seed, fixed)``; heldout/healthy_seed<N>:
the demo at that seed. tests/lab/test_failures.py regenerates them in its ``full`` tests and checks the
same claims.
"""
import json
import re
import sys
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "tests" / "data"
HELDOUT_SEED = 11
KEEP = ("step", "num_generations", "reward", "reward_std", "frac_reward_zero_std", "gold_reward", "entropy", "kl", "grad_norm",
        "skipped", "learning_rate", "accuracy", "advantages/max_abs", "completions/distinct_frac",
        "completions/mean_length", "completions/clipped_ratio", "completions/mean_length_right",
        "completions/mean_length_wrong", "completions/clipped_ratio_wrong")
NB02 = {  # tools/nb_02.py, section 4
    "grpo": dict(scale_rewards="group", loss_type="grpo"),
    "dr_grpo": dict(scale_rewards="none", loss_type="dr_grpo"),
    "dapo": dict(scale_rewards="group", loss_type="dapo", epsilon_high=0.28),
    "gspo": dict(scale_rewards="group", loss_type="grpo", importance_sampling_level="sequence", epsilon=3e-4,
                 epsilon_high=4e-4),
}


def trim(history):
    return [{k: (round(m[k], 6) if isinstance(m[k], float) else m[k]) for k in KEEP if k in m} for m in history]


def history_of(name, threads=1):
    from grpo_kit import GRPOConfig, setup, train
    from grpo_kit.lab.failures import run_failure

    name = name.removeprefix("heldout/")
    seeded = re.fullmatch(r"failure_(.+)_s(\d+)(_fixed)?", name)
    if seeded:
        return run_failure(seeded[1], seed=int(seeded[2]), fixed=bool(seeded[3]), threads=threads).history
    if name.startswith("failure_"):
        return run_failure(name[len("failure_"):], seed=0, threads=threads).history
    if name.startswith("healthy_seed"):
        cfg = GRPOConfig(seed=int(name[len("healthy_seed"):]), threads=threads)
    elif name.startswith("healthy_nb02_"):
        cfg = GRPOConfig(seed=0, steps=200, eval_every=66, threads=threads, num_iterations=2,
                         **NB02[name[len("healthy_nb02_"):]])
    else:
        raise SystemExit(f"unknown fixture {name!r}")
    run = setup(cfg)
    for _ in train(cfg, run):
        pass
    return run.history


def write(name, history):
    (DATA / name).parent.mkdir(parents=True, exist_ok=True)
    (DATA / f"{name}.jsonl").write_text("".join(json.dumps(m) + "\n" for m in trim(history)))


if __name__ == "__main__":
    from grpo_kit.lab.failures import FAILURES

    names = sys.argv[1:]
    if names == ["all"]:
        names = ([f"healthy_seed{s}" for s in range(3)] + [f"healthy_nb02_{v}" for v in NB02]
                 + [f"failure_{n}" for n in FAILURES])
    elif names == ["heldout"]:
        names = [f"heldout/healthy_seed{HELDOUT_SEED}"] + [f"heldout/failure_{n}_s{HELDOUT_SEED}{x}"
                                                         for n in FAILURES for x in ("", "_fixed")]
    for n in names:
        write(n, history_of(n))
        print("wrote", DATA / f"{n}.jsonl", flush=True)
