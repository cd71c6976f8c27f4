"""The kit's own tiny model: a char-level tokenizer, a ~0.9M-parameter Llama, and its SFT base.

Everything here produces ordinary Hugging Face objects: the tokenizer is a
``PreTrainedTokenizerFast`` and the model a ``LlamaForCausalLM``, saved with
``save_pretrained`` and loaded with ``AutoTokenizer`` / ``AutoModelForCausalLM``, so the code
that trains the tiny model is the code that trains ``Qwen/Qwen2.5-0.5B-Instruct`` on a GPU.

The supervised base (``grpo-kit make-base``) is trained by :mod:`grpo_kit.lab.base`, which also
evaluates it; this module only builds, finds and loads models.
"""
from __future__ import annotations

import logging
import os
import re
import string
from pathlib import Path

import torch

from grpo_kit.data.runfolder import quote
from grpo_kit.data.sources import hub_reachable  # noqa: F401  (here too: load_model asks it)
from grpo_kit.errors import CheckpointError

log = logging.getLogger(__name__)

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
CHARS = string.printable[:95]  # digits, letters, punctuation, space: enough for GSM8K text
SHIPPED = Path(__file__).resolve().parents[1] / "checkpoints" / "tiny-add2"


def build_tokenizer():
    """A character-level ``PreTrainedTokenizerFast``: one token per printable ASCII character.

    Encoding adds ``<bos>`` in front; decoding joins characters with no spaces between them.
    """
    from tokenizers import (
        Regex,
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        processors,
    )
    from transformers import PreTrainedTokenizerFast

    specials = [PAD, BOS, EOS, UNK]
    vocab = {tok: i for i, tok in enumerate(specials + list(CHARS))}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    core.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, vocab[BOS])]
    )
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token=PAD, bos_token=BOS, eos_token=EOS, unk_token=UNK,
        padding_side="left", clean_up_tokenization_spaces=False,
    )
    tok.model_max_length = 256
    return tok


def tiny_config(vocab_size: int, eos_id: int, bos_id: int, pad_id: int):
    """A Llama-style config: 4 layers, hidden 128, 4 heads, MLP 384 (~0.87M parameters)."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=vocab_size, hidden_size=128, intermediate_size=384, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=256,
        rms_norm_eps=1e-5, tie_word_embeddings=True, eos_token_id=eos_id, bos_token_id=bos_id,
        pad_token_id=pad_id, attn_implementation="sdpa",
    )


def new_tiny_model(tokenizer, seed: int = 0):
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = tiny_config(len(tokenizer), tokenizer.eos_token_id, tokenizer.bos_token_id, tokenizer.pad_token_id)
    return LlamaForCausalLM(cfg)


def sft_batch(tokenizer, items: list[dict]):
    """Supervised batch: ``<bos> prompt completion <eos>``, loss on completion tokens only.

    Returns input_ids (B, T), attention_mask (B, T), labels (B, T) with -100 on prompt and pad.
    Right-padded: training needs no generation, so no left padding here.
    """
    seqs, labels = [], []
    for it in items:
        p = tokenizer(it["prompt"])["input_ids"]
        c = tokenizer(it["completion"], add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        seqs.append(p + c)
        labels.append([-100] * len(p) + c)
    T = max(map(len, seqs))
    pad = tokenizer.pad_token_id
    ids = torch.tensor([s + [pad] * (T - len(s)) for s in seqs])  # (B, T)
    lab = torch.tensor([l + [-100] * (T - len(l)) for l in labels])  # (B, T)
    mask = torch.tensor([[1] * len(s) + [0] * (T - len(s)) for s in seqs])  # (B, T)
    return ids, mask, lab


def shipped_path(name: str = "tiny") -> Path:
    """``"tiny"`` -> the add2 base; ``"tiny-<task>"`` -> the base trained on that task."""
    return SHIPPED if name == "tiny" else SHIPPED.parent / name


_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}(/[A-Za-z0-9][A-Za-z0-9._-]{0,95})?")  # hub ids: 96 a part


def resolve_model(name_or_path: str | Path = "tiny", warn: bool = True) -> Path | str:
    """Where a model comes from: a local folder (a ``Path``) or a Hugging Face hub name (a ``str``).

    A path on disk always wins: a local folder named like a shipped model (``tiny-add2``) is
    loaded, with a warning that it shadows the shipped one. ``"tiny"`` / ``"tiny-<task>"`` name
    the shipped bases. Anything that looks like a path (starts with ``/``, ``.`` or ``~``, has
    more than one ``/`` or characters a hub name cannot have) and is not on disk is a
    :class:`CheckpointError` at once, without asking the hub.
    """
    text = str(name_or_path)
    local = Path(os.path.expanduser(text))
    shipped = shipped_path(text) if (text == "tiny" or text.startswith("tiny-")) else None
    try:
        on_disk = bool(text.strip()) and local.exists()
    except (OSError, ValueError):  # too long, unencodable or with a NUL for the file system: not a folder here
        on_disk = False
    if on_disk:
        if warn and shipped is not None and shipped.is_dir() and local.resolve() != shipped.resolve():
            log.warning("the local folder %s shadows the shipped model %r; loading the local folder "
                        "(rename it, or run from another folder, to load the shipped one)", local.resolve(), text)
        return local
    if shipped is not None:
        if not shipped.is_dir():
            names = ["tiny"] + sorted(p.name for p in SHIPPED.parent.iterdir() if (p / "config.json").is_file())
            raise CheckpointError(f"{text!r} is not a shipped model or a local folder; shipped: {names}")
        return shipped
    if text.startswith(("/", ".", "~")) or text.count("/") > 1 or not _HUB_ID.fullmatch(text):
        raise CheckpointError(f"{text[:200]}{'...' if len(text) > 200 else ''}: no such model folder; pass a folder written by save_pretrained, "
                              f"a Hugging Face hub name (owner/name) or 'tiny'")
    return text




def first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:300] if text else type(e).__name__


def load_model(name_or_path: str | Path = "tiny", device: str | torch.device = "cpu", dtype=None):
    """Load a causal LM and its tokenizer with ``from_pretrained``; ``"tiny"`` (``"tiny-add2s"``) is
    a shipped base (see :func:`resolve_model` for how a name is looked up).

    The same call loads a Hugging Face hub name on a machine that can download it; offline
    (``HF_HUB_OFFLINE=1`` or the hub unreachable) only the local cache is asked, so a model
    that is not there fails at once instead of after a minute of retries. Left padding is set
    because generation appends to the right. A tokenizer with more tokens than the model has
    embedding rows is refused (those ids would index past the embedding).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve_model(name_or_path)
    extra = {}
    if isinstance(path, Path):
        if not (path / "config.json").is_file():
            raise CheckpointError(f"{path}: not a model folder (no config.json); pass a folder written by "
                                  f"save_pretrained")
    elif not hub_reachable():
        extra["local_files_only"] = True
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, **extra)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype or torch.float32, **extra)
    except Exception as e:  # noqa: BLE001 - a missing, truncated or foreign file: all one user-facing error
        if extra.get("local_files_only"):
            raise CheckpointError(f"cannot load model {quote(str(path))}: the Hugging Face hub cannot be reached "
                                  f"(offline) and the model is not in the local cache; pass a local folder, or "
                                  f"download it first on a machine with network (huggingface-cli download "
                                  f"{str(path)[:200]})") from e
        raise CheckpointError(f"cannot load model {quote(str(path))}: {type(e).__name__}: {first_line(e)}") from e
    rows = model.get_input_embeddings().num_embeddings
    if len(tokenizer) > rows:
        raise CheckpointError(f"model {quote(str(path))}: the tokenizer has {len(tokenizer)} tokens but the model's "
                              f"embedding has {rows} rows, so token ids >= {rows} cannot be looked up; use the "
                              f"tokenizer saved with this model, or call model.resize_token_embeddings"
                              f"({len(tokenizer)}) and save both")
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model.to(device).eval(), tokenizer
