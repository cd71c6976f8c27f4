import json

import pytest

from grpo_kit.data.tasks import (
    ArithmeticTask,
    get_task,
    heldout_split,
    load_gsm8k,
    load_items,
    read_number,
    write_number,
)
from grpo_kit.errors import DataError


def test_reversed_numbers_round_trip():
    assert write_number(46, True) == "64" and write_number(-120, True) == "-021"
    assert read_number("64", True) == 46 and read_number("-021", True) == -120
    assert read_number("6 4", True) is None and read_number("", True) is None


def test_splits_are_disjoint_and_reproducible():
    s = ArithmeticTask(2, "+").splits()
    prompts = [set(it["prompt"] for it in s[k]) for k in ("train", "val", "test")]
    assert not (prompts[0] & prompts[1]) and not (prompts[0] & prompts[2]) and not (prompts[1] & prompts[2])
    assert sum(map(len, prompts)) == 10_000
    assert ArithmeticTask(2, "+").splits()["test"] == s["test"]


def test_shipped_test_split_matches_the_generator():
    assert heldout_split("add2") == get_task("add2").splits()["test"]


def test_difficulty_knobs():
    t = ArithmeticTask(1, "+-*")
    assert {it["prompt"][1] for it in t.splits(n_test=10, n_val=10)["train"]} == {"+", "-", "*"}
    with pytest.raises(DataError, match="operators"):
        ArithmeticTask(2, "/")


def _write(tmp_path, lines):
    p = tmp_path / "data.jsonl"
    p.write_text("\n".join(lines) + "\n")
    return p


def test_gsm8k_loader_reads_final_answer(tmp_path):
    p = _write(tmp_path, [json.dumps({"question": "2 apples + 3?", "answer": "2+3=5\n#### 1,005"})])
    assert load_gsm8k(p) == [{"prompt": "2 apples + 3?", "answer": "1005", "solution": "2+3=5"}]


@pytest.mark.parametrize("line,problem", [
    ('{"question": "q"', "line 2: not valid JSON"),
    ('{"answer": "#### 3"}', "line 2: missing field 'question'"),
    ('{"question": "q", "answer": "no marker"}', "line 2: field 'answer' has no '#### <number>'"),
    ('{"question": "q", "answer": "#### three"}', "line 2: the final answer after '####' is not a number"),
    ('{"question": "", "answer": "#### 3"}', "line 2: field 'question' is empty"),
    ('{"question": 7, "answer": "#### 3"}', "line 2: field 'question' must be a string"),
    ('[1, 2]', "line 2: expected a JSON object"),
])
def test_malformed_rows_name_file_line_and_problem(tmp_path, line, problem):
    p = _write(tmp_path, [json.dumps({"question": "ok", "answer": "#### 1"}), line])
    with pytest.raises(DataError) as e:
        load_items(p)
    assert str(p) in str(e.value) and problem in str(e.value)


def test_missing_file(tmp_path):
    with pytest.raises(DataError, match="no such file"):
        load_items(tmp_path / "nope.jsonl")
