"""grpo_kit.view.nbtools: values recorded in a notebook come back from papermill as they were recorded."""
import json
import math

import nbformat
import pytest

from grpo_kit.view.nbtools import KEEP_ENV, MIME, read_records, run_notebook


@pytest.mark.notebook
def test_non_finite_floats_round_trip_through_a_notebook_as_floats(tmp_path, monkeypatch):
    """Jupyter cleans display data into the strings 'nan'/'inf'; the records must still read back as floats.

    With $GRPO_KIT_KEEP_EXECUTED set, the executed notebook is also kept there under its own name."""
    monkeypatch.setenv(KEEP_ENV, str(tmp_path / "kept"))
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(
        "from grpo_kit.view.nbtools import record\n"
        "record('nan', float('nan'))\n"
        "record('inf', float('inf'))\n"
        "record('nested', {'curve': [1.5, float('-inf')], 'word': 'nan'})\n")]
    src = tmp_path / "records.ipynb"
    nbformat.write(nb, src)
    v = run_notebook(src, tmp_path / "records.out.ipynb", timeout=120)
    assert isinstance(v["nan"], float) and math.isnan(v["nan"])
    assert v["inf"] == math.inf
    assert v["nested"] == {"curve": [1.5, -math.inf], "word": "nan"}  # a real string stays a string
    assert read_records(tmp_path / "kept" / "records.ipynb").keys() == v.keys()


def test_notebooks_executed_before_json_records_still_read(tmp_path):
    """An executed notebook that stored records under "value" (before they travelled as JSON text) reads as stored."""
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("")
    cell.outputs = [nbformat.v4.new_output("display_data", data={MIME: {"name": "acc", "value": 0.5}})]
    nb.cells = [cell]
    path = tmp_path / "old.ipynb"
    path.write_text(json.dumps(nb))
    assert read_records(path) == {"acc": 0.5}


def test_smoke_banner_says_numbers_are_not_results_only_in_smoke_mode(capsys):
    from grpo_kit.view import smoke_banner

    smoke_banner(False)
    assert capsys.readouterr().out == ""
    smoke_banner(True)
    out = capsys.readouterr().out
    assert "Smoke mode" in out and "not results" in out and "SMOKE = False" in out


def test_a_reply_the_socket_never_announced_is_found_within_a_slice(monkeypatch):
    # a fake channel whose poll never wakes up for a message that is already there (the lost wakeup):
    # its first 2 calls come back empty at their timeout, the 3rd finds the reply
    import asyncio
    import time
    from queue import Empty

    from jupyter_client.channels import AsyncZMQSocketChannel

    from grpo_kit.view import nbtools

    calls = []

    async def lost_wakeup(self, timeout=None):
        calls.append(timeout)
        if len(calls) < 3:
            await asyncio.sleep(timeout)
            raise Empty
        return {"msg": "reply"}

    monkeypatch.setattr(AsyncZMQSocketChannel, "get_msg", lost_wakeup)
    monkeypatch.setattr(nbtools, "POLL_SLICE_S", 0.05)
    nbtools._poll_in_slices()
    chan = object.__new__(AsyncZMQSocketChannel)
    t0 = time.monotonic()
    assert asyncio.run(chan.get_msg(timeout=600)) == {"msg": "reply"}
    assert time.monotonic() - t0 < 5 and calls[:2] == [0.05, 0.05]  # slices, not one 600-s wait
    # no message at all: Empty once the whole timeout has passed, as before
    calls.clear()

    async def nothing(self, timeout=None):
        await asyncio.sleep(timeout)
        raise Empty

    monkeypatch.setattr(AsyncZMQSocketChannel, "get_msg", nothing)
    nbtools._poll_in_slices()
    t0 = time.monotonic()
    with pytest.raises(Empty):
        asyncio.run(chan.get_msg(timeout=0.2))
    assert 0.19 < time.monotonic() - t0 < 2
