import os

import pytest
import torch

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
