"""grpo-kit: learn and experiment with GRPO on a tiny model, then on a real one.

The notebook API is kept small on purpose; import submodules for the rest.
"""
from .config import GRPOConfig
from .errors import CheckpointError, ConfigError, DataError, GRPOKitError, RewardError
from .tiny import load_model
from .train import setup, train

__all__ = ["GRPOConfig", "setup", "train", "load_model", "GRPOKitError", "ConfigError", "DataError",
           "RewardError", "CheckpointError"]
__version__ = "0.1.0"
