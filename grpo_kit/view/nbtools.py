"""Run notebooks as tests: record values inside a notebook, read them back after papermill.

In a notebook::

    from grpo_kit.view.nbtools import record
    record("final_accuracy", acc)          # shows "final_accuracy = 0.83" and stores it

In a test or your own regression script::

    values = run_notebook("notebooks/00_quickstart.ipynb", parameters={"SMOKE": True})
    assert values["final_accuracy"] > values["base_accuracy"]
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

MIME = "application/vnd.grpo-kit.record+json"
# when set to a folder, run_notebook also keeps a copy of each notebook it executed without error
# there, as <folder>/<notebook name>.ipynb (make test-full keeps its full runs in build/executed/ for make book)
KEEP_ENV = "GRPO_KIT_KEEP_EXECUTED"
_RECORDS: dict = {}


def record(name: str, value) -> None:
    """Store a JSON-serialisable value under ``name`` in the notebook's output.

    The value travels as JSON text (``"json"``), so NaN and ±inf come back from :func:`read_records` as
    floats: Jupyter cleans display data itself and would turn them into the strings ``'nan'``/``'inf'``.
    """
    text = json.dumps(value)  # fail here, not when reading back
    _RECORDS[name] = value
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:
        return
    if get_ipython() is not None:
        display({MIME: {"name": name, "json": text}, "text/plain": f"{name} = {value!r}"}, raw=True)


SMOKE_TEXT = ("**Smoke mode** (`SMOKE = True`): every run here is cut short so the notebook finishes in about a "
              "minute and checks its mechanics. The accuracies and curves it prints are not results: a short run "
              "can end *below* the base model. The notebook's conclusions are asserted only in a full run "
              "(`SMOKE = False`).")


def smoke_banner(smoke: bool) -> None:
    """Say at the top of a notebook run in smoke mode that its numbers are not results (shows nothing otherwise)."""
    if not smoke:
        return
    try:
        from IPython import get_ipython
        from IPython.display import Markdown, display
    except ImportError:
        get_ipython = None
    if get_ipython is not None and get_ipython() is not None:
        display(Markdown("> " + SMOKE_TEXT))
    else:
        print(SMOKE_TEXT.replace("**", "").replace("`", "").replace("*", ""))


def read_records(path: str | Path) -> dict:
    """Every value recorded in an executed notebook, by name (a later record wins).

    Notebooks executed before values travelled as JSON text hold them under ``"value"``; those are read as stored.
    """
    nb = json.loads(Path(path).read_text())
    out = {}
    for cell in nb.get("cells", []):
        for o in cell.get("outputs", []):
            data = o.get("data", {})
            if MIME in data:
                rec = data[MIME]
                out[rec["name"]] = json.loads(rec["json"]) if "json" in rec else rec["value"]
    return out


POLL_SLICE_S = 1.0


def _poll_in_slices() -> None:
    """Make jupyter_client's asyncio channels wait for a message in slices of at most ``POLL_SLICE_S``.

    nbclient waits for a cell's reply with one ``socket.poll(cell timeout)``. When zmq's edge-triggered
    notification of a ready message is lost, that poll only returns at its timeout, when a last
    non-blocking check finds the reply that was there all along: measured on 2026-12-06 in
    `.ci/run`, a 20-second smoke notebook spent exactly its 600-second cell timeout in a cell that
    draws one figure, and then passed. Polling in slices bounds such a stall to a slice, and keeps
    the same overall timeout. Applied once, to the process that runs papermill.
    """
    import time
    from queue import Empty

    from jupyter_client.channels import AsyncZMQSocketChannel

    if getattr(AsyncZMQSocketChannel.get_msg, "_grpo_kit_sliced", False):
        return
    whole = AsyncZMQSocketChannel.get_msg

    async def get_msg(self, timeout: float | None = None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = POLL_SLICE_S if deadline is None else max(0.0, min(POLL_SLICE_S, deadline - time.monotonic()))
            try:
                return await whole(self, left)
            except Empty:
                if deadline is not None and time.monotonic() >= deadline:
                    raise

    get_msg._grpo_kit_sliced = True
    AsyncZMQSocketChannel.get_msg = get_msg


def run_notebook(path: str | Path, out_path: str | Path | None = None, parameters: dict | None = None,
                 timeout: int = 900, kernel: str = "python3") -> dict:
    """Execute a notebook headlessly with papermill and return its recorded values.

    A cell that raises (a failed ``assert`` included) raises ``papermill.PapermillExecutionError``.
    With ``$GRPO_KIT_KEEP_EXECUTED`` set to a folder, a run that raised nothing is also copied there
    under the notebook's own name.
    """
    import papermill as pm

    _poll_in_slices()
    path = Path(path)
    out_path = Path(out_path) if out_path else path.with_name(path.stem + ".out.ipynb")
    pm.execute_notebook(str(path), str(out_path), parameters=parameters or {}, kernel_name=kernel,
                        execution_timeout=timeout, cwd=str(path.parent), progress_bar=False)
    keep = os.environ.get(KEEP_ENV)
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(out_path, Path(keep) / path.name)
    return read_records(out_path)
