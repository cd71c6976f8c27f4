"""A learned judge: the kit's tiny model with a scalar head, trained on preference pairs.

The model is ``LlamaForSequenceClassification`` with ``num_labels=1`` initialised from a causal
LM checkpoint (the shipped tiny base by default): the score of a completion is the head's
output at the last token of ``<bos> prompt completion <eos>``. This is the reward-model shape
of InstructGPT (Ouyang et al. 2022) and of TRL's ``RewardTrainer``; the folder it saves loads
with ``AutoModelForSequenceClassification``.

Training (Bradley-Terry, with soft labels): for a pair (i, j) with preference ``M[i, j]`` the
target is ``q = (M[i, j] + 1) / 2`` and the loss ``BCE(sigmoid(r_i - r_j), q)``; with hard labels
this is ``-log sigmoid(r_winner - r_loser)``. Ties (``M[i, j] = 0``) are left out by default.

The held-out figure is *pairwise agreement*: over the non-tied pairs of groups the judge never
saw, the fraction where ``sign(r_i - r_j) == sign(M[i, j])`` (0.5 is chance).

:func:`as_reward` makes it a reward function, so it goes wherever a judge goes (``score``,
``ensemble_reward``, ``preferences_from_judge``, TRL). It reads text; it never executes it.

On disk (``grpo-kit train-judge --data PREFS.jsonl --out DIR``): :func:`save_learned_judge`
writes the model and tokenizer with ``save_pretrained`` and ``grpo_kit_judge.json`` (how it was
trained, its held-out agreement); :func:`load_learned_judge` refuses a folder without that file,
so a policy checkpoint is never read as a judge with a freshly initialised (random) head. In a
config, ``reward_funcs: ["learned:DIR"]`` scores with it (loaded once per process, see
:func:`learned_reward`). :func:`split_groups` holds out whole groups, seeded.
"""
from __future__ import annotations

import json
import math
import random
import time
from pathlib import Path
from typing import Sequence

import torch

from grpo_kit.core.losses import bradley_terry_pairs
from grpo_kit.errors import CheckpointError, ConfigError, DataError

METADATA = "grpo_kit_judge.json"
"""The file that marks a folder as a learned judge saved by the kit."""


def preference_pairs(records: Sequence[dict], include_ties: bool = False) -> list[tuple[str, str, str, float]]:
    """Offline groups -> pairs ``(prompt, a, b, q)`` with q = P(a preferred) = (M[a, b] + 1) / 2,
    one per i < j (ties only with ``include_ties``)."""
    pairs = []
    for r in records:
        m = torch.as_tensor(r["preference_matrix"], dtype=torch.float32)  # (K, K)
        K = m.shape[0]
        for i in range(K):
            for j in range(i + 1, K):
                v = float(m[i, j])
                if v != 0 or include_ties:
                    pairs.append((r["prompt"], r["responses"][i], r["responses"][j], (v + 1) / 2))
    return pairs


def new_learned_judge(base: str | Path = "tiny", seed: int = 0):
    """A scalar-head model on the backbone of ``base`` (``"tiny"``: the shipped base) and its
    tokenizer. A folder saved from a trained judge (``model.save_pretrained``,
    ``tokenizer.save_pretrained``) reloads the same way, head included."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    from transformers.utils import logging as hf_logging

    from grpo_kit.model.tiny import first_line, hub_reachable, resolve_model

    path = resolve_model(base)  # "tiny" and the shipped names, a local folder, or a hub name
    fix = "pass a model folder written by save_pretrained (config.json, tokenizer and weights), or 'tiny'"
    if isinstance(path, Path) and not (path / "config.json").is_file():
        raise CheckpointError(f"judge base {str(base)!r}: not a model folder (no config.json); {fix}")
    extra = {} if isinstance(path, Path) or hub_reachable() else {"local_files_only": True}  # offline: the cache only
    torch.manual_seed(seed)
    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()  # "score.weight newly initialised" is the point here
    hf_logging.disable_progress_bar()
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, **extra)
        model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1, dtype=torch.float32, **extra)
    except Exception as e:  # a missing, truncated or foreign file: all one user-facing error
        raise CheckpointError(f"judge base {str(base)!r} cannot be loaded ({type(e).__name__}: {first_line(e)}); "
                              f"{fix}") from e
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()
    model.config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


def _batch(tokenizer, prompts: Sequence[str], completions: Sequence[str]):
    """``<bos> prompt completion <eos>``, right-padded: input_ids (B, T), attention_mask (B, T)."""
    seqs = [tokenizer(p)["input_ids"] + tokenizer(c, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
            for p, c in zip(prompts, completions)]
    T = max(map(len, seqs))
    ids = torch.tensor([s + [tokenizer.pad_token_id] * (T - len(s)) for s in seqs])  # (B, T)
    mask = torch.tensor([[1] * len(s) + [0] * (T - len(s)) for s in seqs])  # (B, T)
    return ids, mask


def judge_scores(model, tokenizer, prompts: Sequence[str], completions: Sequence[str],
                 batch_size: int = 256) -> torch.Tensor:
    """Scores (B,) of completions, no gradient."""
    out = []
    with torch.no_grad():
        for k in range(0, len(completions), batch_size):
            ids, mask = _batch(tokenizer, prompts[k:k + batch_size], completions[k:k + batch_size])
            dev = next(model.parameters()).device
            out.append(model(input_ids=ids.to(dev), attention_mask=mask.to(dev)).logits[:, 0].float().cpu())  # (b,)
    return torch.cat(out) if out else torch.zeros(0)


def train_learned_judge(records: Sequence[dict], steps: int = 200, batch_size: int = 64, lr: float = 1e-3,
                        seed: int = 0, base: str | Path = "tiny", include_ties: bool = False,
                        threads: int | None = None, log=None):
    """Train a learned judge on offline preference groups; returns ``(model, tokenizer, report)``.

    ``steps`` and ``batch_size`` are whole numbers >= 1 and ``lr`` a finite number > 0 (ConfigError)."""
    for name, v, ok in (("steps", steps, isinstance(steps, int) and steps >= 1),
                        ("batch_size", batch_size, isinstance(batch_size, int) and batch_size >= 1),
                        ("lr", lr, isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0)):
        if isinstance(v, bool) or not ok:
            raise ConfigError(f"train_learned_judge {name}={v!r}: must be " +
                              ("a finite number > 0" if name == "lr" else "a whole number >= 1"))
    pairs = preference_pairs(records, include_ties)
    if not pairs:
        raise DataError("no preference pairs to learn from: every pair is a tie; train on ties too "
                        "(--include-ties, or include_ties=True in Python) or give groups with a preferred response")
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        return _train(pairs, steps, batch_size, lr, seed, base, log)
    finally:
        torch.set_num_threads(before)


def _train(pairs, steps, batch_size, lr, seed, base, log):
    model, tokenizer = new_learned_judge(base, seed)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    rng = random.Random(seed)
    t0, losses = time.time(), []
    for step in range(1, steps + 1):
        batch = [pairs[rng.randrange(len(pairs))] for _ in range(batch_size)]
        prompts = [p for p, _, _, _ in batch]
        ids, mask = _batch(tokenizer, prompts * 2, [a for _, a, _, _ in batch] + [b for _, _, b, _ in batch])
        dev = next(model.parameters()).device
        r = model(input_ids=ids.to(dev), attention_mask=mask.to(dev)).logits[:, 0].float()  # (2N,)
        q = torch.tensor([t for _, _, _, t in batch], device=dev)  # (N,)
        loss = bradley_terry_pairs(r[:batch_size], r[batch_size:], q)  # ()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if log and step % 50 == 0:
            log(f"step {step:4d}  loss {sum(losses[-50:]) / len(losses[-50:]):.3f}")
    model.eval()
    report = {"pairs": len(pairs), "steps": steps, "final_loss": sum(losses[-20:]) / len(losses[-20:]),
              "wall_seconds": round(time.time() - t0, 1)}
    return model, tokenizer, report


def pairwise_agreement(model, tokenizer, records: Sequence[dict]) -> float:
    """Fraction of non-tied pairs where the judge orders the two responses as the matrix does."""
    prompts = [r["prompt"] for r in records for _ in r["responses"]]
    scores = judge_scores(model, tokenizer, prompts, [c for r in records for c in r["responses"]])  # (sum K,)
    right = total = start = 0
    for r in records:
        K = len(r["responses"])
        s = scores[start:start + K]  # (K,)
        start += K
        m = torch.as_tensor(r["preference_matrix"], dtype=torch.float32)  # (K, K)
        iu = torch.triu_indices(K, K, 1)  # (2, K(K-1)/2)
        want = torch.sign(m[iu[0], iu[1]])  # (n,)
        got = torch.sign(s[iu[0]] - s[iu[1]])  # (n,)
        keep = want != 0
        right += int((got[keep] == want[keep]).sum())
        total += int(keep.sum())
    if total == 0:
        raise DataError("no non-tied pairs to measure agreement on")
    return right / total


def as_reward(model, tokenizer, name: str = "learned_judge"):
    """The learned judge as a reward function ``f(prompts, completions, **_) -> list[float]``."""
    def learned(prompts, completions, **_):
        return judge_scores(model, tokenizer, list(prompts), list(completions)).tolist()

    learned.__name__ = name
    return learned


def split_groups(records: Sequence[dict], heldout_frac: float, seed: int = 0) -> tuple[list[dict], list[dict]]:
    """Whole groups -> (train, held out): ``round(heldout_frac * n)`` groups drawn at random
    (seeded), at least one when ``heldout_frac > 0``, and at least one left to train on. Both
    keep the file's order. A prompt's pairs never land on both sides."""
    if not 0 <= heldout_frac < 1:
        raise DataError(f"held-out fraction {heldout_frac}: choose a number in [0, 1)")
    n = len(records)
    k = min(max(round(heldout_frac * n), 1 if heldout_frac > 0 else 0), n - 1)
    if n < 2 and heldout_frac > 0:
        raise DataError(f"{n} preference group(s): holding some out needs at least 2; pass a held-out fraction of 0")
    held = set(random.Random(seed).sample(range(n), k))
    return [r for i, r in enumerate(records) if i not in held], [r for i, r in enumerate(records) if i in held]


def save_learned_judge(model, tokenizer, out: str | Path, metadata: dict) -> Path:
    """Write the judge with ``save_pretrained`` (model and tokenizer) and ``metadata`` as
    ``grpo_kit_judge.json`` into ``out``; returns the folder."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / METADATA).write_text(json.dumps({"kind": "learned_judge", **metadata}, indent=2) + "\n")
    return out


def load_learned_judge(path: str | Path):
    """A judge saved by :func:`save_learned_judge` -> ``(model, tokenizer, metadata)``, in eval mode.

    Raises :class:`CheckpointError` naming the folder when it is missing, is not a learned judge
    (no ``grpo_kit_judge.json``: a policy checkpoint would load with a random scalar head), or
    does not load as a one-output sequence classifier.
    """
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    path = Path(path)
    fix = "train one with 'grpo-kit train-judge --data PREFS.jsonl --out DIR' and pass that DIR"
    if not path.is_dir():
        raise CheckpointError(f"learned judge {str(path)!r}: no such folder; {fix}")
    if not (path / METADATA).is_file():
        raise CheckpointError(f"learned judge {str(path)!r}: not a learned judge folder (no {METADATA}); {fix}")
    try:
        meta = json.loads((path / METADATA).read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise CheckpointError(f"learned judge {str(path)!r}: {METADATA} is not readable JSON ({type(e).__name__}: "
                              f"{str(e).splitlines()[0][:200] if str(e) else ''}); {fix}") from e
    if not isinstance(meta, dict):
        raise CheckpointError(f"learned judge {str(path)!r}: {METADATA} holds a JSON {_json_kind(meta)}, not an "
                              f"object such as {{\"kind\": \"learned_judge\", ...}}; {fix}")
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForSequenceClassification.from_pretrained(path, dtype=torch.float32)
    except Exception as e:  # a truncated or foreign file: one user-facing error
        raise CheckpointError(f"learned judge {str(path)!r} cannot be loaded ({type(e).__name__}: "
                              f"{str(e).splitlines()[0][:200] if str(e) else ''}); {fix}") from e
    if model.config.num_labels != 1:
        raise CheckpointError(f"learned judge {str(path)!r}: expected one scalar output, "
                              f"got {model.config.num_labels} outputs; {fix}")
    return model.eval(), tokenizer, meta


def _json_kind(value) -> str:
    """What JSON calls the type of a parsed value (array, string, number, ...)."""
    kinds = {list: "array", str: "string", bool: "boolean", int: "number", float: "number", type(None): "null"}
    return kinds.get(type(value), type(value).__name__)


_LOADED: dict[tuple[str, float], object] = {}


def learned_reward(path: str | Path):
    """``reward_funcs: ["learned:PATH"]``: the judge in ``path`` as a reward function, loaded once
    per process per folder (and again when its weights file changes)."""
    path = Path(path)
    weights = path / "model.safetensors"
    key = (str(path.resolve()), weights.stat().st_mtime if weights.is_file() else 0.0)
    if key not in _LOADED:
        model, tokenizer, _ = load_learned_judge(path)
        _LOADED[key] = as_reward(model, tokenizer, name=f"learned_{path.name}")
    return _LOADED[key]


def perturbed_groups(items: Sequence[dict], K: int = 4, seed: int = 0) -> list[dict]:
    """Offline groups without a model, for tests and demos: per arithmetic item the reference
    completion and K - 1 copies with one digit of the final answer changed (the task's digit
    order kept; a scratchpad before ``|`` is left as it is), judged by
    :func:`grpo_kit.rewards.judges.math_answer` into a preference matrix (right beats wrong, wrongs tie)."""
    from grpo_kit.core.preferences import preferences_from_scores
    from grpo_kit.rewards.judges import math_answer

    rng = random.Random(seed)
    out = []
    for it in items:
        ref = it["completion"]
        resp = [ref]
        for _ in range(K - 1):
            digits = [k for k, ch in enumerate(ref) if ch.isdigit() and k > ref.rfind("|")]
            k = rng.choice(digits)
            resp.append(ref[:k] + rng.choice([d for d in "0123456789" if d != ref[k]]) + ref[k + 1:])
        order = rng.sample(range(K), K)
        resp = [resp[o] for o in order]
        r = math_answer([it["prompt"]] * K, resp, answer=[it["answer"]] * K,
                        reverse_digits=[it.get("reverse_digits")] * K, scratchpad=[it.get("scratchpad")] * K)
        out.append({"prompt": it["prompt"], "responses": resp, "answer": it["answer"],
                    "preference_matrix": preferences_from_scores(r)})
    return out
