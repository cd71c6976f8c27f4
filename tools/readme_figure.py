"""Draw the README's picture: a failure and its fix on the dashboard's panels, the finding marked.

    .venv/bin/python tools/readme_figure.py                  # writes docs/img/failure_and_fix.png

It trains the failure lab's ``reward_hacking`` run (a proxy judge that pays for length, with the
gold judge logged beside it) and the same run with its fix, both on the tiny model (about a
minute on 2 cores), runs ``diagnose`` on each, and draws both on the dashboard's panels with the
step where the finding starts marked. The caption in the README names the date it was drawn.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

KEYS = ["reward", "gold_reward", "accuracy", "length"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--failure", default="reward_hacking")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(ROOT / "docs" / "img" / "failure_and_fix.png"))
    args = ap.parse_args(argv)
    os.environ.setdefault("MPLBACKEND", "Agg")
    from grpo_kit.lab.failures import FAILURES, finding_marks, run_failure
    from grpo_kit.view import compare_runs

    kind = FAILURES[args.failure].kind
    runs = {"broken": run_failure(args.failure, seed=args.seed),
            "fixed": run_failure(args.failure, seed=args.seed, fixed=True)}
    marks = finding_marks(runs, kind)
    if not marks or runs["fixed"].first(kind) is not None:
        print(f"diagnose did not tell the runs apart: broken {runs['broken'].kinds()}, fixed {runs['fixed'].kinds()}")
        return 1
    fig = compare_runs({n: r.run for n, r in runs.items()}, keys=KEYS, marks=marks, smooth=3,
                       title=f"{args.failure} (seed {args.seed}): the broken run and its fix; "
                             f"diagnose marks where '{kind}' starts")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=100, bbox_inches="tight")
    first = runs["broken"].first(kind)
    print(f"{args.out}: {kind} from step {first.step} in the broken run; the fixed run: {runs['fixed'].kinds() or 'nothing'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
