"""Datasets as Hugging Face users have them: table rows read by ``tasks.table_item`` (``dataset_columns``)."""
from __future__ import annotations

import pytest

from grpo_kit.data.tasks import table_columns, table_items
from grpo_kit.errors import DataError


def test_columns_are_mapped_and_the_others_kept():
    rows = [{"q": "2+3=", "a": "two and three\n#### 1,005", "level": 1}, {"q": "1+1=", "a": 2, "level": 2}]
    items = table_items(rows, table_columns(["q", "a", "level"], {"prompt": "q", "answer": "a"}), "t")
    # '#### 1,005' -> 1005 and its worked solution; a plain number has no solution (None, so every row has the column)
    assert items == [{"level": 1, "prompt": "2+3=", "answer": "1005", "solution": "two and three"},
                     {"level": 2, "prompt": "1+1=", "answer": "2", "solution": None}]
    assert table_columns(["question", "answer"]) == {"prompt": "question", "answer": "answer"}  # GSM8K's own names


@pytest.mark.parametrize("prompt,got", [(5, "int 5"), (None, "NoneType None"), ({"a": "b"}, "dict {'a': 'b'}")])
def test_a_prompt_that_is_not_text_nor_messages(prompt, got):
    rows = [{"prompt": "1+1=", "answer": "2"}, {"prompt": prompt, "answer": "3"}]
    with pytest.raises(DataError) as e:
        table_items(rows, {"prompt": "prompt", "answer": "answer"}, "t.parquet")
    assert str(e.value) == (f"t.parquet, row 2: column 'prompt' (the prompt) must be text or a list of "
                            f"{{'role': str, 'content': str}} messages, got {got}")
    assert table_items(rows, {"prompt": "prompt", "answer": "answer"}, "t", on_bad_row="skip") == [rows[0]]


def test_a_message_list_that_is_not_messages():
    with pytest.raises(DataError, match=r"row 1: field 'prompt' message 0 must be \{'role': str, 'content': str\}"):
        table_items([{"prompt": [{"role": "user"}], "answer": "2"}], {"prompt": "prompt", "answer": "answer"}, "t")
