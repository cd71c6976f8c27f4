"""Write the notebooks from the cell sources below (run: python tools/build_notebooks.py).

Keeping notebook sources in a .py file makes them reviewable in diffs; the .ipynb files are
committed without outputs.
"""
from pathlib import Path

import nbformat as nbf

HERE = Path(__file__).resolve().parent.parent / "notebooks"


def md(s):
    return nbf.v4.new_markdown_cell(s.strip())


def code(s, tags=None):
    c = nbf.v4.new_code_cell(s.strip())
    if tags:
        c.metadata["tags"] = tags
    return c


QUICKSTART = [
    md("""
# 00 · Quickstart: watch GRPO make a small model better at addition

**Win first, then take it apart.** In a few minutes on a laptop CPU this notebook takes a tiny
language model (about 0.9M parameters, one token per character) that half-knows 2-digit
addition, and improves it with **GRPO** (Group Relative Policy Optimization) using nothing but
a right/wrong reward. No downloads: the model ships with the kit.

The model writes the sum **least-significant digit first** (`12+34=` → `64`, i.e. 46 read
backwards). That is the order in which a left-to-right model can work out carries, and it makes
addition learnable by a model this small.

The recipe you will see, one step of GRPO:
1. take P prompts, sample **G completions for each** (a *group*);
2. score each completion with a **reward function** (here: 1 if the answer is right, else 0);
3. turn rewards into **advantages** by comparing each completion with its own group
   (better than the group's mean → pushed up, worse → pushed down);
4. take a policy-gradient step on the completions' tokens, weighted by their advantage.
"""),
    code("""
# Parameters (papermill overrides these). SMOKE=True is a fast pipeline check only.
SMOKE = False
SEED = 0
STEPS = 500
""", tags=["parameters"]),
    code("""
import torch
from grpo_kit import GRPOConfig, load_model, setup, train
from grpo_kit.tasks import heldout_split
from grpo_kit.inference import greedy_accuracy, columns_of
from grpo_kit.sampling import sample_groups
from grpo_kit.judges import score, exact_answer
from grpo_kit.advantages import compute_advantages
from grpo_kit.plotting import plot_history
from grpo_kit.nbtools import record

if SMOKE:
    STEPS = 40
cfg = GRPOConfig(seed=SEED, steps=STEPS)
print(f"P={cfg.num_prompts} prompts x G={cfg.num_generations} completions per step, {cfg.steps} steps, "
      f"lr={cfg.learning_rate}, advantages: scale_rewards={cfg.scale_rewards!r}, loss_type={cfg.loss_type!r}")
"""),
    md("""
## The starting point: a half-trained model

`load_model("tiny")` is an ordinary `AutoModelForCausalLM.from_pretrained` on the checkpoint that
ships inside the kit (`grpo-kit make-base` rebuilds it). It was trained by supervised learning and
stopped on purpose at about 40% validation accuracy, leaving room for RL.
"""),
    code("""
model, tokenizer = load_model("tiny")
test = heldout_split(cfg.task)[:cfg.eval_size]
base_acc, base_completions, _ = greedy_accuracy(model, tokenizer, test, return_completions=True)
print(f"parameters: {sum(p.numel() for p in model.parameters()):,}")
print(f"held-out greedy accuracy of the base: {base_acc:.1%} on {len(test)} problems\\n")
for it, c in list(zip(test, base_completions))[:6]:
    print(f"{it['prompt']:<8} model wrote {c!r:<7} correct {it['completion']!r:<7} {'✓' if c == it['completion'] else '✗'}")
"""),
    md("""
## One GRPO step, by hand

Take one prompt, sample a group of G = 8 completions at temperature 1, score them, and compute
advantages. Within a group, right answers get a positive advantage and wrong ones a negative
advantage; a group where all answers are equally right (or wrong) gets all zeros, and teaches
nothing.
"""),
    code("""
gen = torch.Generator().manual_seed(SEED)
items = test[:2]
groups = sample_groups(model, tokenizer, [it["prompt"] for it in items], num_generations=8,
                       max_new_tokens=cfg.max_completion_length, temperature=1.0, generator=gen)
rewards, _ = score([exact_answer],
                   groups.prompts, groups.completions, columns_of(items, repeat=8))
rewards = rewards.view(2, 8)                                  # (P, G)
adv = compute_advantages(rewards, "group")                    # (P, G) z-score within each group
for p, it in enumerate(items):
    print(f"prompt {it['prompt']!r} (correct: {it['completion']!r})")
    for g in range(8):
        print(f"   {groups.completions[p * 8 + g]!r:<7} reward {rewards[p, g]:.0f}   advantage {adv[p, g]:+.2f}")
"""),
    md("""
## Train

`train(cfg, run)` is a thin loop that yields one metrics dict per step (TRL's key names:
`reward`, `kl`, `entropy`, `frac_reward_zero_std`, ...). Every `eval_every` steps it also measures
held-out greedy accuracy. The figure below refreshes while training runs.
"""),
    code("""
from IPython.display import display
import matplotlib.pyplot as plt

run = setup(cfg)
handle = display(display_id=True)
for m in train(cfg, run):
    if "accuracy" in m:
        fig = plot_history(run.history, run.evals, title=f"GRPO on the tiny model, step {m['step']}")
        handle.update(fig)
        plt.close(fig)
        print(f"step {m['step']:4d}  reward {m['reward']:.2f}  held-out accuracy {m['accuracy']:.1%}  "
              f"KL {m['kl']:.3f}  entropy {m['entropy']:.2f}")
final_acc = run.evals[-1][1]
"""),
    md("""
## Before and after
"""),
    code("""
after_acc, after_completions, _ = greedy_accuracy(run.policy, run.tokenizer, test, return_completions=True)
print(f"{'prompt':<9}{'correct':<9}{'before':<9}{'after':<9}")
for it, b, a in list(zip(test, base_completions, after_completions))[:10]:
    print(f"{it['prompt']:<9}{it['completion']:<9}{b:<9}{a:<9}")
print(f"\\nheld-out greedy accuracy: {base_acc:.1%} -> {after_acc:.1%} ({100 * (after_acc - base_acc):+.1f} points)")
fig = plot_history(run.history, run.evals, title="GRPO on the tiny model")
"""),
    md("""
## What to notice
- **Reward** on the training samples rises along with held-out accuracy: the model is not
  memorising, the held-out problems were never sampled in training.
- **Entropy** falls: the model becomes surer of its answers, and the groups' answers become
  more alike, so more and more groups are all-right (`frac_reward_zero_std` rises) and teach
  nothing. That is why GRPO slows down as a task is mastered.
- **KL** to the starting model grows: GRPO moved the model. With `beta > 0` the loss pulls it back.
- Accuracy often **dips** early before rising: the first updates on a noisy signal can hurt.

## Try this
- Group size: `cfg = GRPOConfig(num_generations=2)` (small), `8` (default), `32` with
  `num_prompts=4` (large). Same samples per step, different groups.
- Learning rate: `1e-4`, `3e-4` (default), `2e-3` (watch entropy collapse and every group go
  zero-variance).
- Advantages: `scale_rewards="group"` (DeepSeekMath's z-score) against `"none"` (Dr. GRPO).

## Exercise
Re-run the by-hand step with a group of 8 where all 8 answers are right. What advantages do you
get, and what does that group contribute to the update?
<details><summary>Solution</summary>All advantages are 0 (the rewards equal their mean), so the
group contributes no policy gradient; it only costs compute.</details>
"""),
    code("""
# The claim this notebook teaches, checked on the numbers it just produced.
record("base_accuracy", base_acc)
record("final_accuracy", after_acc)
record("steps", run.step)
assert all(torch.isfinite(torch.tensor([m["loss"] for m in run.history]))), "non-finite loss"
if SMOKE:
    print("SMOKE run: pipeline checked; the accuracy claim needs the full run (SMOKE=False).")
else:
    gain = after_acc - base_acc
    assert gain >= 0.25, f"GRPO gained only {gain:+.1%} held-out accuracy (claim: at least +25 points)"
    print(f"claim holds: GRPO raised held-out accuracy by {100 * gain:.1f} points")
"""),
]

NOTEBOOKS = {"00_quickstart.ipynb": QUICKSTART}


def sibling_notebooks() -> dict:
    """Notebooks defined in tools/nb_*.py files (each sets NAME and CELLS, using md() and code() from here)."""
    import importlib.util
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    out = {}
    for f in sorted(Path(__file__).resolve().parent.glob("nb_*.py")):
        spec = importlib.util.spec_from_file_location(f.stem, f)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        out[mod.NAME] = mod.CELLS
    return out


def build():
    HERE.mkdir(exist_ok=True)
    for name, cells in {**NOTEBOOKS, **sibling_notebooks()}.items():
        nb = nbf.v4.new_notebook()
        nb.cells = cells
        for n, cell in enumerate(cells):  # stable ids: rebuilding an unchanged notebook changes nothing
            cell["id"] = f"cell-{n:02d}"
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nb.metadata["language_info"] = {"name": "python"}
        nbf.write(nb, HERE / name)
        print("wrote", HERE / name)


if __name__ == "__main__":
    build()
