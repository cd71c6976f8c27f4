"""What the live dashboard costs a training run on the demo settings.

    PYTHONPATH=. python benchmarks/dashboard_overhead.py --steps 60 [--out runs/dashboard_overhead.json]

Two identical runs (same config and seed: the demo's P=16 x G=8, evals every 50 steps) advance in
lockstep, one step each in turn (ABBA order), so that a change in machine load hits both alike:
- **plain**: ``for m in train(cfg, run): pass``
- **dashboard**: ``for m in train(cfg, run, should_stop=dash.should_stop): dash.update(m, ...)`` with a
  live ``Dashboard`` (plotly ``FigureWidget`` panels, group table, progress, Stop button; no frontend
  here, so this is the Python side: trace updates inside ``batch_update``, widget state, the table's HTML).

Printed: the wall-time overhead (dashboard / plain - 1, over all steps) and the time spent inside
``Dashboard.update`` (redraws included) as a share of the training time. The issue's limit is 5%.
A replay of the dashboard run's metrics with a redraw on every step (``min_interval_s=0``) shows
what the throttle saves.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=60, help="steps of each run (demo: 500)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--interval", type=float, default=1.0, help="Dashboard min_interval_s (its default: 1.0)")
    ap.add_argument("--prompts", type=int, default=None, help="P (default: the demo's)")
    ap.add_argument("-G", type=int, default=None, help="G (default: the demo's)")
    ap.add_argument("--eval-size", type=int, default=None, help="held-out problems per eval (default: the demo's)")
    ap.add_argument("--out", default=None, help="write the numbers as JSON here")
    args = ap.parse_args(argv)

    from grpo_kit.config import GRPOConfig
    from grpo_kit.loop.train import setup, train
    from grpo_kit.view.dashboard import Dashboard

    changes = {"steps": args.steps, "seed": args.seed, "threads": args.threads}
    if args.prompts:
        changes["num_prompts"] = args.prompts
    if args.G:
        changes["num_generations"] = args.G
    if args.eval_size:
        changes["eval_size"] = args.eval_size
    cfg = GRPOConfig().replace(**changes)
    plain_run, dash_run = setup(cfg), setup(cfg)
    dash = Dashboard(total_steps=cfg.steps, title="overhead benchmark", live=True, min_interval_s=args.interval)
    plain = train(cfg, plain_run)
    with_dash = train(cfg, dash_run, should_stop=dash.should_stop)
    t_plain = t_dash = 0.0

    def step_plain():
        t0 = time.perf_counter()
        next(plain)
        return time.perf_counter() - t0

    def step_dash():
        t0 = time.perf_counter()
        m = next(with_dash)
        dash.update(m, variant=f"grpo seed {cfg.seed}", run=dash_run)
        return time.perf_counter() - t0

    for i in range(cfg.steps):  # ABBA order, so that going first or second favours neither
        if i % 2 == 0:
            t_plain += step_plain()
            t_dash += step_dash()
        else:
            t_dash += step_dash()
            t_plain += step_plain()
    t0 = time.perf_counter()
    dash.close()
    t_close = time.perf_counter() - t0

    # what a redraw on every step would cost, replayed from the same metrics (no training)
    every = Dashboard(total_steps=cfg.steps, live=True, min_interval_s=0.0)
    t0 = time.perf_counter()
    for m in dash_run.history:
        every.update(m, variant="replay")
    t_every = time.perf_counter() - t0

    res = {
        "steps": cfg.steps, "P": cfg.num_prompts, "G": cfg.num_generations, "threads": cfg.threads,
        "min_interval_s": args.interval,
        "plain_s": round(t_plain, 3), "dashboard_s": round(t_dash, 3),
        "wall_overhead": t_dash / t_plain - 1,
        "update_s": round(dash.overhead_s, 4), "close_s": round(t_close, 4), "redraws": dash.redraws,
        "update_share": dash.overhead_s / (t_dash - dash.overhead_s),
        "every_step_update_ms": 1000 * t_every / max(len(dash_run.history), 1),
        "throttled_update_ms": 1000 * dash.overhead_s / cfg.steps,
        "step_ms": 1000 * t_plain / cfg.steps,
    }
    print(f"{cfg.steps} steps of P={cfg.num_prompts} x G={cfg.num_generations}, {cfg.threads} threads, "
          f"redraw at most every {args.interval:g} s")
    print(f"  plain training:          {t_plain:8.2f} s  ({res['step_ms']:.0f} ms/step)")
    print(f"  with the live dashboard: {t_dash:8.2f} s  -> wall overhead {100 * res['wall_overhead']:+.1f}% "
          f"(lockstep; includes load noise)")
    print(f"  inside Dashboard.update: {dash.overhead_s:8.3f} s over {dash.redraws} redraws "
          f"= {100 * res['update_share']:.2f}% of the training time ({res['throttled_update_ms']:.2f} ms/step); "
          f"close() {1000 * t_close:.0f} ms")
    print(f"  a redraw on every step would cost {res['every_step_update_ms']:.1f} ms/step "
          f"({100 * res['every_step_update_ms'] / res['step_ms']:.1f}% of a step)")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(res, indent=2) + "\n")
    return res


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
