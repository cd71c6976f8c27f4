"""The output folder of a run: who may write it, what may be replaced, and how files land on disk.

- :func:`check_out_folder` refuses to start a new run in a folder that holds another run (pass
  ``resume`` to continue it or ``overwrite`` to replace it) and a ``resume`` with nothing to
  resume; ``overwrite`` removes only what grpo-kit writes and refuses a folder holding anything else.
- :func:`check_output` is the same rule for every command that writes a folder (``export --to``,
  ``train-judge --out``, ``make-base --out``): a new or empty folder, or with ``overwrite`` one that
  holds only the command's own files (then :func:`remove_own` deletes just those). A folder that
  is or holds one of the command's inputs is refused, and ``overwrite`` never clears the folder
  the user stands in, one above it, the home folder or ``/``.
- :class:`RunLock` is a lock file (``.grpo-kit.lock``, holding the owner's process id) so that two
  processes never write one folder; a lock left by a dead process is taken over with a warning.
- :func:`atomic_write_text` writes a temp file and renames it; a full disk becomes a one-line
  :class:`DiskFullError` naming the file, with the partial file removed.
"""
from __future__ import annotations

import errno
import fnmatch
import logging
import os
import shutil
import socket
from pathlib import Path

from grpo_kit.errors import DiskFullError, RunFolderError

log = logging.getLogger(__name__)

LOCK_FILE = ".grpo-kit.lock"
# everything a grpo-kit run writes into its output folder (what --overwrite may delete); model/: --engine trl
RUN_FILES = {"checkpoints", "history.jsonl", "completions.jsonl", "summary.json", "config.yaml", "curves.png", "curves.html", "model",
             LOCK_FILE}
# what save_pretrained writes for a model and its tokenizer (names or glob patterns): export, train-judge, make-base
MODEL_FILES = ("config.json", "generation_config.json", "*.safetensors", "*.safetensors.index.json",
               "pytorch_model*.bin", "pytorch_model.bin.index.json", "tokenizer.json", "tokenizer_config.json",
               "tokenizer.model", "special_tokens_map.json", "added_tokens.json", "vocab.json", "vocab.txt",
               "merges.txt", "chat_template.jinja", "chat_template.json")


def quote(value, limit: int = 200) -> str:
    """``repr(value)`` cut to ``limit`` characters, so an error message stays one readable line."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"...' ({len(text)} characters)"


def check_path(path, what: str) -> Path:
    """``path`` as a Path, or a :class:`RunFolderError` when it is empty or the file system cannot encode it."""
    if path is None or str(path).strip() == "":
        raise RunFolderError(f"{what} is empty; give a path")
    try:
        os.fsencode(str(path))
    except UnicodeEncodeError as e:
        raise RunFolderError(f"{what} {quote(str(path))} cannot be encoded by the file system ({e.reason} at "
                             f"position {e.start}); use a name of plain characters") from None
    if "\x00" in str(path):
        raise RunFolderError(f"{what} {quote(str(path))} contains a NUL character; use a name of plain characters")
    return Path(os.path.expanduser(str(path)))


def has_run(out: Path) -> bool:
    """Whether ``out`` holds checkpoints of a run (``checkpoints/latest``)."""
    return (out / "checkpoints" / "latest").is_file()


def check_out_folder(out, resume: bool = False, overwrite: bool = False, inputs=()) -> Path:
    """Check ``out`` before a run writes anything into it; with ``overwrite`` remove the old run.

    A new run needs a missing or empty folder; ``resume`` needs one with a checkpoint. ``inputs``
    (the config, model and dataset paths): with ``overwrite``, a folder holding one is refused.
    """
    out = check_path(out, "the output folder")
    if resume and overwrite:
        raise RunFolderError("--resume continues the run in the folder and --overwrite deletes it; pass one of them")
    if out.exists() and not out.is_dir():
        raise RunFolderError(f"{out} is a file, not a folder; choose another output folder")
    if resume:
        if not out.is_dir():
            raise RunFolderError(f"nothing to resume: {out} does not exist; check the path, or start a new run "
                                 f"without --resume")
        if not has_run(out):
            raise RunFolderError(f"nothing to resume: {out} has no checkpoint (no checkpoints/latest); check the "
                                 f"path, or start afresh there with --overwrite instead of --resume")
        return out
    old = check_output(out, RUN_FILES, overwrite, inputs=inputs if overwrite else (), what="the output folder",
                       fix="continue the run there with --resume, replace it with --overwrite, or choose another "
                           "--out", kind="a run folder")
    if old:
        remove_own(out, old)
        log.warning("--overwrite: removed the previous run in %s", out)
    return out


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def protected(folder: Path) -> str | None:
    """Why ``folder`` is never cleared (the folder the user stands in, one above it, home, ``/``), or None."""
    here, home = Path.cwd().resolve(), Path(os.path.expanduser("~")).resolve()
    if folder == home:
        return "your home folder"
    if folder == here:
        return "the folder you are in"
    if folder in here.parents:
        return "a folder above the one you are in"
    if folder == folder.parent:
        return "the root of the file system"
    return None


def check_output(out, own, overwrite: bool = False, inputs=(), what: str = "--out", fix: str | None = None,
                 marker: str | None = None, kind: str = "what this command wrote") -> list[str]:
    """Check the folder ``out`` before a command writes its files (``own``: names or glob patterns) into it.

    A missing or empty folder is fine; a non-empty one needs ``overwrite``, and then may hold only
    ``own`` entries (and ``marker``, when given, must be among them: the sign that the command wrote
    it) and must not be the folder the user stands in or above it, home or ``/``. A folder that is
    or holds one of ``inputs`` (existing paths the command reads) is refused, and so is one inside
    an input folder. Raises :class:`RunFolderError`; returns the entries :func:`remove_own` should
    delete just before the command writes (none unless ``overwrite``). Deletes nothing itself.
    """
    out = check_path(out, what)
    if out.exists() and not out.is_dir():
        raise RunFolderError(f"{what} {out} is a file; choose a folder")
    there = out.resolve()
    for p in inputs:
        if p is None or not Path(os.path.expanduser(str(p))).exists():
            continue
        src = Path(os.path.expanduser(str(p))).resolve()
        if _inside(src, there) or _inside(there, src):
            where = "is" if src == there else ("holds" if _inside(src, there) else "is inside")
            raise RunFolderError(f"{what} {out} {where} the input {p}; write to a folder apart from what the "
                                 f"command reads")
    entries = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
    if not entries or entries == [LOCK_FILE]:
        return []
    if not overwrite:
        shown = ", ".join(entries[:4]) + (", ..." if len(entries) > 4 else "")
        raise RunFolderError(f"{what} {out} is not empty ({shown}); "
                             f"{fix or 'choose an empty or new folder, or pass --overwrite to replace it'}")
    why = protected(there)
    if why:
        raise RunFolderError(f"--overwrite: {what} {out} is {why}; grpo-kit never clears it; choose a new folder")
    foreign = [e for e in entries if e != LOCK_FILE and not any(fnmatch.fnmatchcase(e, n) for n in own)]
    if foreign:
        raise RunFolderError(f"--overwrite: {what} {out} holds files grpo-kit did not write ({', '.join(foreign[:4])}"
                             f"{', ...' if len(foreign) > 4 else ''}); it only replaces {kind}; move them or "
                             f"choose another folder")
    if marker and marker not in entries:
        raise RunFolderError(f"--overwrite: {what} {out} has no {marker}, so it is not {kind}; choose another "
                             f"folder")
    return [e for e in entries if e != LOCK_FILE]


def remove_own(out, names) -> None:
    """Delete the entries ``names`` of ``out`` (what :func:`check_output` returned); nothing else."""
    for name in names:
        p = Path(out) / name
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        elif p.exists() or p.is_symlink():
            p.unlink()


# ---------------------------------------------------------------- lock

_held: dict[str, int] = {}  # lock path -> how many times this process holds it (re-entrant)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        return True
    return True


def _read_lock(path: Path) -> tuple[int | None, str]:
    try:
        text = path.read_text()
        pid_s, _, host = text.strip().partition(" ")
        return int(pid_s), host
    except (OSError, ValueError):
        return None, ""


class RunLock:
    """``with RunLock(out):`` the process holds ``out/.grpo-kit.lock`` (its pid and host name).

    A second process gets a :class:`RunFolderError` naming the holder's pid. A lock whose process
    is gone (killed with SIGKILL, machine crash) is taken over with a warning. Re-entrant within
    one process. Released on every exit of the ``with`` block; a killed process leaves a stale lock.
    """

    def __init__(self, out):
        self.out = Path(out)
        self.path = self.out / LOCK_FILE
        self.key = str(self.path.resolve()) if self.out.exists() else os.path.abspath(self.path)

    def acquire(self) -> "RunLock":
        if _held.get(self.key):
            _held[self.key] += 1
            return self
        self.out.mkdir(parents=True, exist_ok=True)
        self.key = str(self.path.resolve())
        me = f"{os.getpid()} {socket.gethostname()}\n"
        for _ in range(3):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                pid, host = _read_lock(self.path)
                if pid is not None and host not in ("", socket.gethostname()):
                    raise RunFolderError(f"{self.out} is in use by process {pid} on {host} (lock file {self.path}); "
                                         f"wait for it to finish, or delete the lock file if that run is gone")
                if pid is not None and pid != os.getpid() and _alive(pid):
                    raise RunFolderError(f"{self.out} is in use by process {pid} (lock file {self.path}); wait for "
                                         f"it to finish or stop it, or choose another --out")
                log.warning("%s: taking over the lock of process %s, which is gone", self.out, pid) if pid is not None \
                    else log.warning("%s: taking over an unreadable lock file %s", self.out, self.path)
                self.path.unlink(missing_ok=True)
                continue
            with os.fdopen(fd, "w") as f:
                f.write(me)
            _held[self.key] = 1
            return self
        raise RunFolderError(f"{self.out}: could not take the lock {self.path}; another process keeps taking it")

    def release(self) -> None:
        n = _held.get(self.key, 0)
        if n > 1:
            _held[self.key] = n - 1
            return
        if n == 1:
            del _held[self.key]
            pid, _ = _read_lock(self.path)
            if pid == os.getpid():
                self.path.unlink(missing_ok=True)

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()


# ---------------------------------------------------------------- writes

def disk_full(e: BaseException, path, note: str = "") -> DiskFullError:
    """The one-line error for a write that failed because the disk is full."""
    return DiskFullError(f"disk full: could not write {path} (no space left on device)"
                         f"{'; ' + note if note else ''}; free some space and run again "
                         f"(with --resume to continue from the last checkpoint)")


def is_disk_full(e: BaseException) -> bool:
    return isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT)


def atomic_write_text(path, text: str) -> None:
    """Write ``path`` through a temp file and a rename: readers see the old file or the new one, never half."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        if is_disk_full(e):
            raise disk_full(e, path) from e
        raise


def _write(fd: int, data: bytes) -> int:
    return os.write(fd, data)


def append_line(path, line: str) -> None:
    """Append one line to ``path`` in a single write; on failure the file is cut back to its old length."""
    path = Path(path)
    data = (line.rstrip("\n") + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        try:
            done = 0
            while done < len(data):
                done += _write(fd, data[done:])
        except OSError as e:
            try:
                os.ftruncate(fd, size)
            except OSError:
                pass
            if is_disk_full(e):
                raise disk_full(e, path) from e
            raise
    finally:
        os.close(fd)
