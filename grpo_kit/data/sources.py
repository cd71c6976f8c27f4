"""Where a run's training items come from: ``GRPOConfig.dataset`` in the forms Hugging Face users have.

| ``dataset`` | read with | splits |
|---|---|---|
| ``*.jsonl`` | ``tasks.load_items`` (kit or GSM8K rows; an error names the line) | one table |
| ``*.parquet`` | ``pyarrow.parquet.read_table`` | one table |
| ``*.csv`` | ``pyarrow.csv.read_csv`` (typed columns; newlines inside quotes kept) | one table |
| a folder written by ``save_to_disk`` | ``datasets.load_from_disk`` | a ``DatasetDict``'s folder has splits |
| a ``datasets.Dataset`` / ``DatasetDict`` (Python) | as it is | a ``DatasetDict`` has splits |
| ``owner/name``, not on disk | ``datasets.load_dataset(name, dataset_config, split=...)`` | yes |

``dataset_split`` picks the split of a source that has splits (None: ``train``) and is refused for one that
has none; ``dataset_config`` is a Hub dataset's configuration (``main`` for ``openai/gsm8k``). Every table
is read by ``tasks.table_item``: ``dataset_columns`` names the prompt and the answer column, a GSM8K answer
``"... #### 42"`` is read as 42, and the other columns reach reward functions, as a jsonl row's keys do.

Files users share are data: nothing here unpickles or runs code from a dataset. Parquet, CSV and Arrow are
read as tables; a pickle (``.pkl``, ``.pt``, ...) is refused unread; a Hub dataset is loaded with
``trust_remote_code=False`` (``datasets`` >= 4 runs no loading script at all).

Offline (``HF_HUB_OFFLINE=1``, or the hub unreachable: ``online()`` is False) a Hub name whose tables are
not in the local ``datasets`` cache is refused by :func:`check_source` at once, by looking at the cache
folder (``datasets`` is not even imported), with the fix in the message.
"""
from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from grpo_kit.config import datasets_type
from grpo_kit.data.tasks import load_items, table_columns, table_items
from grpo_kit.errors import DataError

READERS = (".jsonl", ".parquet", ".csv")
"""File types read as a table of items."""
PICKLES = (".pkl", ".pickle", ".pt", ".pth", ".joblib")
"""File types that hold pickles, which run code when read: refused unread."""
_HUB_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}")  # owner/name
FORMS = ("use a .jsonl, .parquet or .csv file, a folder written by Dataset.save_to_disk, or a Hugging Face Hub "
         "name (owner/name)")


@dataclass(frozen=True)
class Source:
    """What ``GRPOConfig.dataset`` names: ``kind`` is 'jsonl', 'parquet', 'csv', 'disk' (a ``save_to_disk``
    folder), 'object' (a ``Dataset`` / ``DatasetDict``) or 'hub'; ``splits`` whether it has splits."""

    kind: str
    spec: object
    splits: bool

    @property
    def where(self) -> str:
        """How errors name it: the path or Hub name as given, or the object's type."""
        if self.kind != "object":
            return str(self.spec)
        return f"the {type(self.spec).__name__} in GRPOConfig.dataset"

    @property
    def path(self) -> str:
        """A file or folder source's path, ``~`` expanded."""
        return os.path.expanduser(str(self.spec))


_REACHABLE: dict[str, bool] = {}


def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the Hugging Face hub answers a TCP connection within ``timeout`` seconds (cached).

    With ``HF_HUB_OFFLINE`` set: False. Behind a proxy (``HTTPS_PROXY``/``ALL_PROXY``) the answer
    cannot be known from here: True, and the hub client decides.
    """
    from urllib.parse import urlparse

    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        return False
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return True
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    host, port = url.hostname or "huggingface.co", url.port or (443 if url.scheme != "http" else 80)
    if host not in _REACHABLE:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            _REACHABLE[host] = True
        except OSError:
            _REACHABLE[host] = False
    return _REACHABLE[host]


def source_of(spec) -> Source:
    """What ``spec`` names, by its form and the file system; nothing is read. A path on disk wins over a Hub
    name. A :class:`DataError` names a missing file, an unknown file type, a pickle, or a folder that
    ``save_to_disk`` did not write."""
    if not isinstance(spec, str):
        kind = datasets_type(spec)
        if kind is None:
            raise DataError(f"dataset of type {type(spec).__name__}: {FORMS}, or in Python a datasets.Dataset or "
                            f"DatasetDict")
        return Source("object", spec, kind == "DatasetDict")
    path = Path(os.path.expanduser(spec))
    suffix = path.suffix.lower()
    try:
        is_file, is_dir = path.is_file(), path.is_dir()
    except (OSError, ValueError):  # too long, or a NUL: not on this file system
        is_file = is_dir = False
    if suffix in PICKLES and (is_file or not _HUB_NAME.fullmatch(spec)):
        raise DataError(f"{spec}: a {suffix} file is a pickle, which runs code when it is read, so it is never "
                        f"loaded; write the data as .parquet or .jsonl (Dataset.to_parquet, Dataset.to_json)")
    if is_file:
        if suffix not in READERS:
            raise DataError(f"{spec}: unknown dataset file type {suffix or '(none)'!r}; {FORMS}")
        return Source(suffix[1:], spec, False)
    if is_dir:
        if (path / "dataset_dict.json").is_file():
            return Source("disk", spec, True)
        if (path / "state.json").is_file():
            return Source("disk", spec, False)
        raise DataError(f"{spec}: a folder, but not one written by save_to_disk (it has no state.json or "
                        f"dataset_dict.json); pass such a folder, or one .parquet, .csv or .jsonl file")
    if suffix in READERS or not _HUB_NAME.fullmatch(spec):
        raise DataError(f"{spec}: no such file or folder; {FORMS}")
    return Source("hub", spec, True)


def datasets_cache() -> Path:
    """The folder where ``datasets`` keeps the tables it prepared (``HF_DATASETS_CACHE``, else under ``HF_HOME``)."""
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface")
    return Path(os.path.expanduser(os.environ.get("HF_DATASETS_CACHE") or os.path.join(home, "datasets")))


def hub_cached(name: str, cache: Path) -> bool:
    """Whether ``cache`` (see :func:`datasets_cache`) holds tables of Hub dataset ``name``: ``datasets`` keeps them
    in ``owner___name`` (the name in snake case), compared here ignoring case and underscores; offline,
    ``load_dataset`` reads only these."""
    def key(text: str) -> str:
        return text.lower().replace("_", "")

    owner, repo = name.split("/", 1)
    want = key(f"{owner}___{repo}")
    try:
        return any(key(p.name) == want and p.is_dir() for p in cache.iterdir())
    except OSError:  # no cache folder yet
        return False


def check_source(src: Source, split: str | None = None, config: str | None = None,
                 online: Callable[[], bool] = lambda: True) -> None:
    """The rules between ``dataset``, ``dataset_split`` and ``dataset_config``, and, for a Hub name while offline
    (``online()`` False; asked only for a Hub name), that its tables are in the local cache. Reads no data."""
    if config is not None and src.kind != "hub":
        raise DataError(f"{src.where}: dataset_config={config!r} names a configuration of a Hub dataset, and this "
                        f"is a {src.kind} source; remove dataset_config")
    if split is not None and not src.splits:
        raise DataError(f"{src.where}: dataset_split={split!r}, but this {src.kind} source is one table without "
                        f"splits; remove dataset_split (it picks a split of a DatasetDict, its folder or a Hub dataset)")
    if src.kind == "hub" and not online() and not hub_cached(str(src.spec), datasets_cache()):
        offline = os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")
        why = "HF_HUB_OFFLINE is set" if offline else "no answer from the hub"
        call = ", ".join(repr(a) for a in (src.spec, config) if a is not None)
        raise DataError(f"{src.spec}: not a file or folder here, so read as a Hugging Face Hub dataset, but the hub "
                        f"cannot be reached ({why}) and the dataset is not in the local cache ({datasets_cache()}); "
                        f"on a machine with network run datasets.load_dataset({call}).save_to_disk('DIR'), then "
                        f"pass the folder DIR as dataset")


def source_path(spec, split: str | None = None) -> str | None:
    """The file or folder whose content is the training items (a ``DatasetDict`` folder: the split's folder);
    None for a Hub name or an object. For the content hash a resume compares."""
    if not isinstance(spec, str):
        return None
    path = Path(os.path.expanduser(spec))
    if (path / "dataset_dict.json").is_file():
        return str(path / (split or "train"))
    return str(path)


def _need(module: str, src: Source):
    """``import module`` (pyarrow, datasets), or a DataError saying how to install it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise DataError(f"{src.where}: reading a {src.kind} dataset needs the package "
                        f"{module.split('.')[0]}; pip install datasets (it brings pyarrow)") from None


def _pick_split(ds, split: str | None, where: str):
    """A ``DatasetDict``'s split ``split`` (None: ``train``) and its name for errors; a ``Dataset`` as it is."""
    if datasets_type(ds) != "DatasetDict":
        return ds, where
    name = split or "train"
    if name not in ds:
        raise DataError(f"{where}: no split {name!r} (splits: {', '.join(ds)}); choose one with dataset_split")
    return ds[name], f"{where} split {name!r}"


def _arrow_table(src: Source):
    """A parquet or csv file as a pyarrow Table (a file pyarrow cannot parse is a DataError)."""
    pa = _need("pyarrow", src)
    try:
        if src.kind == "parquet":
            return _need("pyarrow.parquet", src).read_table(src.path)
        csv = _need("pyarrow.csv", src)
        return csv.read_csv(src.path, parse_options=csv.ParseOptions(newlines_in_values=True))
    except (pa.ArrowException, OSError) as e:
        first = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        raise DataError(f"{src.where}: cannot read the file as {src.kind} ({first})") from None


def _hub_dataset(src: Source, split: str | None, config: str | None):
    """``datasets.load_dataset`` of a Hub name: one split, no code run; its failures as one DataError."""
    datasets = _need("datasets", src)
    try:
        return datasets.load_dataset(src.spec, config, split=split or "train", trust_remote_code=False)
    except Exception as e:  # noqa: BLE001 - not found, gated, no such split or config, offline: one user-facing error
        first = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
        raise DataError(f"{src.spec}: cannot load the Hub dataset (config {config!r}, split {split or 'train'!r}): "
                        f"{type(e).__name__}: {first}; check the name, dataset_config and dataset_split on "
                        f"https://huggingface.co/datasets/{src.spec}") from None


def read_table(src: Source, split: str | None = None, config: str | None = None) -> tuple[list[str], list[dict], str]:
    """(column names, rows as dicts, how errors name it) of a source other than jsonl."""
    if src.kind in ("parquet", "csv"):
        table = _arrow_table(src)
        return table.column_names, table.to_pylist(), src.where
    if src.kind == "disk":
        ds = _need("datasets", src).load_from_disk(src.path)
    elif src.kind == "hub":
        ds = _hub_dataset(src, split, config)
    else:
        ds = src.spec
    ds, where = _pick_split(ds, split, src.where)
    return list(ds.column_names), ds.to_list(), where


def check_table(names: list[str], columns: dict[str, str], n_rows: int, where: str) -> None:
    """A table has rows and every column ``columns`` maps to; a kit column name held by another column than
    the one mapped to it is refused (the two would be mixed up)."""
    if n_rows == 0:
        raise DataError(f"{where}: no rows; train on a file or split that has some (dataset_split picks the split)")
    for kit, col in columns.items():
        if col not in names:
            raise DataError(f"{where}: no column {col!r} for the {kit} (columns: {', '.join(map(repr, names))}); "
                            f"name the {kit} column in dataset_columns: {{{kit}: <one of these columns>}}")
        if col != kit and kit in names:
            raise DataError(f"{where}: dataset_columns takes the {kit} from {col!r}, and the dataset has a column "
                            f"{kit!r} too; rename or drop one of them (Dataset.rename_column / remove_columns)")


def load_source(spec, columns: dict | None = None, split: str | None = None, config: str | None = None,
                on_bad_row: str = "raise", online: Callable[[], bool] = lambda: True) -> list[dict]:
    """The training items ``spec`` (``GRPOConfig.dataset``) names, read as this module's table says; ``columns``
    is ``dataset_columns``, ``split`` ``dataset_split``, ``config`` ``dataset_config``; ``on_bad_row`` as in
    ``tasks.load_items``; ``online`` says whether the hub can be reached (asked only for a Hub name)."""
    src = source_of(spec)
    check_source(src, split, config, online)
    if src.kind == "jsonl":
        return load_items(src.path, on_bad_row, columns)
    names, rows, where = read_table(src, split, config)
    mapped = table_columns(names, columns)
    check_table(names, mapped, len(rows), where)
    return table_items(rows, mapped, where, on_bad_row)
