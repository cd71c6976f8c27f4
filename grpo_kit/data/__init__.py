"""Data: the arithmetic tasks, their held-out splits, GSM8K-style jsonl files, and run folders.

The names below are what the notebooks use; import a module for the rest.
"""
from grpo_kit.data.tasks import DATASETS_DIR, get_task, heldout_split, load_gsm8k

__all__ = ["DATASETS_DIR", "get_task", "heldout_split", "load_gsm8k"]
