"""grpo-kit: learn and experiment with GRPO on a tiny model, then on a real one.

The notebook API is kept small on purpose; import submodules for the rest.
"""
from grpo_kit.config import GRPOConfig
from grpo_kit.errors import (
           CheckpointError,
           ConfigError,
           DataError,
           GRPOKitError,
           RewardError,
           RunFolderError,
)
from grpo_kit.loop.checks import check_config
from grpo_kit.loop.train import setup, train
from grpo_kit.model.tiny import load_model

__all__ = ["GRPOConfig", "check_config", "setup", "train", "load_model", "GRPOKitError", "ConfigError", "DataError",
           "RewardError", "CheckpointError", "RunFolderError"]
__version__ = "0.1.0"

from grpo_kit import compat as _compat  # noqa: E402  (old module names, after the package's own imports)

_compat.install()
