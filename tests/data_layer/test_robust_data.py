"""Loaders reject malformed rows with file, line and reason, or skip and count them;
random lines and bytes only ever give DataError."""
import json
import logging

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grpo_kit.data.tasks import load_gsm8k, load_items, scan_items
from grpo_kit.errors import DataError

GOOD = {"prompt": "2+2=", "answer": "4"}
BAD_KIT_ROWS = [  # (line, reason the loader must give)
    ('{"prompt": "1+1="}', "missing field 'answer'"),
    ('{"prompt": 5, "answer": "5"}', "field 'prompt' must be a string, got int"),
    ('{"prompt": "   ", "answer": "5"}', "field 'prompt' is empty"),
    ('{"prompt": "1+1=", "answer": "two"}', "field 'answer' is not a number: 'two'"),
    ('{"prompt": "1+1=", "answer": 2}', "field 'answer' must be a string, got int"),
    ('{"prompt": "1+1=", "answer": NaN}', "field 'answer' must be a string, got float"),
    ('{"prompt": "1+1=", "answer": null}', "field 'answer' must be a string, got NoneType"),
    ('"just a string"', "expected a JSON object, got str"),
    ("{'prompt': 'single quotes'}", "not valid JSON"),
    ("[" * 100_000, "not valid JSON"),            # nesting too deep for the parser
    ('{"prompt": "x", "answer": ' + "9" * 5000 + "}", "not valid JSON"),  # int over Python's digit limit
]


def _write(tmp_path, lines, name="d.jsonl"):
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n")
    return p


@pytest.mark.parametrize("line,reason", BAD_KIT_ROWS)
def test_each_bad_kit_row_raises_with_file_line_reason(tmp_path, line, reason):
    p = _write(tmp_path, [json.dumps(GOOD), "", line])
    with pytest.raises(DataError) as e:
        load_items(p)
    assert f"{p}, line 3: {reason}" in str(e.value)


def test_skip_drops_and_counts_every_bad_row(tmp_path, caplog):
    lines = [json.dumps(GOOD)] + [line for line, _ in BAD_KIT_ROWS] + [json.dumps({**GOOD, "prompt": "3+3="})]
    p = _write(tmp_path, lines)
    items, bad = scan_items(p)
    assert [it["prompt"] for it in items] == ["2+2=", "3+3="]
    assert [n for n, _ in bad] == list(range(2, 2 + len(BAD_KIT_ROWS)))  # every bad line, by number
    assert all(want in got for (_, want), (_, got) in zip(BAD_KIT_ROWS, bad))
    with caplog.at_level(logging.WARNING, logger="grpo_kit.data.tasks"):
        assert load_items(p, on_bad_row="skip") == items
    assert f"skipped {len(BAD_KIT_ROWS)} malformed row(s) of {len(BAD_KIT_ROWS) + 2}" in caplog.text


def test_gsm8k_skip_and_all_bad(tmp_path):
    p = _write(tmp_path, ['{"question": "q", "answer": "#### 7"}', '{"question": "q2", "answer": "#### x"}'])
    assert load_gsm8k(p, on_bad_row="skip") == [{"prompt": "q", "answer": "7", "solution": ""}]
    with pytest.raises(DataError, match="line 2: the final answer"):
        load_gsm8k(p)
    q = _write(tmp_path, ["{}", "[]"], "bad.jsonl")
    with pytest.raises(DataError, match="all 2 rows are malformed"):
        load_items(q, on_bad_row="skip")
    with pytest.raises(DataError, match="on_bad_row='drop'"):
        load_items(p, on_bad_row="drop")


def test_file_level_problems(tmp_path):
    with pytest.raises(DataError, match="is a folder"):
        load_items(tmp_path)
    (tmp_path / "e.jsonl").write_text("\n  \n")
    with pytest.raises(DataError, match="no rows"):
        load_items(tmp_path / "e.jsonl", on_bad_row="skip")
    (tmp_path / "b.jsonl").write_bytes(b'{"prompt": "\xff"}\n')
    with pytest.raises(DataError, match="cannot read"):
        load_items(tmp_path / "b.jsonl")


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
                           lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=3),
                           max_leaves=8)
rows = st.dictionaries(st.sampled_from(["prompt", "answer", "question", "extra"]), json_values, max_size=4)
lines = st.one_of(rows.map(json.dumps), json_values.map(json.dumps), st.text(max_size=30),
                  st.sampled_from([json.dumps(GOOD), '{"question": "q", "answer": "a #### 1,2"}']))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(lines, max_size=6), st.sampled_from(["raise", "skip"]))
def test_random_lines_only_ever_raise_data_error(tmp_path, file_lines, on_bad_row):
    p = tmp_path / "h.jsonl"
    p.write_text("\n".join(file_lines), encoding="utf-8", errors="surrogatepass")
    try:
        items = load_items(p, on_bad_row=on_bad_row)
    except DataError:
        return
    for it in items:  # what gets through is a usable item
        assert isinstance(it["prompt"], str) and it["prompt"].strip() and isinstance(it["answer"], str)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=80))
def test_random_bytes_only_ever_raise_data_error(tmp_path, data):
    p = tmp_path / "b.jsonl"
    p.write_bytes(data)
    for on_bad_row in ("raise", "skip"):
        try:
            load_gsm8k(p, on_bad_row=on_bad_row)
        except DataError:
            pass
