"""Scaling sweep: the kit's step time and peak memory against group size G and completion length.

    PYTHONPATH=. python benchmarks/sweep.py --out runs/sweep            # sweep.json + sweep.png

Prompts per step stay fixed (``--prompts``, default 16), so the batch B = P * G grows with G.
Each point runs in a fresh subprocess (``bench_step.py --variants kit``), so each point's peak
RSS (``VmHWM``) is its own; time is the median wall and process-CPU seconds of ``--reps`` steps.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
GROUPS = (2, 4, 8, 16, 32)
LENGTHS = (4, 8, 16, 32)


def point(G: int, length: int, args) -> dict:
    """One (G, length) point: the kit alone in a subprocess; median seconds and peak RSS."""
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "p.json"
        cmd = [sys.executable, str(HERE / "bench_step.py"), "--variants", "kit", "-G", str(G), "--length", str(length),
               "--prompts", str(args.prompts), "--reps", str(args.reps), "--warmup", str(args.warmup),
               "--threads", str(args.threads), "--mem-steps", str(args.reps), "--out", str(out)]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")]))
        subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
        res = json.loads(out.read_text())
    return {"G": G, "length": length, "B": G * args.prompts, "median_s": res["median_s"]["kit"],
            "median_cpu_s": res["median_cpu_s"]["kit"], "peak_rss_mb": res["memory"]["kit"]["peak_rss_mb"]}


def plot(points: list[dict], base_length: int, base_G: int, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    for col, (key, fixed_key, fixed, label) in enumerate(
            (("G", "length", base_length, "group size G"), ("length", "G", base_G, "max completion length"))):
        pts = sorted((p for p in points if p[fixed_key] == fixed), key=lambda p: p[key])
        xs = [p[key] for p in pts]
        axes[0, col].plot(xs, [p["median_s"] for p in pts], "o-", label="wall")
        axes[0, col].plot(xs, [p["median_cpu_s"] for p in pts], "s--", label="process CPU")
        axes[0, col].set(xlabel=label, ylabel="seconds per step", xscale="log", yscale="log",
                         title=f"step time ({fixed_key}={fixed})")
        axes[0, col].legend()
        axes[1, col].plot(xs, [p["peak_rss_mb"] for p in pts], "o-")
        axes[1, col].set(xlabel=label, ylabel="peak RSS (MiB)", xscale="log", title=f"peak memory ({fixed_key}={fixed})")
        for ax in axes[:, col]:
            ax.set_xticks(xs, [str(x) for x in xs])
            ax.minorticks_off()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--groups", default=",".join(map(str, GROUPS)))
    p.add_argument("--lengths", default=",".join(map(str, LENGTHS)))
    p.add_argument("--G", type=int, default=8, help="group size held fixed while length varies")
    p.add_argument("--length", type=int, default=8, help="completion length held fixed while G varies")
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default="runs/sweep", help="folder for sweep.json and sweep.png")
    args = p.parse_args(argv)
    grid = [(int(g), args.length) for g in args.groups.split(",")]
    grid += [(args.G, int(n)) for n in args.lengths.split(",") if (args.G, int(n)) not in grid]
    points = []
    for G, n in grid:
        points.append(point(G, n, args))
        q = points[-1]
        print(f"G={G:3d} length={n:3d} B={q['B']:4d}  {q['median_s']:.4f} s  (CPU {q['median_cpu_s']:.4f} s)  "
              f"peak RSS {q['peak_rss_mb']:.0f} MiB", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "sweep.json").write_text(json.dumps({"prompts": args.prompts, "threads": args.threads, "points": points},
                                               indent=2) + "\n")
    plot(points, args.length, args.G, out / "sweep.png")
    print(f"wrote {out / 'sweep.json'} and {out / 'sweep.png'}")
    return points


if __name__ == "__main__":
    main()
