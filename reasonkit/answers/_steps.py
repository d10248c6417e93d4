r"""Whether a reasoning trace supports its answer: its conclusion names it, its sums hold.

An answer can be right by luck (one of two names guessed) or right despite its
reasoning (``13 - 2 = 7``, then 11 anyway). :func:`supports` asks what a reader would
check without knowing the gold:

- **the conclusion agrees**: what the last statement concludes (after its last ``=``,
  ``:``, ``is`` or ``prints``) names the answer, token for token (``So the shortest is
  Pam.``; ``Reversed: o l a f.`` names ``olaf``);
- **every checkable step holds**: each ``=`` between two arithmetic expressions
  (``2 * 6 = 12``, ``x = 4 % 2 = 0``, ``... = 130 m``) and each ``<`` / ``>`` between two
  numbers (``12 < 16 < 28``) is true, in exact arithmetic. Steps with words in them
  (``speed * time``, ``Mia > Ned``) are not checked.

>>> supports("2 * 6 = 12. 14 + 12 = 26.", "26")
True
>>> supports("2 * 6 = 12. 14 + 12 = 27.", "27")  # a step that does not hold
False
>>> supports("2 * 6 = 12. So it is 26.", "28")  # the conclusion names another answer
False
>>> supports("The letters are f a l o. Reversed: o l a f.", "olaf")
True

Like the rest of :mod:`reasonkit.answers`, it takes any input and never raises; an
expression too large to check safely (over :data:`MAX_STEP_CHARS` characters, numbers
over :data:`MAX_DIGITS` digits, powers) counts as a step that does not hold.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

from reasonkit.answers._text import normalize_text
from reasonkit.template import as_text

__all__ = ["supports", "conclusion_agrees", "steps_hold", "MAX_STEP_CHARS", "MAX_DIGITS"]

MAX_STEP_CHARS = 200  # one side of a step; longer is not checked as arithmetic
MAX_DIGITS = 12  # per number: products of such numbers stay small and exact
MAX_REASONING_CHARS = 20_000  # longer reasoning is read no further than this

# A sentence ends at a full stop before whitespace or the end (not "2.5"), or a line break.
_SENTENCE_RE = re.compile(r"\.(?=\s|$)|\n|;")
_ARITH_RE = re.compile(r"[\d\s.+\-*/%()×÷]*\d[\d\s.+\-*/%()×÷]*")
_NUMBER_UNIT_RE = re.compile(r"\s*(-?\d+(?:\.\d+)?)\s+[^\W\d_]")  # "130 m", "12 eggs"
_TOKEN_RE = re.compile(r"\d+(?:\.\d+)?|//|[-+*/%()]")
_COMPARE_RE = re.compile(r"(<=|>=|<|>)")
_CONCLUSION_RE = re.compile(r"=|:|\bis\b|\bprints\b", re.IGNORECASE)


def supports(reasoning: Any, answer: Any) -> bool:
    """Both: the last statement names ``answer`` and every checkable step holds."""
    text = as_text(reasoning)[:MAX_REASONING_CHARS]
    return conclusion_agrees(text, answer) and steps_hold(text)


def _sentences(text: str) -> list[str]:
    return [s for s in (p.strip() for p in _SENTENCE_RE.split(text)) if s]


def conclusion_agrees(reasoning: Any, answer: Any) -> bool:
    """The last statement's conclusion, what follows its last ``=``, ``:``, ``is`` or
    ``prints``, names the answer (its tokens, in order and adjacent, any spacing). A last
    statement with no such marker (``s * 3 writes box 3 times``) concludes nothing to
    disagree with.

    >>> conclusion_agrees("Mia > Ned > Tom. So the shortest is Tom.", "Tom")
    True
    >>> conclusion_agrees("17 + 12 = 29.", "29"), conclusion_agrees("17 + 12 = 129.", "29")
    (True, False)
    >>> conclusion_agrees("The letters are f a l o. Reversed: o l a f.", "olaf")
    True
    >>> conclusion_agrees("hen 2, owl 3. Most often: owl.", "hen")
    False
    >>> conclusion_agrees("", "5"), conclusion_agrees("It is 5.", ""), conclusion_agrees("So it is.", "5")
    (False, False, False)
    """
    sentences = _sentences(as_text(reasoning)[:MAX_REASONING_CHARS])
    target = "".join(normalize_text(answer).split())
    if not sentences or not target:
        return False
    markers = list(_CONCLUSION_RE.finditer(sentences[-1]))
    if not markers:
        return True
    tokens = normalize_text(sentences[-1][markers[-1].end():]).split()
    for start in range(len(tokens)):
        joined = ""
        for token in tokens[start:]:
            joined += token
            if joined == target or _same_number(joined, target):
                return True
            if len(joined) >= len(target) + 8:  # "5.0" for "5" is as far as equal values go
                break
    return False


def _same_number(a: str, b: str) -> bool:
    try:
        return len(a) <= 40 and len(b) <= 40 and Fraction(a) == Fraction(b)
    except (ValueError, ZeroDivisionError):
        return False


def steps_hold(reasoning: Any) -> bool:
    """Every ``=`` between arithmetic and every ``<``/``>`` between numbers is true.

    >>> steps_hold("y = 7. y = 7 + 4 = 11. It prints 11.")
    True
    >>> steps_hold("48 / 3 = 16. 12 < 16 < 28. 2.5 * 4 = 10 apples.")
    True
    >>> steps_hold("13 - 2 = 7."), steps_hold("9 > 12."), steps_hold("x = 4 % 2 = 1.")
    (False, False, False)
    >>> steps_hold("distance = speed * time. Mia > Ned.")  # nothing to check
    True
    """
    for sentence in _sentences(as_text(reasoning)[:MAX_REASONING_CHARS]):
        sides = sentence.split("=")
        for left, right in zip(sides, sides[1:], strict=False):
            a, b = _expression(left), _expression(right, unit_ok=True)
            if a is not None and b is not None and (_BAD in (a, b) or a != b):
                return False
        parts = _COMPARE_RE.split(sentence)
        for i in range(1, len(parts) - 1, 2):
            a, b = _expression(parts[i - 1]), _expression(parts[i + 1], unit_ok=True)
            if a is None or b is None:
                continue
            if _BAD in (a, b):
                return False
            holds = {"<": a < b, ">": a > b, "<=": a <= b, ">=": a >= b}[parts[i]]
            if not holds:
                return False
    return True


def _expression(side: str, unit_ok: bool = False) -> Fraction | str | None:
    """The exact value of a side that is all arithmetic (or, on the right, a number and a
    unit); None for a side with words, which is not checked; :data:`_BAD` for arithmetic
    that has no value (``5 / 0``, ``3 +``, too large)."""
    side = side.strip()
    if not side or len(side) > MAX_STEP_CHARS:
        return None
    if _ARITH_RE.fullmatch(side):
        value = _evaluate(side.replace("×", "*").replace("÷", "/"))
        return _BAD if value is None else value
    if unit_ok and (m := _NUMBER_UNIT_RE.match(side)):
        return Fraction(m.group(1))
    return None


_BAD = "not computable"  # an arithmetic side with no value: the step does not hold


def _evaluate(expr: str) -> Fraction | None:
    """``expr`` in exact arithmetic (+ - * / // %, parentheses, unary minus), Python's
    precedence; None when it is not such an expression or divides by zero."""
    tokens = _TOKEN_RE.findall(expr)
    if "".join(tokens) != "".join(expr.split()):
        return None  # something the tokens skip: "2 ** 3", "3 . 4"
    if any(t[0].isdigit() and len(t.replace(".", "")) > MAX_DIGITS for t in tokens):
        return None
    pos = 0

    def peek() -> str | None:
        return tokens[pos] if pos < len(tokens) else None

    def take() -> str:
        nonlocal pos
        pos += 1
        return tokens[pos - 1]

    def atom() -> Fraction:
        t = take() if peek() is not None else ""
        if t == "-":
            return -atom()
        if t == "(":
            v = sum_()
            if take() != ")":
                raise ValueError
            return v
        if t and t[0].isdigit():
            return Fraction(t)
        raise ValueError

    def product() -> Fraction:
        v = atom()
        while peek() in ("*", "/", "//", "%"):
            op, rhs = take(), atom()
            v = (v * rhs if op == "*" else v / rhs if op == "/"
                 else v // rhs if op == "//" else v % rhs)
        return v

    def sum_() -> Fraction:
        v = product()
        while peek() in ("+", "-"):
            op, rhs = take(), product()
            v = v + rhs if op == "+" else v - rhs
        return v

    try:
        value = sum_()
        return value if pos == len(tokens) else None
    except (ValueError, IndexError, ZeroDivisionError, RecursionError):
        return None
