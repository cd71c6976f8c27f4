"""Prompt sources: what the policy is asked, and what a judge needs to score the answer.

An *item* is a plain dict with at least ``prompt`` (str) and ``answer`` (str, the correct
final answer as a number written normally, e.g. ``"46"``). Any other keys are extra columns
that reach reward functions as keyword arguments, exactly as in TRL.

Sources:
- ``arithmetic``: ``a+b=`` problems with difficulty knobs (digits, operators). The tiny model
  writes the result least-significant digit first (``12+34=`` -> ``64``), the order in which a
  left-to-right model can compute carries; the column ``reverse_digits`` tells the judge.
- ``load_items`` / ``load_gsm8k``: GSM8K-style rows ``{"question", "answer": "... #### 42"}`` or
  kit rows ``{"prompt", "answer"}``, validated strictly: a bad row raises :class:`DataError`
  naming the file, line and problem, or with ``on_bad_row="skip"`` is skipped and counted.
"""
from __future__ import annotations

import json
import logging
import math
import random
import re
from dataclasses import dataclass
from pathlib import Path

from grpo_kit.errors import DataError

OPERATORS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}



# ---------------------------------------------------------------- item columns

RESERVED_COLUMNS = ("prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric")
"""Keyword arguments a reward function receives from the kit or from TRL; no dataset column may take these names."""


def check_columns(items: list[dict], where: str = "items", positions: list | None = None) -> list[str]:
    """The extra columns of ``items`` (all but ``prompt``, in first-seen order), checked per item.

    A column missing from some items, or named like a reward-function argument
    (:data:`RESERVED_COLUMNS`), is a :class:`DataError` naming the column and the items
    (``positions`` labels them, e.g. file lines; default: 1-based item numbers).
    """
    keys: dict[str, None] = {}
    for it in items:
        keys.update(dict.fromkeys(k for k in it if k != "prompt"))
    clash = [k for k in keys if k in RESERVED_COLUMNS]
    if clash:
        raise DataError(f"{where}: column {clash[0]!r} has the name of a reward-function argument "
                        f"({', '.join(RESERVED_COLUMNS)}); rename the column")
    label = positions or list(range(1, len(items) + 1))
    for k in keys:
        missing = [label[i] for i, it in enumerate(items) if k not in it]
        if missing:
            shown = ", ".join(map(str, missing[:5])) + (", ..." if len(missing) > 5 else "")
            raise DataError(f"{where}: column {k!r} is missing in {len(missing)} of {len(items)} rows "
                            f"({'line' if positions else 'item'}{'s' if len(missing) > 1 else ''} {shown}); every row needs the same columns "
                            f"(write null for a missing value) so that every row is scored the same way")
    return list(keys)


def columns_of(items: list[dict], repeat: int = 1) -> dict[str, list]:
    """Extra columns of items (everything but ``prompt``), each value repeated ``repeat`` times.

    Built from every item (see :func:`check_columns`), not from the first one only.
    """
    keys = check_columns(items)
    return {k: [it[k] for it in items for _ in range(repeat)] for k in keys}


def write_number(value: int, reverse_digits: bool) -> str:
    """How the model writes a number: sign first, then the digits (reversed if asked)."""
    digits = str(abs(value))
    return ("-" if value < 0 else "") + (digits[::-1] if reverse_digits else digits)


def column_sums(a: int, b: int) -> str:
    """The scratchpad of ``a+b``: each column's digit sum with the carry in, right to left.

    ``47+85`` -> ``"12 13"`` (7+5 = 12; 4+8+1 = 13): each sum's last digit is an answer digit
    and its first digit (if two) the carry into the next column.
    """
    da, db = str(a)[::-1], str(b)[::-1]
    sums, carry = [], 0
    for i in range(max(len(da), len(db))):
        s = int(da[i] if i < len(da) else 0) + int(db[i] if i < len(db) else 0) + carry
        sums.append(str(s))
        carry = s // 10
    return " ".join(sums)


def read_completion(text: str, reverse_digits: bool, scratchpad: bool = False) -> int | None:
    """The number an arithmetic completion states; with a scratchpad, the part after the last ``|``."""
    if scratchpad:
        if "|" not in text:
            return None
        text = text.rsplit("|", 1)[1]
    return read_number(text, reverse_digits)


def read_number(text: str, reverse_digits: bool) -> int | None:
    """Inverse of :func:`write_number`; ``None`` when the text is not a well-formed number."""
    m = re.fullmatch(r"(-?)(\d+)", text.strip())
    if m is None:
        return None
    digits = m.group(2)[::-1] if reverse_digits else m.group(2)
    return int(m.group(1) + digits)


@dataclass(frozen=True)
class ArithmeticTask:
    """Integer arithmetic problems ``a<op>b=``; each operand has 1..``digits`` digits."""

    digits: int = 2
    operators: str = "+"
    reverse_digits: bool = True
    scratchpad: bool = False
    """Write the column sums before the answer (``47+85=`` -> ``12 13|231``): lengths then vary."""

    def __post_init__(self):
        if not 1 <= self.digits <= 6:
            raise DataError(f"ArithmeticTask.digits={self.digits}: use 1..6 digits per operand")
        bad = [op for op in self.operators if op not in OPERATORS]
        if bad or not self.operators:
            raise DataError(f"ArithmeticTask.operators={self.operators!r}: use a subset of '+-*'")
        if self.scratchpad and (self.operators != "+" or not self.reverse_digits):
            raise DataError("ArithmeticTask.scratchpad: column sums are defined for '+' with reversed digits only")

    @property
    def name(self) -> str:
        ops = {"+": "add", "-": "sub", "*": "mul"}
        return "".join(ops[o] for o in self.operators) + str(self.digits) + ("s" if self.scratchpad else "")

    def item(self, a: int, op: str, b: int) -> dict:
        value = OPERATORS[op](a, b)
        completion = write_number(value, self.reverse_digits)  # the supervised target
        item = {"prompt": f"{a}{op}{b}=", "answer": str(value), "reverse_digits": self.reverse_digits}
        if self.scratchpad:
            completion = column_sums(a, b) + "|" + completion
            item["scratchpad"] = True
        item["completion"] = completion
        return item

    def all_problems(self) -> list[tuple[int, str, int]]:
        """Every problem of this difficulty, in a fixed order (small enough for <=3 digits)."""
        hi = 10**self.digits
        return [(a, op, b) for op in self.operators for a in range(hi) for b in range(hi)]

    def splits(self, n_test: int | None = None, n_val: int | None = None, seed: int = 1234) -> dict[str, list[dict]]:
        """Disjoint ``train`` / ``val`` / ``test`` item lists, reproducible from ``seed``.

        Defaults: 500 test and 200 val items, or a fifth and a tenth of the problems when there
        are fewer (``add1`` has 100 problems: 20 test, 10 val, 70 train)."""
        problems = self.all_problems()
        n_test = min(500, len(problems) // 5) if n_test is None else n_test
        n_val = min(200, len(problems) // 10) if n_val is None else n_val
        if n_test + n_val >= len(problems):
            raise DataError(f"{self.name}: only {len(problems)} problems, cannot hold out {n_test}+{n_val}")
        random.Random(seed).shuffle(problems)
        items = [self.item(*p) for p in problems]
        return {"test": items[:n_test], "val": items[n_test:n_test + n_val], "train": items[n_test + n_val:]}


TASKS = {"add2": ArithmeticTask(2, "+"), "add3": ArithmeticTask(3, "+"), "add1": ArithmeticTask(1, "+"),
         "add2s": ArithmeticTask(2, "+", scratchpad=True)}


def task_names() -> list[str]:
    """The tasks that work: every generator (``splits`` sizes its held-out split to the problems
    there are) and every task whose held-out split is shipped as a file."""
    shipped = {p.name[:-len("_test.jsonl")] for p in DATASETS_DIR.glob("*_test.jsonl")}
    return sorted(set(TASKS) | shipped)


def get_task(name: str) -> ArithmeticTask:
    if name not in TASKS or name not in task_names():
        raise DataError(f"unknown task {str(name)[:60]!r}: choose one of {[n for n in task_names() if n in TASKS]}")
    return TASKS[name]


# ---------------------------------------------------------------- jsonl datasets
#
# A row is checked by a function that returns the item or raises _RowProblem(reason). The
# loaders either raise DataError on the first bad row (on_bad_row="raise", the default) or skip
# bad rows, log how many and why (logger "grpo_kit.data.tasks"), and go on (on_bad_row="skip");
# scan_items() returns the items and every (line, reason) for a caller that wants the report.

log = logging.getLogger(__name__)
ON_BAD_ROW = ("raise", "skip")


class _RowProblem(Exception):
    """A row is malformed; the message is the reason (the loader adds file and line)."""


def fail_at(path, lineno, problem):
    raise DataError(f"{path}, line {lineno}: {problem}")


def _read_lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise DataError(f"{path}: is a folder; pass a .jsonl file") from None
    except (OSError, ValueError) as e:  # also UnicodeDecodeError, and a path the file system cannot encode
        raise DataError(f"{str(path)[:200]!r}: cannot read the file ({str(e)[:200]})") from None


def _parse_row(line: str) -> dict:
    try:
        row = json.loads(line)
    except (ValueError, RecursionError) as e:  # JSONDecodeError, over-long integers, deep nesting
        raise _RowProblem(f"not valid JSON ({getattr(e, 'msg', e)}); each line must be one JSON object") from None
    if not isinstance(row, dict):
        raise _RowProblem(f"expected a JSON object, got {type(row).__name__}")
    return row


def read_jsonl(path: str | Path) -> list[tuple[int, dict]]:
    """Rows of a jsonl file as (line number, dict); blank lines are skipped; a bad line raises DataError."""
    path = Path(path)
    rows = []
    for lineno, line in enumerate(_read_lines(path), 1):
        if line.strip():
            try:
                rows.append((lineno, _parse_row(line)))
            except _RowProblem as e:
                fail_at(path, lineno, e)
    if not rows:
        raise DataError(f"{path}: the file has no rows")
    return rows


_NUMBER = re.compile(r"-?\d[\d,]*(\.\d+)?")


def _need_str(row: dict, key: str) -> str:
    if key not in row:
        raise _RowProblem(f"missing field {key!r} (fields present: {sorted(row)})")
    if not isinstance(row[key], str):
        raise _RowProblem(f"field {key!r} must be a string, got {type(row[key]).__name__} {row[key]!r:.40}")
    if not row[key].strip():
        raise _RowProblem(f"field {key!r} is empty")
    try:
        row[key].encode("utf-8")
    except UnicodeEncodeError as e:
        raise _RowProblem(f"field {key!r} holds invalid Unicode ({e.reason}: {row[key][e.start]!r} at character "
                          f"{e.start}); write the text as plain UTF-8") from None
    return row[key]


def split_gsm8k(answer: str) -> tuple[str, str]:
    """A GSM8K answer ``"<worked solution> #### 1,234"`` -> (the solution, ``"1234"``): the number after the last
    ``####``, commas removed. No ``####`` or no number after it is a row problem."""
    if "####" not in answer:
        raise _RowProblem("field 'answer' has no '#### <number>' final answer")
    solution, final = answer.rsplit("####", 1)
    final = final.strip().replace(",", "")
    if not _NUMBER.fullmatch(final):
        raise _RowProblem(f"the final answer after '####' is not a number: {final!r}")
    return solution.strip(), final


def gsm8k_item(row: dict) -> dict:
    """A GSM8K row ``{"question", "answer": "... #### 42"}`` -> item with ``prompt``, ``answer``, ``solution``."""
    question = _need_str(row, "question")
    solution, final = split_gsm8k(_need_str(row, "answer"))
    return {"prompt": question, "answer": final, "solution": solution}


def _need_messages(row: dict, key: str) -> list:
    """A conversation: a non-empty list of ``{"role": str, "content": str}`` messages (TRL's format)."""
    msgs = row[key]
    for i, m in enumerate(msgs):
        if not (isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)):
            raise _RowProblem(f"field {key!r} message {i} must be {{'role': str, 'content': str}}, got {m!r:.60}")
    if not msgs:
        raise _RowProblem(f"field {key!r} is an empty conversation")
    return msgs


def kit_item(row: dict) -> dict:
    """A kit row ``{"prompt", "answer": "42", ...extra columns}`` -> the same dict, checked. The
    prompt is text, or a conversation (a list of ``{"role", "content"}`` messages, TRL's format)."""
    if isinstance(row.get("prompt"), list):
        _need_messages(row, "prompt")
    else:
        _need_str(row, "prompt")
    answer = _need_str(row, "answer").strip()
    if not _NUMBER.fullmatch(answer.replace(",", "")):
        raise _RowProblem(f"field 'answer' is not a number: {answer!r}")
    return dict(row)


def scan_items(path: str | Path, kind: str = "auto") -> tuple[list[dict], list[tuple[int, str]]]:
    """Every good item of a jsonl file and every bad row as (line, reason); never raises for a row.

    ``kind``: 'gsm8k', 'kit', or 'auto' (GSM8K when the first JSON object has a ``question``).
    File-level problems (missing, unreadable, no rows) still raise :class:`DataError`.
    """
    path = Path(path)
    items, bad, make = [], [], {"gsm8k": gsm8k_item, "kit": kit_item}.get(kind)
    if make is None and kind != "auto":
        raise DataError(f"unknown dataset kind {kind!r}: choose 'auto', 'gsm8k' or 'kit'")
    items, _, bad = _scan(path, make)
    return items, bad


def _scan(path: Path, make) -> tuple[list[dict], list[int], list[tuple[int, str]]]:
    """Good items, their line numbers, and bad rows as (line, reason)."""
    items, good, bad = [], [], []
    lines = [(n, line) for n, line in enumerate(_read_lines(path), 1) if line.strip()]
    if not lines:
        raise DataError(f"{path}: the file has no rows")
    for lineno, line in lines:
        try:
            row = _parse_row(line)
            if make is None:
                make = gsm8k_item if "question" in row else kit_item
            items.append(make(row))
            good.append(lineno)
        except _RowProblem as e:
            bad.append((lineno, str(e)))
    return items, good, bad


def _check_on_bad_row(on_bad_row: str) -> None:
    if on_bad_row not in ON_BAD_ROW:
        raise DataError(f"on_bad_row={on_bad_row!r}: choose 'raise' or 'skip'")


def _load(path, kind: str, on_bad_row: str, columns: dict | None = None) -> list[dict]:
    _check_on_bad_row(on_bad_row)
    if kind not in ("auto", "gsm8k", "kit"):
        raise DataError(f"unknown dataset kind {kind!r}: choose 'auto', 'gsm8k' or 'kit'")
    make = {"gsm8k": gsm8k_item, "kit": kit_item}.get(kind)
    if columns is not None:  # dataset_columns: every row read as a table row under that mapping
        make = lambda row: table_item(row, table_columns(row, columns))  # noqa: E731
    items, lines, bad = _scan(Path(path), make)
    if columns is not None:
        _fill_solutions(items)
    return _settle(str(path), items, lines, bad, on_bad_row, "line")


def _settle(where: str, items: list[dict], labels: list[int] | None, bad: list[tuple[int, str]], on_bad_row: str,
            unit: str) -> list[dict]:
    """The items of a scan whose bad rows were ``bad`` ((label, reason), ``unit`` 'line' or 'row'): the first bad
    row raised, or all skipped and counted in a warning; then every item's columns checked (:func:`check_columns`)."""
    if bad and on_bad_row == "raise":
        raise DataError(f"{where}, {unit} {bad[0][0]}: {bad[0][1]}")
    if bad and not items:
        raise DataError(f"{where}: all {len(bad)} rows are malformed ({unit} {bad[0][0]}: {bad[0][1]})")
    if bad:
        first = "; ".join(f"{unit} {n}: {r}" for n, r in bad[:3])
        log.warning("%s: skipped %d malformed row(s) of %d (%s%s)", where, len(bad), len(bad) + len(items),
                    first, "; ..." if len(bad) > 3 else "")
    check_columns(items, where, positions=labels)
    return items


def load_gsm8k(path: str | Path, on_bad_row: str = "raise") -> list[dict]:
    """GSM8K jsonl: ``question`` and ``answer`` ending in ``#### <number>`` -> items.

    Items carry ``prompt`` (the question), ``answer`` (the number after ``####``, commas
    removed) and ``solution`` (the worked solution before ``####``). ``on_bad_row='skip'``
    drops malformed rows and logs how many (see :func:`scan_items` for the full list).
    """
    return _load(path, "gsm8k", on_bad_row)


def load_items(path: str | Path, on_bad_row: str = "raise", columns: dict | None = None) -> list[dict]:
    """A jsonl of items: GSM8K rows (``question``/``answer``) or kit rows (``prompt``/``answer``).

    ``on_bad_row``: 'raise' a DataError naming file, line and reason at the first malformed
    row, or 'skip' malformed rows and log their count and reasons. ``columns`` (``dataset_columns``,
    e.g. ``{"prompt": "q"}``): every row is read by :func:`table_item` under that mapping instead.
    """
    return _load(path, "auto", on_bad_row, columns)


# ---------------------------------------------------------------- tables (parquet, csv, datasets objects)
#
# A row of a table is read by table_item: dataset_columns says which column holds the prompt and which
# the answer; the other columns are kept and reach reward functions, as a jsonl row's extra keys do.

KIT_COLUMNS = ("prompt", "answer")
"""The columns every item has; ``dataset_columns`` maps each to a column of the user's dataset."""


def table_columns(names, mapping: dict | None = None) -> dict[str, str]:
    """The column that holds each of ``prompt`` and ``answer``: ``mapping`` (``dataset_columns``) where it names
    one, else ``prompt`` (GSM8K's ``question`` when there is no ``prompt`` column) and ``answer``."""
    prompt = "question" if "prompt" not in names and "question" in names else "prompt"
    return {"prompt": prompt, "answer": "answer", **(mapping or {})}


def _read_answer(row: dict, column: str) -> tuple[str, str | None]:
    """(the answer, the worked solution or None) of a row's answer column: a number (a numeric column, or text
    holding one) or a GSM8K answer ``"... #### 42"`` (read as ``"42"`` and its solution)."""
    value = row[column]
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return str(value), None  # a numeric column (a csv of numbers is read as one)
    if not isinstance(value, str):
        raise _RowProblem(f"column {column!r} (the answer) must be a number or text holding one, got "
                          f"{type(value).__name__} {value!r:.40}")
    answer = _need_str(row, column).strip()
    if "####" in answer:
        return split_gsm8k(answer)[::-1]
    if not _NUMBER.fullmatch(answer.replace(",", "")):
        raise _RowProblem(f"column {column!r} (the answer) is not a number and has no '#### <number>' line: "
                          f"{answer!r:.60}")
    return answer, None


def table_item(row: dict, columns: dict[str, str]) -> dict:
    """A table row -> an item: the ``columns`` (see :func:`table_columns`) become ``prompt`` and ``answer`` and
    every other column is kept. The prompt is text or a conversation (a list of ``{"role", "content"}``
    messages); a GSM8K answer also gives ``solution`` (the worked solution), unless the row has that column."""
    for kit, col in columns.items():
        if col not in row:
            raise _RowProblem(f"missing column {col!r} (the {kit}; columns present: {sorted(row)})")
        if col != kit and kit in row:
            raise _RowProblem(f"the row has a column {kit!r} and dataset_columns takes the {kit} from {col!r}; "
                              f"rename or drop one of them")
    prompt = row[columns["prompt"]]
    if isinstance(prompt, list):
        _need_messages(row, columns["prompt"])
    elif isinstance(prompt, str):
        _need_str(row, columns["prompt"])
    else:
        raise _RowProblem(f"column {columns['prompt']!r} (the prompt) must be text or a list of "
                          f"{{'role': str, 'content': str}} messages, got {type(prompt).__name__} {prompt!r:.40}")
    answer, solution = _read_answer(row, columns["answer"])
    item = {k: v for k, v in row.items() if k not in columns.values()}
    item.update(prompt=prompt, answer=answer)
    if solution is not None and "solution" not in item:
        item["solution"] = solution
    return item


def table_items(rows: list[dict], columns: dict[str, str], where: str, on_bad_row: str = "raise") -> list[dict]:
    """The items of a table's ``rows`` read by :func:`table_item`; a bad row is raised or skipped and counted as
    in :func:`load_items`, named ``row N`` (1-based)."""
    _check_on_bad_row(on_bad_row)
    items, bad = [], []
    for n, row in enumerate(rows, 1):
        try:
            items.append(table_item(row, columns))
        except _RowProblem as e:
            bad.append((n, str(e)))
    _fill_solutions(items)
    return _settle(where, items, None, bad, on_bad_row, "row")


def _fill_solutions(items: list[dict]) -> None:
    """Where some answers were GSM8K answers (they gave a ``solution``) and others plain numbers, the others get
    ``solution`` None, so that every item has the same columns."""
    if any("solution" in it for it in items):
        for it in items:
            it.setdefault("solution", None)


def save_items(items: list[dict], path: str | Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for item in items:
            f.write(json.dumps(item) + "\n")


DATASETS_DIR = Path(__file__).resolve().parents[2] / "datasets"


def heldout_split(task: str = "add2") -> list[dict]:
    """The held-out test split: ``datasets/<task>_test.jsonl`` when shipped, else generated.

    The shipped file is written by ``grpo-kit make-base`` from the same generator; a test checks
    that the two agree, so the file is a convenience for readers, not a second source of truth.
    """
    shipped = DATASETS_DIR / f"{task}_test.jsonl"
    if shipped.is_file():
        return load_items(shipped)
    return get_task(task).splits()["test"]
