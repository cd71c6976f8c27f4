"""Arms of a comparison: every arm (a few config fields) trained with every seed, one run at a time.

The notebooks that compare estimators or variants at an equal budget (08, 08b) train their arms with
:func:`train_arms` and read the final accuracies with :func:`grpo_kit.eval.arm_summary`.
"""
from __future__ import annotations

import copy
import time
from typing import Callable

from grpo_kit.config import GRPOConfig
from grpo_kit.loop.train import Run, setup, train


def train_arms(arms: dict[str, dict], seeds, common: dict, dash=None, bases: dict | None = None,
               log: Callable[[str], None] | None = print) -> dict[tuple[str, int], Run]:
    """Train ``GRPOConfig(**common, **arms[name], seed=s)`` for every arm and seed, in order.

    ``bases`` maps a model name (``cfg.model``) to a loaded ``(policy, tokenizer)``: each run trains a
    deep copy, so every arm on that base starts from the same weights (a name not in ``bases`` is
    loaded by ``setup``). ``dash`` (a :class:`grpo_kit.view.Dashboard`) gets each step as variant
    "<arm> seed <s>" and its Stop button ends the run in progress, and every later one after its first
    step. ``log`` gets one line per run. Returns the runs by (arm, seed).
    """
    runs = {}
    for name, fields in arms.items():
        for seed in seeds:
            cfg = GRPOConfig(**common, **fields, seed=seed)
            policy, tok = (bases or {}).get(cfg.model, (None, None))
            run, t0 = setup(cfg, policy=copy.deepcopy(policy) if policy is not None else None, tokenizer=tok), time.time()
            for m in train(cfg, run, should_stop=dash.should_stop if dash is not None else None):
                if dash is not None:
                    dash.update(m, variant=f"{name} seed {seed}", run=run)
            runs[name, seed] = run
            if log is not None:
                acc = f"{run.evals[0][1]:.3f} -> {run.evals[-1][1]:.3f}" if run.evals else "not evaluated"
                log(f"{name:<19} seed {seed}: held-out accuracy {acc} ({run.step} steps, {time.time() - t0:.0f} s)")
    return runs
