"""One process of a ``torchrun`` launch of ``grpo-kit``, recording what it did (for ``test_trl_engine.py``).

    torchrun --standalone --nproc_per_node 2 tests/engines/rank_probe.py RECORDS train --engine trl ... --out OUT

Runs ``grpo_kit.cli.main(ARGS)``, what ``python -m grpo_kit.cli ARGS`` runs, and writes ``RECORDS/rank<R>.json``
(outside the run folder): the exit code; ``wrote``, each path under ``--out`` this process opened for writing,
made, renamed to or removed, seen by Python's audit hooks (native code's own writes, as safetensors' of
``model.safetensors``, are not seen; the folder they go into is); the process group's backend; TRL's batch
arguments; the kit history this process collected; and a SHA-256 of the weights before and after training.
"""
import hashlib
import json
import os
import sys
from pathlib import Path

WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
CHANGES = {"os.mkdir": 0, "os.rename": 1, "os.remove": 0, "os.rmdir": 0, "shutil.rmtree": 0, "os.truncate": 0}
"""Audit events that change the file system -> the index of the path they change."""
BATCH = ("world_size", "per_device_train_batch_size", "gradient_accumulation_steps", "steps_per_generation",
         "generation_batch_size")


def fingerprint(model) -> str:
    """SHA-256 of every parameter's name and bytes, in order: equal only for bit-identical weights."""
    import torch

    h = hashlib.sha256()
    for name, p in model.named_parameters():
        h.update(name.encode())
        h.update(p.detach().cpu().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def probe(records: Path, argv: list[str]) -> int:
    out = os.path.abspath(argv[argv.index("--out") + 1])
    wrote: list[str] = []

    def audit(event, args):
        if event == "open":
            path, mode, flags = args
            writing = any(c in mode for c in "wax+") if isinstance(mode, str) else bool((flags or 0) & WRITE_FLAGS)
        elif event in CHANGES:
            path, writing = args[CHANGES[event]], True
        else:
            return
        if writing and isinstance(path, (str, bytes, os.PathLike)):
            path = os.path.abspath(os.fsdecode(path))
            if path == out or path.startswith(out + os.sep):
                wrote.append(f"{event} {os.path.relpath(path, out)}")

    import torch
    import trl

    from grpo_kit.cli import main
    from grpo_kit.engines.trl_engine import KitHistory

    seen = {}
    train = trl.GRPOTrainer.train

    def recorded_train(trainer, *args, **kwargs):
        seen["before"] = fingerprint(trainer.model)
        result = train(trainer, *args, **kwargs)
        seen["after"] = fingerprint(trainer.model)
        seen["backend"] = torch.distributed.get_backend() if torch.distributed.is_initialized() else None
        seen["batch"] = {k: getattr(trainer.args, k) for k in BATCH}
        seen["history"] = next(c.history for c in trainer.callback_handler.callbacks if isinstance(c, KitHistory))
        return result

    trl.GRPOTrainer.train = recorded_train
    sys.addaudithook(audit)
    code = main(argv)
    rank = os.environ.get("RANK", "0")
    (records / f"rank{rank}.json").write_text(json.dumps({"rank": int(rank), "exit": code, "wrote": wrote, **seen}))
    return code


if __name__ == "__main__":
    sys.exit(probe(Path(sys.argv[1]), sys.argv[2:]))
