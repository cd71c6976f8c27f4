import os
from pathlib import Path

import pytest
import torch

from grpo_kit.nbtools import KEEP_ENV

# `make book` builds the site from the executed notebooks the full runs leave here
EXECUTED = Path(__file__).resolve().parent.parent / "build" / "executed"

# `make test` runs two pytest workers (pytest-xdist) on two cores: one torch thread each
torch.set_num_threads(1 if os.environ.get("PYTEST_XDIST_WORKER") else 2)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny():
    """The shipped base model and its tokenizer (loaded once per test session)."""
    from grpo_kit.tiny import load_model

    return load_model("tiny")


@pytest.fixture
def small_cfg():
    from grpo_kit.config import GRPOConfig

    # device="cpu": several tests compare runs bit for bit (resume == straight run), which holds
    # in CPU float32 and not under CUDA bf16 autocast on a machine with a GPU
    return GRPOConfig(steps=4, num_prompts=4, num_generations=4, eval_every=0, eval_size=20,
                      checkpoint_every=0, threads=1, device="cpu")


@pytest.fixture(autouse=True)
def _keep_full_runs(request, monkeypatch):
    """A test marked ``full`` keeps each notebook it runs without error in build/executed/ (for make book)."""
    if request.node.get_closest_marker("full") is not None:
        monkeypatch.setenv(KEEP_ENV, str(EXECUTED))
