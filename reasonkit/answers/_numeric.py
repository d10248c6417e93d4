r"""Numbers: reading one value from a cleaned answer, units, exact arithmetic, equality.

An answer such as ``$1,234.50``, ``9.8 m/s^2``, ``x = 5``, ``6 \times 7 = 42`` or
``2 + 2`` is read into one exact :class:`~fractions.Fraction` (``_read_number``): its
arithmetic is evaluated exactly (``+ - * / ^`` and parentheses, powers up to
:data:`MAX_POWER_BITS`), an equation's numeric sides must all agree and its other sides
may only be names, and words after the number count only if they read as a unit. Two
values are equal when they are the same fraction, or a decimal is within
:data:`FLOAT_ARTEFACT` of a gold that no decimal can write (:func:`terminates`); a
percent reads both ways. ``_NUMBER_RE`` and ``_value_of`` find numbers in free text.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

from reasonkit.answers._text import MAX_PARSE_CHARS

__all__ = ["MAX_POWER_BITS", "FLOAT_ARTEFACT", "terminates"]

MAX_POWER_BITS = 4096       # 2^4096 is the largest power evaluated exactly
FLOAT_ARTEFACT = Fraction(1, 10**9)  # relative error a decimal may have against 1/3, 1/12...


# --- numbers --------------------------------------------------------------------------

# 1,234,567 | 1 000 | 1234 | 12.5 | 1.5e3 | .5 -- a thousands group never starts with 0
# ("0,111" is no number), every repetition starts with a fixed character.
_NUM = (r"(?:[1-9]\d{0,2}(?:,\d{3})+(?![\d])|[1-9]\d{0,2}(?: \d{3})+(?![\d,.])|\d+)"
        r"(?:\.\d+)?(?:[eE][-+]?\d{1,4})?|\.\d+")
_TOKEN_RE = re.compile(r"\s*(?:(?P<num>" + _NUM + r")|(?P<op>\^|[-+*/()×÷·{}])|(?P<pct>%))")
_OPS = {"×": "*", "·": "*", "÷": "/", "{": "(", "}": ")"}
_Value = tuple[Fraction, bool]  # (value, written with a percent sign)
_INVALID = object()  # an equation whose sides disagree: never a right answer

# Lead-ins a final answer may carry: "The answer is 42", "Answer: 42", "about 42".
_LEAD_IN_RE = re.compile(
    r"(?:(?:the\s+)?(?:final\s+)?answer(?:\s+is)?\s*:?|approximately|approx\.|about|around|roughly"
    r"|exactly|[^\W\d_][\w' ]{0,30}:)\s*(?=[-+.(\d])", re.IGNORECASE)
# A name on one side of "=": x, a_{37}, f(3), (p, q), A:B, |AB|, NO/BO, total cost.
_SUBSCRIPT_RE = re.compile(r"_\{[^{}]{0,12}\}|_\w")
_CALL_RE = re.compile(r"(?<=[^\W\d_])\([^()]{0,20}\)")  # f(3), P(A): an argument
_NAME_CHARS_RE = re.compile(r"[^\W\d_](?:[^\W\d]|[\s(),:|/'.]){0,60}")


def _is_label(side: str) -> bool:
    """Whether one side of an equation only names the answer (no number, no operator)."""
    s = _SUBSCRIPT_RE.sub("", side.strip()).replace("{", "").replace("}", "")
    s = _CALL_RE.sub(lambda m: "()" if m.group(0)[1:-1].strip() else m.group(0), s)  # f(3): a name
    return bool(s) and len(side) <= 60 and bool(_NAME_CHARS_RE.fullmatch(s.strip("|( ")))


# Relations and set notation: the answer is not one number.
_RELATION_RE = re.compile(r"[<>≤≥≠±∓∪∩∈]|\\(?:le|ge|leq|geq|lt|gt|ne|neq|pm|mp|in|cup|cap|infty|\{)"
                          r"(?![A-Za-z])|\bor\b|\band\b", re.IGNORECASE)
_UNIT_WORD = r"[^\W\d_]+\d?(?:\^\{?-?\d\}?|[²³¹⁻]+)?"
_UNIT_RE = re.compile(_UNIT_WORD + r"(?:\s*(?:/|·|\s)\s*" + _UNIT_WORD + r")*")
_PERCENT_WORDS = ("percent", "per cent", "percentage", "pct")
# Words after a number that make it something other than a quantity with a unit.
_NOT_UNITS = {"plus", "minus", "times", "divided", "over", "and", "or", "not", "no", "than", "more",
              "less", "fewer", "squared", "cubed", "root", "sqrt", "power", "pi", "inf", "infinity",
              "log", "ln", "sin", "cos", "tan", "exp", "e", "i", "is", "equals", "mod", "remainder",
              "to", "by", "wrong", "incorrect", "maybe", "perhaps", "possibly", "probably"}
# Single letters that are variables, not units (m, s, g, h, N, L, K, J, W, V stay units).
_VARIABLES = set("abcdefijknopqrtuvwxyzXYZ")


def _fraction(s: str) -> Fraction | None:
    s = s.replace(",", "").replace(" ", "")
    exponent = s.lower().partition("e")[2]
    if exponent and abs(int(exponent)) > 300:
        return None
    return Fraction(s)


class _Unreadable(Exception):
    """The expression is not one exact number (syntax, 1/0, a power too big)."""


def _evaluate(tokens: list[tuple[str, Any]]) -> _Value:
    """Exact value of a token list: + - * / ^ and parentheses over numbers."""
    pos = 0

    def peek() -> tuple[str, Any] | None:
        return tokens[pos] if pos < len(tokens) else None

    def take() -> tuple[str, Any]:
        nonlocal pos
        pos += 1
        return tokens[pos - 1]

    def expr() -> Fraction:
        value = term()
        while (tok := peek()) and tok[0] == "op" and tok[1] in "+-":
            take()
            value = value + term() if tok[1] == "+" else value - term()
        return value

    def term() -> Fraction:
        value = unary()
        while (tok := peek()) and tok[0] == "op" and tok[1] in "*/":
            take()
            right = unary()
            if tok[1] == "*":
                value *= right
            elif right == 0:
                raise _Unreadable("division by zero")
            else:
                value /= right
        return value

    def unary() -> Fraction:
        tok = peek()
        if tok and tok[0] == "op" and tok[1] in "+-":
            take()
            return unary() if tok[1] == "+" else -unary()
        return power()

    def power() -> Fraction:
        base = atom()
        tok = peek()
        if tok and tok[0] == "op" and tok[1] == "^":
            take()
            return _power(base, unary())
        return base

    def atom() -> Fraction:
        tok = take() if peek() else ("end", None)
        if tok[0] == "num":
            return tok[1]
        if tok == ("op", "("):
            value = expr()
            if peek() != ("op", ")"):
                raise _Unreadable("unclosed parenthesis")
            take()
            return value
        raise _Unreadable(f"unexpected {tok}")

    pct = bool(tokens) and tokens[-1][0] == "pct"  # 25% is only ever one number, maybe signed
    if pct:
        tokens = tokens[:-1]
    if any(t[0] == "pct" for t in tokens):
        raise _Unreadable("percent inside an expression")
    if pct and (len(tokens) > 2 or any(t[0] == "op" and t[1] not in "+-" for t in tokens)):
        raise _Unreadable("percent of an expression")
    value = expr()
    if pos != len(tokens):
        raise _Unreadable("trailing tokens")
    return value, pct


def _power(base: Fraction, exponent: Fraction) -> Fraction:
    if exponent.denominator != 1:
        raise _Unreadable("a root is not exact")
    e = exponent.numerator
    bits = max(base.numerator.bit_length(), base.denominator.bit_length())
    if bits * abs(e) > MAX_POWER_BITS:
        raise _Unreadable("power too big")
    if base == 0 and e < 0:
        raise _Unreadable("division by zero")
    return base ** e


def _tokens(s: str) -> tuple[list[tuple[str, Any]], int]:
    """Tokens of the arithmetic at the start of ``s`` and where they end."""
    out: list[tuple[str, Any]] = []
    pos, depth = 0, 0
    while (m := _TOKEN_RE.match(s, pos)) and m.end() > pos:
        if m.group("num") is not None:
            value = _fraction(m.group("num"))
            if value is None:
                raise _Unreadable("exponent too big")
            out.append(("num", value))
        elif m.group("op") is not None:
            op = _OPS.get(m.group("op"), m.group("op"))
            depth += {"(": 1, ")": -1}.get(op, 0)
            if depth > 20:
                raise _Unreadable("nested too deeply")
            out.append(("op", op))
        else:
            out.append(("pct", None))
        pos = m.end()
    return out, pos


def _unit(rest: str) -> tuple[bool, bool]:
    """(is ``rest`` a unit, is it a percent word) for the words after a number."""
    r = rest.strip().rstrip(".").strip()
    if not r:
        return True, False
    if r.lower() in _PERCENT_WORDS:
        return True, True
    if not _UNIT_RE.fullmatch(r):
        return False, False
    for word in re.findall(r"[^\W\d_]+", r):
        if word.lower() in _NOT_UNITS or (len(word) == 1 and word in _VARIABLES):
            return False, False
    return True, False


def _side_value(side: str) -> _Value | None:
    """The value of one side of an equation: arithmetic, then maybe a unit; else None."""
    s = side.strip().rstrip(".").strip()
    lead = _LEAD_IN_RE.match(s)
    if lead:
        s = s[lead.end():]
    try:
        tokens, end = _tokens(s)  # "42 - x": the tokens 42 - do not parse, so no value
        if not any(t[0] == "num" for t in tokens):
            return None
        is_unit, pct_word = _unit(s[end:])
        if not is_unit:
            return None
        value, pct = _evaluate(tokens)
    except (_Unreadable, ValueError, ZeroDivisionError, OverflowError, RecursionError):
        return None
    if pct_word:
        if len(tokens) > 2 or any(t[0] == "op" and t[1] not in "+-" for t in tokens):
            return None
        pct = True
    return value, pct


def _read_number(t: str) -> _Value | None | object:
    """A cleaned answer's one value, None if it is not one number, _INVALID if self-contradictory."""
    if len(t) > MAX_PARSE_CHARS or _RELATION_RE.search(t):
        return None
    sides = t.split("=")
    if len(sides) > 8:
        return None
    values = []
    for side in sides:
        if _is_label(side):
            continue  # a name: x = 5, f(3) = 7
        value = _side_value(side)
        if value is None:
            return None
        values.append(value)
    if not values:
        return None
    last = values[-1]
    if any(not _same_value(v, last, symmetric=True) for v in values[:-1]):
        return _INVALID
    return last


def _candidates(value: _Value) -> tuple[Fraction, ...]:
    """A percent is read both ways: "50%" may mean 50 or 0.5."""
    v, pct = value
    return (v, v / 100) if pct else (v,)


def terminates(x: Fraction) -> bool:
    """Whether a decimal can write ``x`` exactly (its denominator is 2^a 5^b).

    >>> terminates(Fraction(3, 8)), terminates(Fraction(1, 3))
    (True, False)
    """
    d = x.denominator
    for p in (2, 5):
        while d % p == 0:
            d //= p
    return d == 1


def _equal(pred: Fraction, gold: Fraction) -> bool:
    if pred == gold:
        return True
    # a float artefact: 0.0833333333333 for 1/12 (never for a gold a decimal can write)
    return (not terminates(gold) and terminates(pred)
            and abs(pred - gold) <= FLOAT_ARTEFACT * max(1, abs(gold)))


def _same_value(pred: _Value, gold: _Value, symmetric: bool = False) -> bool:
    return any(_equal(p, g) or (symmetric and _equal(g, p))
               for p in _candidates(pred) for g in _candidates(gold))


# --- numbers in free text -------------------------------------------------------------

# For scanning free text: one number with its sign and percent, thousands never from a 0.
_NUMBER_RE = re.compile(
    r"(?<![A-Za-z_.\d])(?P<sign>[-+]?)(?P<num>(?:[1-9]\d{0,2}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?"
    r"(?:[eE][-+]?\d+)?|\.\d+)(?:[ \t]?/[ \t]?(?P<den>\d+(?:\.\d+)?))?(?P<pct>[ \t]?(?:%|[Pp]ercent\b))?")


def _value_of(m: re.Match) -> Fraction | None:
    """A _NUMBER_RE match's value, or None if unreadable (over 64 characters, 1/0)."""
    if len(m.group(0)) > 64:
        return None
    value = _fraction(m.group("num"))
    if value is not None and m.group("den") is not None:
        den = _fraction(m.group("den"))
        value = value / den if den else None
    if value is not None and m.group("sign") == "-":
        value = -value
    return value
