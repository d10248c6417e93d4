r"""Closed forms: a cheap, exact proof that two answers' values differ, before any sympy.

A closed-form answer (numbers, ``+ - * \cdot \times``, juxtaposition, ``^``,
``\frac``, ``\sqrt``, ``\pi``, parentheses) is enclosed in an interval with exact
rational ends by ``_closed_form``; ``_closed_apart`` says two answers differ when their
intervals lie further apart than :data:`CLOSED_APART`, a verdict math-verify would give
too, without its cost. It only ever rejects: anything it is not sure to read as
latex2sympy does is left to sympy, and equal answers always are. It needs neither sympy
nor its import.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from fractions import Fraction

__all__ = ["CLOSED_APART"]


# A closed-form answer (numbers, + - * \cdot \times, juxtaposition, ^, \frac, \sqrt, \pi,
# parentheses) is enclosed in an interval with exact rational ends, read the way
# latex2sympy reads it (its mixed-number rule included: 2\frac{1}{2} and 2(3) add). When
# the intervals of the two answers lie further apart than CLOSED_APART, they differ, and
# math-verify would say so too: it credits a numeric difference only below ~1e-9 (its
# float rounding, evalf's chop), far under that gap. So no sympy parse is needed to
# reject them. Anything else, or any doubt, goes to sympy; equal answers always do.
# The same reader also reads the answer as written math, where juxtaposition multiplies
# (2(3) is 6, \frac{4}{2}\frac{1}{2} is 1) except in a written mixed number
# (2\frac{1}{2}): an answer whose written value differs from the gold's is wrong even
# where latex2sympy's misreading (2(3) as 5) would have matched it.
CLOSED_APART = Fraction(1, 10**6)  # |a - b| > CLOSED_APART * max(1, |a|, |b|): different
_IV_BITS = 256           # significant bits kept of an irrational end
_IV_MAX_BITS = 20_000    # an end larger than this: not read (sympy decides)
_PI = (Fraction(31415926535897932384626433832795028841971693993751, 10**49),
       Fraction(31415926535897932384626433832795028841971693993752, 10**49))
_IV_TOKEN_RE = re.compile(r"\s*(?:(?P<num>\d+(?:\.\d+)?)|(?P<cmd>\\(?:[dt]?frac|sqrt|pi|cdot|times))"
                          r"(?![A-Za-z])|(?P<op>[-+*^(){}\[\]]))")
# latex2sympy's normaliser rewrites "\frac{a}b"-like text ("}" then a digit) and "^(...)":
# whatever it makes of them, this reader does not guess.
_IV_DOUBT_RE = re.compile(r"\}\s*\d|\^\s*\(")


class _Doubt(Exception):
    """Not a closed form this reader is sure to read as latex2sympy does."""


@dataclasses.dataclass(frozen=True)
class _Iv:
    """A value in [lo, hi]; ``kind`` is the sympy object latex2sympy makes of it ("int" an
    Integer, "rat" another Rational, None anything else); ``literal`` marks a written
    integer ("int") or \\frac of two written integers ("frac")."""

    lo: Fraction
    hi: Fraction
    kind: str | None = None
    literal: str | None = None

    def exact(self) -> Fraction | None:
        return self.lo if self.lo == self.hi else None


def _iv_exact(x: Fraction, literal: str | None = None) -> _Iv:
    return _Iv(x, x, "int" if x.denominator == 1 else "rat", literal)


def _iv_round(lo: Fraction, hi: Fraction) -> _Iv:
    """[lo, hi] widened to _IV_BITS significant bits once its ends grow long."""
    ends = []
    for x, up in ((lo, False), (hi, True)):
        if x.numerator.bit_length() > _IV_MAX_BITS or x.denominator.bit_length() > _IV_MAX_BITS:
            raise _Doubt("too large")
        if x.denominator.bit_length() > 2 * _IV_BITS:
            scale = Fraction(2) ** (_IV_BITS - x.numerator.bit_length() + x.denominator.bit_length())
            n = x * scale
            x = Fraction(-(-n.numerator // n.denominator) if up else n.numerator // n.denominator) / scale
        ends.append(x)
    return _Iv(ends[0], ends[1])


def _iv_mul(a: _Iv, b: _Iv) -> _Iv:
    products = (a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi)
    return _iv_round(min(products), max(products))


def _iv_inverse(a: _Iv) -> _Iv:
    if a.lo <= 0 <= a.hi:
        raise _Doubt("division by an interval holding 0")
    return _iv_round(1 / a.hi, 1 / a.lo)


def _iroot(m: int, n: int) -> int:
    """floor(m ** (1/n)) for an integer m >= 0."""
    if m < 2:
        return m
    x = 1 << -(-m.bit_length() // n)  # >= the root: Newton's steps decrease to it
    while True:
        y = ((n - 1) * x + m // x ** (n - 1)) // n
        if y >= x:
            return x
        x = y


def _iv_root(a: _Iv, n: int) -> _Iv:
    """The real n-th root of a >= 0 (exact for perfect powers)."""
    if a.lo < 0:
        raise _Doubt("root of a negative number: complex in sympy")
    x = a.exact()
    if x is not None:
        num, den = _iroot(x.numerator, n), _iroot(x.denominator, n)
        if num ** n == x.numerator and den ** n == x.denominator:
            return _Iv(Fraction(num, den), Fraction(num, den))
    ends = []
    for x, up in ((a.lo, False), (a.hi, True)):
        bits = max(0, _IV_BITS - (x.numerator.bit_length() - x.denominator.bit_length()) // n)
        scaled = x * 2 ** (n * bits)
        m = -(-scaled.numerator // scaled.denominator) if up else scaled.numerator // scaled.denominator
        ends.append(Fraction(_iroot(m, n) + up, 2 ** bits))
    return _iv_round(ends[0], ends[1])


def _iv_power(base: _Iv, exponent: _Iv) -> _Iv:
    """base ** exponent for an exact rational exponent (sympy's real principal value)."""
    y = exponent.exact()
    if y is None or y.denominator > 12 or abs(y.numerator) > 10_000:  # a root as \\sqrt[n]'s
        raise _Doubt("exponent")
    if y.denominator > 1:
        if base.lo == base.hi == 0 and y > 0:
            return _Iv(Fraction(0), Fraction(0))
        base = _iv_root(base, y.denominator)  # refuses a negative base
    e = abs(y.numerator)
    bits = max(x.numerator.bit_length() + x.denominator.bit_length() for x in (base.lo, base.hi))
    if bits * e > _IV_MAX_BITS:
        raise _Doubt("power too large")
    lo, hi = base.lo ** e, base.hi ** e
    if base.lo < 0 < base.hi and e % 2 == 0:
        lo, hi = Fraction(0), max(lo, hi)
    elif base.hi <= 0 and e % 2 == 0:
        lo, hi = hi, lo
    out = _iv_round(lo, hi)
    return _iv_inverse(out) if y.numerator < 0 else out


_STARTS_ATOM = {"num", "\\pi", "\\frac", "\\dfrac", "\\tfrac", "\\sqrt", "("}


def _closed_read(latex: str, mirror: bool) -> _Iv:
    r"""The interval of a closed-form answer, or :class:`_Doubt`.

    ``mirror``: juxtaposed numbers follow latex2sympy's mixed-number rule (an Integer
    before a positive Rational adds: ``2(3)`` is 5, as sympy reads it); else only the
    written mixed number ``2\frac{1}{2}`` adds and other juxtapositions multiply.
    """
    s = latex.replace("\\left(", "(").replace("\\right)", ")")
    if _IV_DOUBT_RE.search(s):
        raise _Doubt("rewritten by latex2sympy's normaliser")
    tokens: list[tuple[str, str]] = []
    pos = 0
    while pos < len(s):
        m = _IV_TOKEN_RE.match(s, pos)
        if m is None:
            if s[pos:].strip():
                raise _Doubt(f"unread text at {pos}")
            break
        kind = m.lastgroup or ""
        tokens.append(("num", m.group(kind)) if kind == "num" else (m.group(kind), m.group(kind)))
        pos = m.end()
    at = 0

    def peek() -> str:
        return tokens[at][0] if at < len(tokens) else ""

    def take(expected: str | None = None) -> tuple[str, str]:
        nonlocal at
        if at >= len(tokens) or (expected is not None and tokens[at][0] != expected):
            raise _Doubt(f"expected {expected}")
        at += 1
        return tokens[at - 1]

    def expr() -> _Iv:  # a + b - c, left to right
        value = mp()
        while peek() in ("+", "-"):
            op = take()[0]
            right = mp()
            if op == "-":
                right = _Iv(-right.hi, -right.lo)
            value = _iv_round(value.lo + right.lo, value.hi + right.hi)
        return value

    def mp() -> _Iv:  # a * b \cdot c \times d
        value = unary()
        while peek() in ("*", "\\cdot", "\\times"):
            take()
            value = _iv_mul(value, unary())
        return value

    def unary() -> _Iv:  # -x: a sympy Number stays one, anything else becomes -1 * x
        if peek() in ("+", "-"):
            op = take()[0]
            value = unary()
            if op == "-":
                value = _Iv(-value.hi, -value.lo, value.kind)
            return _Iv(value.lo, value.hi, value.kind)
        items = [postfix()]
        while peek() in _STARTS_ATOM:
            items.append(postfix())
        value = items[-1]
        for k in range(len(items) - 2, -1, -1):  # latex2sympy folds a product from the right
            left = items[k]
            mixed = left.kind == "int" and value.kind in ("int", "rat") and value.lo > 0
            if mixed and (mirror or (left.literal == "int" and value.literal == "frac")):
                whole = left.lo + value.lo if left.lo >= 0 else left.lo - value.lo
                value = _iv_exact(whole)
            else:
                value = _iv_mul(left, value)
        return value

    def postfix() -> _Iv:
        value = atom()
        if peek() == "^":  # one power: 2^3^2 is (2^3)^2 to latex2sympy, so not read
            take()
            if peek() == "{":
                take()
                exponent = expr()
                take("}")
            elif peek() == "num" and len(tokens[at][1]) == 1:
                exponent = _iv_exact(Fraction(take()[1]))
            else:
                raise _Doubt("exponent")
            value = _iv_power(value, exponent)
            value = _Iv(value.lo, value.hi)  # a Pow, not a Number
        return value

    def braced() -> _Iv:
        take("{")
        value = expr()
        take("}")
        return value

    def atom() -> _Iv:
        token, text = take()
        if token == "num":  # a decimal is a sympy Float: no Integer, no Rational
            value = Fraction(text)
            return _iv_exact(value, "int") if "." not in text else _Iv(value, value)
        if token == "\\pi":
            return _Iv(*_PI)
        if token == "(":
            value = expr()
            take(")")
            return _Iv(value.lo, value.hi, value.kind)
        if token in ("\\frac", "\\dfrac", "\\tfrac"):
            top, bottom = braced(), braced()
            value = _iv_mul(top, _iv_inverse(bottom))
            if top.kind == bottom.kind == "int":  # sympy.Rational(top, bottom)
                literal = "frac" if top.literal == bottom.literal == "int" else None
                return _iv_exact(top.lo / bottom.lo, literal)
            return value
        if token == "\\sqrt":
            n = 2
            if peek() == "[":
                take()
                index = take("num")[1]
                take("]")
                if not index.isdigit() or not 2 <= int(index) <= 12:  # Newton's steps: n of them
                    raise _Doubt("root index")
                n = int(index)
            value = _iv_root(braced(), n)
            return _Iv(value.lo, value.hi)
        raise _Doubt(f"unexpected {token}")

    value = expr()
    if at != len(tokens):
        raise _Doubt("trailing tokens")
    return value


@functools.lru_cache(maxsize=16384)
def _closed_form(item: str, mirror: bool) -> _Iv | None:
    """A prepared answer (``"L:<latex>"``, ``"Q:<fraction>"``) as an interval, or None."""
    kind, _, body = item.partition(":")
    if kind == "Q":
        return _iv_exact(Fraction(body))
    try:
        return _closed_read(body, mirror)
    except (_Doubt, ValueError, ZeroDivisionError, RecursionError):
        return None


def _closed_apart(gold: str, pred: str) -> bool:
    """Whether two prepared answers are closed forms with clearly different values, as
    latex2sympy reads them or as written."""
    for mirror in (True, False):
        a, b = _closed_form(gold, mirror), _closed_form(pred, mirror)
        if a is not None and b is not None:
            gap = max(a.lo - b.hi, b.lo - a.hi)
            if gap > CLOSED_APART * max(1, abs(a.lo), abs(a.hi), abs(b.lo), abs(b.hi)):
                return True
    return False
