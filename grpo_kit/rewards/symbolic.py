r"""A rigorous math judge: ``math_verify_answer``, backed by Hugging Face's ``math-verify``.

``math-verify`` (the library behind TRL's ``accuracy_reward`` and open-r1's accuracy reward)
parses the answer and the reference into sympy objects and compares them symbolically: it
knows that ``2\sqrt{2}`` is ``\sqrt{8}``, that ``\{1, 2\}`` is ``\{2, 1\}``, that ``(0, 1)`` is not
``(0, 1]``. The kit's :func:`grpo_kit.rewards.judges.math_answer` reads one *number* with readable
regular expressions and compares it within a tolerance. Neither is a superset of the other.
Measured on the kit's answer cases (``tests/rewards/test_answers.py``: ``CASES`` and ``LIMITS`` with a
reference) and a few symbolic ones, in ``tests/rewards/test_symbolic.py`` (1 = judged right):

| completion | reference | kit | math-verify | why |
|---|---|---|---|---|
| ``I think 7. #### 8 extra 9`` | 8 | 1 | 0 | math-verify has no ``####`` anchor: it reads 9 |
| ``first \boxed{1} then \boxed{2}`` | 2 | 1 | 0 | it reads both boxes as the set {1, 2} |
| ``\fbox{9}``, ``(-8)``, ``+4`` | 9, -8, 4 | 1 | 0 | not read at all |
| ``−7``, ``x = −3.5`` (U+2212 minus) | -7, -3.5 | 1 | 0 | the unicode minus is not read |
| ``5-3`` | 3 | 1 | 0 | it reads the expression 5 - 3 = 2 |
| ``answer = 2.5e3``, ``1.5e-3``, ``6.02E23`` | 2500, 0.0015, 6.02e+23 | 1 | 0 | E-notation is cut at the ``e`` |
| ``-\frac34`` | -0.75 | 1 | 0 | a ``\frac`` without braces is not read |
| ``1,23`` | 1.23 | 0 | 1 | it reads a decimal comma |
| ``the total is 1 000`` | 1000 | 0 | 1 | it reads a space as a thousands separator |
| ``\boxed{\sqrt{2}}`` | 2 | 1 | 0 | the kit reads ``\sqrt{2}`` as the number 2 |
| ``\boxed{2\sqrt{2}}`` | ``\sqrt{8}`` | 0 | 1 | symbolic equality |
| ``\boxed{\{1, 2\}}`` | ``\{2, 1\}`` | 0 | 1 | sets |
| ``\boxed{(0, 1)}`` | ``(0, 1]`` | 1 | 0 | intervals: the kit reads only the 1 |
| ``\boxed{x^2+2x+1}`` | ``(x+1)^2`` | 0 | 1 | expressions |
| ``\boxed{\pi}`` | ``\pi`` | error | 1 | the kit needs a number in the reference |

On every other case the two agree (the test counts them). So: ``math_answer`` for the kit's
tasks and GSM8K-style numbers (``####``, unicode minus, E-notation), ``math_verify_answer`` for
symbolic answers (MATH-style ``\boxed{}`` with radicals, sets, intervals, expressions).

The reference answer is wrapped in ``$...$`` unless it already has ``$`` or ``\boxed`` (math-verify
reads LaTeX only between delimiters). A reference it cannot parse is a :class:`RewardError`
naming the sample, as in ``math_answer``. Rows of the kit's arithmetic tasks (a true
``reverse_digits`` column) are refused: those completions write digits in reverse.
``math-verify`` times out slow comparisons with ``signal.alarm``, which only works in the main
thread; elsewhere (a worker thread under ``reward_timeout_s``, which is set by default, and
``grpo-kit serve-judge``) it runs without its own time limit, as TRL's ``accuracy_reward`` does;
``reward_timeout_s`` then bounds the whole batch. Reads text only; nothing is executed.
"""
from __future__ import annotations

import logging
import threading

from grpo_kit.errors import RewardError

PIN = "math-verify==0.9.0"


def _math_verify():
    """The library's ``parse`` and ``verify``; RewardError with the install line when it is missing."""
    try:
        from math_verify import parse, verify
    except ImportError:
        raise RewardError(f"math_verify_answer needs the math-verify package: pip install {PIN} "
                          f"(see requirements.txt), or use math_answer") from None
    return parse, verify


def math_verify_answer(prompts: list[str], completions: list[str], answer: list[str],
                       reverse_digits: list[bool] | None = None, **_) -> list[float]:
    """1.0 when math-verify finds the completion's answer equal to the reference ``answer``, else 0.0."""
    parse, verify = _math_verify()
    if reverse_digits is not None and any(reverse_digits):
        i = next(i for i, r in enumerate(reverse_digits) if r)
        raise RewardError(f"sample {i}: math_verify_answer reads answers written the usual way, and this row's "
                          f"task writes digits in reverse (reverse_digits); use math_answer or exact_answer")
    main = threading.current_thread() is threading.main_thread()
    limit = 5 if main else None
    if not main:  # "timeout is disabled" is meant: see the module docstring
        for name in ("math_verify.parser", "math_verify.grader"):
            logging.getLogger(name).setLevel(logging.ERROR)
    out = []
    for i, (c, a) in enumerate(zip(completions, answer)):
        ref = str(a)
        gold = parse(ref if "$" in ref or "\\boxed" in ref else f"${ref}$", parsing_timeout=limit)
        if all(isinstance(g, str) for g in gold):  # [] or only the raw text back: nothing parsed
            raise RewardError(f"sample {i}: math-verify cannot parse the reference answer {ref!r}; fix the "
                              f"'answer' column")
        out.append(float(verify(gold, parse(c, parsing_timeout=limit), timeout_seconds=limit)))
    return out
