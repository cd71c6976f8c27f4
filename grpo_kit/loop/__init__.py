"""The training loop: ``setup``, ``grpo_step`` and ``train`` (``loop.train``, exported by ``grpo_kit``),
one update (``step``), the config's names checked before anything loads (``checks``), and what
steers a run over time (``schedules``, ``dynamic``, ``replay``, ``beyond_scalar``).

The names below are what the notebooks use; import a module for the rest. (``train`` is also a
module name here, so the function is taken from ``grpo_kit``.)
"""
from grpo_kit.loop.checks import check_config
from grpo_kit.loop.train import pick_device, resume_run

__all__ = ["check_config", "pick_device", "resume_run"]
