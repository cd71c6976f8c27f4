"""grpo-kit: learn and experiment with GRPO on a tiny model, then on a real one.

The notebook API is kept small on purpose; import submodules for the rest. The names that need torch
(``setup``, ``train``, ``load_model``, ``check_config``) are imported on first use (PEP 562), so that
``grpo_kit.config``, ``grpo_kit.errors`` and the command line's argument and config checks load in a
fraction of a second: a bad command fails before torch is imported.
"""
import sys
import types

from grpo_kit.config import GRPOConfig, OfflineConfig
from grpo_kit.errors import (
           CheckpointError,
           ConfigError,
           DataError,
           GRPOKitError,
           RewardError,
           RunFolderError,
)

_LAZY = {"check_config": "grpo_kit.loop.checks", "setup": "grpo_kit.loop.train", "train": "grpo_kit.loop.train",
         "load_model": "grpo_kit.model.tiny"}

__all__ = ["GRPOConfig", "OfflineConfig", "check_config", "setup", "train", "load_model", "GRPOKitError", "ConfigError", "DataError",
           "RewardError", "CheckpointError", "RunFolderError"]
__version__ = "0.1.0"


def __getattr__(name: str):
    """``grpo_kit.setup`` and the other torch-backed names of ``__all__``, imported when first asked for."""
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # later lookups skip this function
        return value
    raise AttributeError(f"module 'grpo_kit' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


class _Package(types.ModuleType):
    """The package module: importing an old module name (``grpo_kit.train``, see ``compat``) binds that
    name on the package, as every submodule import does; it must not replace the function ``train``."""

    def __setattr__(self, name, value):
        if name in _LAZY and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


from grpo_kit import compat as _compat  # noqa: E402  (old module names, after the package's own imports)

_compat.install()
