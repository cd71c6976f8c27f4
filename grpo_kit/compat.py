"""The kit's modules before they moved into layer folders (``grpo_kit.judges`` is now
``grpo_kit.rewards.judges``): the old dotted names still import the moved module, so a saved config
naming ``grpo_kit.failures:length_judge``, an older notebook or ``monkeypatch.setattr("grpo_kit.train...")``
keeps working. New code imports the new names (``tests/test_layers.py`` checks the kit does).

An old name is the same module object as the new one (``grpo_kit.judges is grpo_kit.rewards.judges``),
not a copy: patching one patches the other.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

LAYOUT = {
    "core": ("advantages", "losses", "metrics", "preferences"),
    "data": ("tasks", "runfolder"),
    "model": ("sampling", "logprobs", "tiny", "lora", "memory", "critic"),
    "rewards": ("judges", "learned_judge", "remote", "resolve", "serve", "symbolic"),
    "eval": ("inference", "diagnostics"),
    "loop": ("step", "train", "schedules", "dynamic", "replay", "beyond_scalar"),
    "lab": ("failures", "population", "offline"),
    "view": ("plotting", "dashboard", "widgets", "nbtools"),
    "engines": ("export",),
}
OLD_NAMES = {f"grpo_kit.{m}": f"grpo_kit.{layer}.{m}" for layer, names in LAYOUT.items() for m in names}
"""old dotted name -> the module's name now"""


class OldNames(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports an old name as the moved module itself (imported on first use, not before)."""

    def find_spec(self, name, path=None, target=None):
        if name not in OLD_NAMES:
            return None
        return importlib.util.spec_from_loader(name, self)

    def create_module(self, spec):
        module = importlib.import_module(OLD_NAMES[spec.name])
        self._spec = module.__spec__  # the import system sets __spec__ to the old name's; put it back below
        return module

    def exec_module(self, module):
        module.__spec__ = self._spec


def install() -> None:
    """Old names for modules already imported point at them now (so ``import grpo_kit.train`` does not
    rebind the package's ``train`` function); the others import on first use."""
    for old, new in OLD_NAMES.items():
        if new in sys.modules:
            sys.modules.setdefault(old, sys.modules[new])
    if not any(isinstance(f, OldNames) for f in sys.meta_path):
        sys.meta_path.append(OldNames())
