r"""The one answer checker: read an answer, normalise it, compare it with the gold.

Data filters, DPO's wrong answers, the GRPO rewards and evaluation all ask this module
whether two answers are the same, so they cannot disagree. It is a leaf: it imports no
other reasonkit module.

**Equality means the same value.** In the numeric domains (:data:`NUMERIC_DOMAINS`) an
answer is read as one of

- a *number*: ``42``, ``$1,234.50``, ``-\dfrac{3}{4}``, ``25\%``, ``9.8 m/s^2``,
  ``\boxed{125\textnormal{ miles}}``, ``x = 5``, ``6 \times 7 = 42``, ``2 + 2`` (4). An
  expression counts by what it evaluates to, exactly (fractions, not floats); an
  equation's numeric sides must all agree (``1 + 1 = 42`` is no number at all and never
  right) and its other sides may only be names (``x``, ``f(3)``, ``total cost``). Words
  after the number are a unit only if they read as one: ``5 x``, ``5 - x``, ``42 or more``
  are not ``5`` or ``42``.
- a *math* answer (a radical, an expression with variables, a tuple, an interval, a
  set, a relation): compared through math-verify, after this module's own unwrapping
  (``\mathrm{e}`` is e, ``\text{ cm}`` a unit, ``6 \text{ and } 8`` a list), whole or
  not at all: an answer sympy only partly understands is not accepted. Named lists
  (``x = 1, y = 2``) compare name by name, or in order when the prediction has no names.
- *text* (``\text{Evelyn}``, ``odd``, ``(C)``): compared as :func:`normalize_text`.

An answer written as a sentence is read for its boxes (``\boxed{1} and \boxed{2}`` is one
list) or else its math, when all of it says one thing (``We find that $x < 3$.``; not
``I think $41$ but $42$``). :func:`final_answer` is the
lenient reading of free text without tags (last box, "final answer is", last math, last
number).

sympy only sees answers of at most :data:`MAX_SYMBOLIC_CHARS` characters without huge
numbers or nested powers, and each parse (cached: a gold parses once) and each
comparison gets :data:`SYMBOLIC_SECONDS` of CPU time, enforced by a watchdog thread in
whatever thread the checker runs (Tunix computes rewards in a worker thread). The first
symbolic answer of a process loads and warms up sympy (a few seconds, once).
math-verify's logging (it logs failing answers in full) is silenced. Two closed forms
(numbers, ``\frac``, ``\sqrt``, ``\pi``, powers) whose values clearly differ are rejected
before sympy, by exact interval arithmetic, and two parsed expressions that differ at a
sample point skip math-verify's ``simplify``: both only ever reject, and equal answers are
always confirmed by math-verify. :func:`symbolic_budget` bounds the sympy work of a block
(GRPO's rewards set one per call; data and evaluation never do).

The other domains compare :func:`normalize_text` (case, punctuation and list separators
do not matter) and two bare numbers by value.

Decisions, with what GSM8K and MATH imply:

- **Commas.** Both datasets are English: a comma groups thousands (``1,234``, MATH's
  ``10{,}000`` and ``11,\! 111``) and is never a decimal point. A comma anywhere else
  (``0,111``, ``3,5``, ``-2,1``) separates items, so such an answer is a list, not one
  number: ``0,111`` is neither 111 nor 0.111.
- **Rounding.** GSM8K's answers are integers and MATH's are exact (fractions, radicals),
  so a rounded answer is wrong: ``0.333`` is not ``1/3``. Only a float artefact passes: a
  decimal within a relative 1e-9 of a gold that no decimal can write (``1/12`` as
  ``0.0833333333333``). GRPO's ``answer_close`` pays partial credit for near misses
  instead (:func:`closeness`).
- **Percent.** ``25%`` is read both ways, 25 and 0.25, because GSM8K writes "what
  percent" answers without the sign; a number without the sign is one number only.

>>> check_answer("math", "2 + 2", "4"), check_answer("math", "2 + 2", "2")
(True, False)
>>> check_answer("math", "1 + 1 = 42", "42"), check_answer("math", "x = 5", "5")
(False, True)
>>> check_answer("math", "$\\boxed{125\\textnormal{ miles}}$", "125")
True
>>> check_answer("math", "0,111", "111"), check_answer("math", "11,\\! 111", "11111")
(False, True)
>>> canonical("$1,000", "math") == canonical("1000.0", "math")
True

Every public function here takes any input (None, NaN, bytes, 1 MB strings, lone
surrogates), never raises, and returns within the time limits: text longer than
:data:`MAX_PARSE_CHARS` is never read as a number, and parsing is linear in the length
of the text (a 100 KB answer takes milliseconds).
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import functools
import logging
import math
import numbers
import re
import threading
import time
import unicodedata
from fractions import Fraction
from typing import Any, Callable, Hashable, Iterator, Sequence

__all__ = [
    "NUMERIC_DOMAINS", "MAX_PARSE_CHARS", "MAX_SYMBOLIC_CHARS", "SYMBOLIC_SECONDS", "Answer",
    "read_answer", "canonical", "check_answer", "closeness", "normalize_number",
    "normalize_text", "is_hedged", "boxed_answer", "final_answer", "gold_problem",
    "SymbolicBudget", "symbolic_budget", "terminates",
]

NUMERIC_DOMAINS = ("math", "science")  # the rest compare as normalised text
MAX_PARSE_CHARS = 400       # longer answers are never read as a number (a real one is short)
MAX_SYMBOLIC_CHARS = 200    # longer answers never reach sympy
SYMBOLIC_SECONDS = 0.3      # CPU seconds for one sympy parse (cached) or one comparison
MAX_POWER_BITS = 4096       # 2^4096 is the largest power evaluated exactly
FLOAT_ARTEFACT = Fraction(1, 10**9)  # relative error a decimal may have against 1/3, 1/12...

_log = logging.getLogger(__name__)
_STRICT = False  # tests set True so that a bug raises instead of reading as "no answer"
_WARNED: set[str] = set()


# --- text -----------------------------------------------------------------------------

def _as_text(x: Any) -> str:
    if x is None:
        return ""
    if isinstance(x, bytes):
        return x.decode("utf-8", "replace")
    return x if isinstance(x, str) else str(x)


def _answer_text(x: Any) -> str | None:
    """An answer (or gold) as stripped text; None when missing, empty or NaN."""
    if x is None:
        return None
    if isinstance(x, numbers.Number) and not isinstance(x, bool):
        try:
            if math.isnan(x):  # type: ignore[arg-type]
                return None
        except (TypeError, ValueError):
            pass
    text = _as_text(x).strip()
    return None if not text or text.lower() == "nan" else text


def _is_numeric_domain(domain: Any) -> bool:
    return _as_text(domain).strip().lower() in NUMERIC_DOMAINS


# Signed decimals stay one token ("-3.5"); operators are tokens ("2 + 2" is not "2 2");
# everything else splits on non-alphanumerics.
_TEXT_TOKEN_RE = re.compile(r"(?<![^\W\d_])-?\d+(?:\.\d+)*|[^\W_]+|[+*/=^]")


def normalize_text(s: Any) -> str:
    r"""Lower case, LaTeX wrappers and punctuation removed, whitespace collapsed.

    Lists compare item by item, whatever separates them; arithmetic operators stay.

    >>> normalize_text("  The Eiffel Tower!  ")
    'the eiffel tower'
    >>> normalize_text("[1, 2, -3.5]") == normalize_text("1 2 -3.5") == "1 2 -3.5"
    True
    >>> normalize_text("\\boxed{\\text{Paris}}"), normalize_text("2 + 2")
    ('paris', '2 + 2')
    """
    text = _as_text(s)
    if len(text) <= MAX_PARSE_CHARS:
        text = _unwrap(text, _WRAPPERS)
    text = unicodedata.normalize("NFKC", text).casefold()
    return " ".join(_TEXT_TOKEN_RE.findall(text))


# --- LaTeX clean-up -------------------------------------------------------------------

_WRAPPERS = ("\\boxed", "\\fbox", "\\textnormal", "\\textbf", "\\textrm", "\\textit", "\\text",
             "\\mathrm", "\\mathbf", "\\mathit", "\\mbox", "\\hbox", "\\operatorname")
_REPLACEMENTS = (
    ("\\\\", " "), ("\\$", ""), ("$", ""), ("\\%", "%"), ("\\;", " "), ("\\:", " "),
    ("\\ ", " "), ("\\(", ""), ("\\)", ""), ("\\[", ""), ("\\]", ""), ("^{\\circ}", ""),
    ("^\\circ", ""), ("°", ""), ("\\approx", "="), ("≈", "="), ("€", ""), ("£", ""),
    ("¥", ""), ("₹", ""), ("\\times", "×"), ("\\cdot", "·"), ("\\div", "÷"),
    ("\u2212", "-"), ("\u2013", "-"), ("\u2014", "-"), ("\\left", ""), ("\\right", ""),
    ("\\displaystyle", ""), ("**", "^"),
)
# ",\!" and "{,}" are LaTeX's thousands separators (MATH writes 11,\! 111 and 10{,}000).
_LATEX_COMMA_RE = re.compile(r"\s*(?:\{\s*,\s*\}|,\s*\\!)\s*")
_THIN_SPACE_RE = re.compile(r"\\[,!]")
_DIGIT_GROUP_RE = re.compile(r"(?<=\d)[\u2009\u202f\u00a0'’](?=\d{3}(?!\d))")
# 6.02x10^23: a letter x between a digit and 10^ is a times sign ("max 10^3" stays words).
_SCI_X_RE = re.compile(r"(?<=\d)[ \t]?[xX][ \t]?(?=10[ \t]*\^)")
_OVERLINE_RE = re.compile(r"(\d*)\.(\d*)\\overline\{(\d{1,9})\}")
_COMMAND_RE = re.compile(r"\\([A-Za-z]+)")
_HARMLESS_COMMANDS = {"displaystyle", "textstyle", "quad", "qquad", "big", "Big", "bigl", "bigr",
                      "rm", "bf", "it", "mathbb", "limits"}


def _ascii_digits(s: str) -> str:
    if s.isascii():
        return s
    return "".join(str(unicodedata.decimal(c, c)) if c.isdecimal() else c for c in s)


def _braced(t: str, j: int) -> tuple[str | None, int]:
    """The group starting at t[j] ("{...}" or one character) and the index after it."""
    while j < len(t) and t[j] == " ":
        j += 1
    if j >= len(t):
        return None, j
    if t[j] != "{":
        return (t[j], j + 1) if t[j].isalnum() else (None, j)
    depth, k = 1, j + 1
    while k < len(t) and depth:
        depth += {"{": 1, "}": -1}.get(t[k], 0)
        k += 1
    return (t[j + 1:k - 1], k) if depth == 0 else (t[j + 1:], k)


def _unwrap(t: str, commands: Sequence[str]) -> str:
    r"""``\boxed{x}`` -> ``x`` for each command (short strings only: quadratic)."""
    for command in commands:
        i = t.find(command + "{")
        while i >= 0:
            inner, k = _braced(t, i + len(command))
            t = t[:i] + (inner or "") + t[k:]
            i = t.find(command + "{", i)
    return t


_PLAIN_RE = re.compile(r"[-+]?\d+(?:\.\d+)?")
_MIXED_RE = re.compile(r"(?<![\d.])(\d+)[ \t]*$")


def _fracs(t: str) -> str:
    r"""``\frac{a}{b}`` -> ``a/b`` (``(a)/(b)`` unless plain numbers); ``2\frac{1}{2}`` -> ``(2+1/2)``."""
    t = t.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac").replace("\\cfrac", "\\frac")
    i = t.find("\\frac")
    while i >= 0:
        a, j = _braced(t, i + 5)
        b, j = _braced(t, j) if a is not None else (None, j)
        if a is None or b is None:
            t = t[:i] + t[i + 5:]
        else:
            a, b = a.strip(), b.strip()
            plain = _PLAIN_RE.fullmatch(a) and _PLAIN_RE.fullmatch(b)
            mixed = _MIXED_RE.search(t, 0, i) if plain and a.isdigit() and b.isdigit() else None
            if mixed:  # a mixed number: 2 1/2 is 2 + 1/2 (MATH writes 7\frac{1}{2})
                t = f"{t[:mixed.start()]}({mixed.group(1)}+{a}/{b}){t[j:]}"
                i = mixed.start()
            else:
                t = t[:i] + (f"{a}/{b}" if plain else f"({a})/({b})") + t[j:]
        i = t.find("\\frac", i + 1)
    return t


def _overline(m: re.Match) -> str:
    """16.\\overline{6} -> (50/3): a repeating decimal as an exact fraction."""
    whole, fixed, rep = m.group(1) or "0", m.group(2), m.group(3)
    value = Fraction(int(whole + fixed or "0"), 10 ** len(fixed))
    value += Fraction(int(rep), (10 ** len(rep) - 1) * 10 ** len(fixed))
    return f"({value.numerator}/{value.denominator})"


def _clean(text: str) -> str:
    """Strip LaTeX, currency and digit grouping so that numbers, operators and words remain.

    Short texts only (quadratic in the worst case): longer ones come back as they are.
    """
    if len(text) > MAX_PARSE_CHARS:
        return text
    t = _ascii_digits(text)
    t = _LATEX_COMMA_RE.sub(",", t)
    t = _OVERLINE_RE.sub(_overline, t)
    t = _fracs(_unwrap(t, _WRAPPERS))
    t = _THIN_SPACE_RE.sub("", t)
    for old, new in _REPLACEMENTS:
        t = t.replace(old, new)
    t = _SCI_X_RE.sub("*", t)
    t = _DIGIT_GROUP_RE.sub("", t)
    t = _COMMAND_RE.sub(lambda m: " " if m.group(1) in _HARMLESS_COMMANDS else m.group(0), t)
    return t.strip()


def _boxes(text: str, limit: int = 8) -> list[tuple[int, int, str]]:
    r"""The last ``limit`` closed ``\boxed{...}`` / ``\fbox{...}`` as (start, end, content)."""
    found = []
    for command in ("\\boxed{", "\\fbox{"):
        i, tries = text.rfind(command), 0
        while i >= 0 and tries < limit:  # the last few only: linear time on junk
            tries += 1
            depth, k = 0, i + len(command) - 1
            end = min(len(text), k + MAX_PARSE_CHARS + 2)
            while k < end:
                depth += {"{": 1, "}": -1}.get(text[k], 0)
                k += 1
                if depth == 0:
                    found.append((i, k, text[i + len(command):k - 1].strip()))
                    break
            i = text.rfind(command, 0, i)
    return sorted(found)[-limit:]


# Between two boxes of one answer: "\boxed{1}, \boxed{2}", "\boxed{6} and \boxed{8}".
_BOX_GAP_RE = re.compile(r"[^\n]{0,40}")
_SEPARATOR_RE = re.compile(r",|;|\band\b|\bor\b")


def _box_run(text: str) -> str | None:
    r"""The last box, with the boxes before it that a separator joins (``\boxed{1} and \boxed{2}``)."""
    boxes = _boxes(text)
    if not boxes:
        return None
    run = [boxes[-1]]
    for box in reversed(boxes[:-1]):
        gap = text[box[1]:run[0][0]]
        words = re.sub(r"\\text\{[^{}]*\}|\\[A-Za-z]+", " ", gap)
        if not _BOX_GAP_RE.fullmatch(gap) or not (
                _SEPARATOR_RE.search(gap) or not re.search("[A-Za-z]", words)):
            break  # "\boxed{1} no no no \boxed{2}": only the last box answers
        run.insert(0, box)
    contents = [c for _, _, c in run if c]
    return ", ".join(dict.fromkeys(contents)) or None


# $...$, $$...$$, \(...\), \[...\]: the math of a sentence ("We find that $x < 3$.").
_SEGMENT_RE = re.compile(r"(?<!\\)\$\$(.+?)(?<!\\)\$\$|(?<![\\$])\$(?!\$)([^$\n]+?)(?<!\\)\$|\\\((.+?)\\\)"
                         r"|\\\[(.+?)\\\]", re.DOTALL)
_PROSE_WORD_RE = re.compile(r"(?<![\\A-Za-z])(?!(?:and|or)\b)[A-Za-z]{3,}")


def _segments(text: str) -> list[tuple[int, int, str]]:
    """(start, end, content) of every math segment in a short text."""
    return [(m.start(), m.end(), next(g for g in m.groups() if g is not None).strip())
            for m in _SEGMENT_RE.finditer(text)]


def _has_prose(text: str) -> bool:
    """Two or more words outside math, ``\\text{}`` and commands: a sentence, not an answer."""
    bare = _SEGMENT_RE.sub(" ", text)
    bare = re.sub(r"\\[A-Za-z]+(?:\{[^{}]*\})?", " ", bare)
    return len(_PROSE_WORD_RE.findall(bare)) >= 2


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


# --- symbolic answers -----------------------------------------------------------------

_KEY_ONLY_RE = re.compile(r"\d\s*_|:|\\(?:text|mathrm|mbox)\{")  # 204_5 (a base), 12:00, words
_CAP_RE = re.compile(
    r"\d{16}|\^\s*\{[^{}]*\^|\^\s*\(?\s*-?\d{4}|\d{4}\s*!|\\binom\s*\{\s*\d{4}")
_SINGLE_LETTER_RE = re.compile(
    r"\\(?:mathrm|text|textnormal|textrm|mathit|operatorname)\{\s*([A-Za-z])\s*\}")
_TRAILING_TEXT_RE = re.compile(
    r"\\(?:text|textnormal|textrm|mathrm|mbox)\{([^{}]*)\}\s*(?:\^\s*\{?\d\}?)?\s*$")
_CLOSED_WORDS_RE = re.compile(r"\\?(?:sqrt|frac|dfrac|tfrac|pi|cdot|times|div|left|right|log|ln|sin|cos"
                              r"|tan|sec|csc|cot|exp|circ)(?![A-Za-z])")
_THOUSANDS_RE = re.compile(r"(?<![\d.,])[1-9]\d{0,2}(?:,\d{3})+(?![\d,])")
_DIGIT_COMMA_RE = re.compile(r"(?<=\d),(?=\d)")
_EQUALS_RE = re.compile(r"(?<![<>!\\])=|\\in(?![A-Za-z])")
_AND_RE = re.compile(r",?\s*\\(?:text|textnormal|textrm|mbox)\{\s*,?\s*and\s*\}")
_QUAD_RE = re.compile(r"\\q?quad")  # spacing: \\quadx_{2} is x_{2}


def _math_latex(text: str) -> str | None:
    """The LaTeX handed to sympy: our unwrapping first, None when over the size caps."""
    s = _ascii_digits(text).strip()
    if len(s) > MAX_PARSE_CHARS:
        return None
    if "matrix" not in s and "array" not in s:  # JSON-escaped text: an escaped \\frac is \\frac
        s = re.sub(r"\\\\(?=[A-Za-z])", r"\\", s)
    s = _AND_RE.sub(",", s)  # 6 \text{ and } 8 is the list 6, 8
    s = _QUAD_RE.sub(" ", s)
    for old in ("$", "\\(", "\\)", "\\[", "\\]", "\\displaystyle", "\\!"):
        s = s.replace(old, "")
    s = _LATEX_COMMA_RE.sub(",", s)
    s = _SINGLE_LETTER_RE.sub(r"\1", s)  # \mathrm{e} is e: units=... must not eat it
    trailing = _TRAILING_TEXT_RE.search(s)
    if trailing and trailing.start() > 0 and _unit(trailing.group(1))[0]:
        s = s[:trailing.start()]  # 3\sqrt{13}\text{ cm}^2: the unit goes
    s = s.strip().rstrip(".").strip()
    if "(" not in s and "[" not in s:  # outside tuples, 1,234 groups thousands
        s = _THOUSANDS_RE.sub(lambda m: m.group(0).replace(",", ""), s)
    s = _DIGIT_COMMA_RE.sub(", ", s)  # any other comma separates items: 0,111 is a list
    if not s or len(s) > MAX_SYMBOLIC_CHARS or _CAP_RE.search(s) or _depth(s) > 12:
        return None
    return s


def _depth(s: str) -> int:
    depth = deepest = 0
    for c in s:
        if c in "({[":
            depth += 1
            deepest = max(deepest, depth)
        elif c in ")}]":
            depth -= 1
    return deepest


def _compact(s: str) -> str:
    return "".join(s.split()).rstrip(".")


def _is_closed(latex: str) -> bool:
    """No variables: the expression can equal a number (\\sqrt{4}, 2\\pi, (3)(4))."""
    rest = _CLOSED_WORDS_RE.sub(" ", latex)
    return not re.search(r"[A-Za-z\\]", rest)


def _value_side(latex: str) -> str | None:
    """``x = \\sqrt{2}`` -> ``\\sqrt{2}``: the last side when the others are names, else None."""
    parts = _EQUALS_RE.split(latex)
    if len(parts) == 1:
        return latex
    if all(_is_label(_clean(p)) for p in parts[:-1]):
        return parts[-1].strip() or None
    return None


def _items(latex: str) -> list[str]:
    """Top-level items of a list: ``x = 1, y = 2`` -> ``["x = 1", "y = 2"]``."""
    items, depth, start = [], 0, 0
    for i, c in enumerate(latex):
        depth += {"(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}.get(c, 0)
        if depth == 0 and c in ",;":
            items.append(latex[start:i].strip())
            start = i + 1
    items.append(latex[start:].strip())
    return [item for item in items if item and item not in ("\\quad", "\\qquad")]


def _labelled(item: str) -> tuple[str, str] | None:
    """``x_1 = 5`` -> (``x_1``, ``5``); None unless the item names one value."""
    parts = _EQUALS_RE.split(item)
    name = _clean(parts[0]) if len(parts) == 2 else ""
    if name and _is_label(name) and parts[1].strip():
        return _compact(name).replace("{", "").replace("}", ""), parts[1].strip()
    return None


class _OutOfTime(BaseException):
    """Raised inside sympy when the time limit runs out (a BaseException: sympy's own
    ``except Exception`` clauses cannot swallow it)."""


def _limited(fn: Callable[[], Any], seconds: float) -> Any:
    """``fn()``, or :class:`_OutOfTime` raised inside it once it used ``seconds`` of CPU.

    A watchdog thread reads the calling thread's CPU clock every 10 ms and, past the
    limit, raises the exception in it (``PyThreadState_SetAsyncExc``). That works the
    same in the main thread (a script, a notebook kernel) and in any other: Tunix
    computes rewards in a worker thread, where ``signal.alarm`` (math-verify's own
    timeout, whole seconds only) cannot be used. It costs the checked code nothing, and
    CPU time rather than wall time means a busy machine does not change a verdict.
    One long C call cannot be interrupted; the size caps keep those short.
    """
    tid = threading.get_ident()
    try:
        clock = time.pthread_getcpuclockid(tid)
        now = functools.partial(time.clock_gettime, clock)
    except (AttributeError, OSError):  # no per-thread CPU clock (Windows): wall time
        now = time.monotonic
    deadline = now() + seconds
    lock, armed, done = threading.Lock(), [True], threading.Event()

    def watch() -> None:
        while not done.wait(0.01):
            if now() > deadline:
                with lock:  # again every 10 ms: a gc callback or a bare except may swallow one
                    if armed[0]:
                        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(tid),
                                                                   ctypes.py_object(_OutOfTime))

    watchdog = threading.Thread(target=watch, name="reasonkit.answers.watchdog", daemon=True)
    watchdog.start()
    try:
        return fn()
    finally:
        while True:  # disarm first; an exception arriving meanwhile just means "again"
            try:
                with lock:
                    armed[0] = False
                break
            except _OutOfTime:
                continue
        done.set()
        # Nothing is sent any more; one already sent may still be pending: drop it. (If it
        # fires before this line, the caller sees _OutOfTime, as for a timeout.)
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(tid), None)


# --- closed forms: cheap proof that two values differ --------------------------------

# A closed-form answer (numbers, + - * \cdot \times, juxtaposition, ^, \frac, \sqrt, \pi,
# parentheses) is enclosed in an interval with exact rational ends, read the way
# latex2sympy reads it (its mixed-number rule included: 2\frac{1}{2} and 2(3) add). When
# the intervals of the two answers lie further apart than CLOSED_APART, they differ, and
# math-verify would say so too: it credits a numeric difference only below ~1e-9 (its
# float rounding, evalf's chop), far under that gap. So no sympy parse is needed to
# reject them. Anything else, or any doubt, goes to sympy as before; equal answers
# always do. Costs about 0.1 ms, and needs neither sympy nor its import.
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


class _OverBudget(Exception):
    """This thread's symbolic budget is spent: the comparison is not made, nor cached."""


@dataclasses.dataclass
class SymbolicBudget:
    """The CPU seconds of uncached sympy work a :func:`symbolic_budget` block allows,
    the seconds ``spent`` so far, and the comparisons ``skipped`` (judged unequal) after."""

    seconds: float
    spent: float = 0.0
    skipped: int = 0
    refusing: bool = False  # set per answer: spent when check_answer began


_BUDGET = threading.local()  # .current: this thread's SymbolicBudget, or None


@contextlib.contextmanager
def symbolic_budget(seconds: float | None) -> Iterator[SymbolicBudget | None]:
    r"""Bound this thread's uncached sympy work (parses, comparisons) in the block.

    Once ``seconds`` of CPU time are spent, an answer that :func:`check_answer` would
    compare through sympy is not compared: it judges "unequal" (never equal), is not
    cached, and counts in ``skipped``. An answer begun before runs to its end under the
    usual limits, so every verdict given is the exact one and the block overshoots by
    at most one answer. Cached verdicts and closed forms whose values clearly differ
    cost nothing and are unaffected. None means no budget, the default everywhere:
    data and evaluation never set one. GRPO's rewards set one per call (``rewards.py``).

    >>> with symbolic_budget(0.0) as budget:  # equal, but only sympy can tell
    ...     check_answer("math", "\\sqrt{7}", "\\frac{7}{\\sqrt{7}}")
    False
    >>> budget.skipped, check_answer("math", "\\sqrt{7}", "\\frac{7}{\\sqrt{7}}")
    (1, True)
    """
    if seconds is not None and not (isinstance(seconds, numbers.Real) and not isinstance(seconds, bool)
                                    and 0 <= seconds < math.inf):
        raise ValueError(f"symbolic_budget: seconds={seconds!r} must be None or a number >= 0")
    budget = None if seconds is None else SymbolicBudget(float(seconds))
    outer = getattr(_BUDGET, "current", None)
    _BUDGET.current = budget
    try:
        yield budget
    finally:
        _BUDGET.current = outer


def _timed(fn: Callable[[], Any], seconds: float) -> Any:
    """``_limited(fn, seconds)``, its CPU time charged to this thread's budget if one is set."""
    budget = getattr(_BUDGET, "current", None)
    if budget is None:
        return _limited(fn, seconds)
    start = time.thread_time()
    try:
        return _limited(fn, seconds)
    finally:
        budget.spent += time.thread_time() - start


_SYMPY: dict[str, Any] = {}
_WARM_UP = (
    ("\\frac{\\sqrt{3}}{2}", "x^2+1"), ("(1,2)", "\\{1,-2\\}"),
    ("[0,1) \\cup (2, \\infty)", "y = 2x - 1"), ("x \\leq 5", "-2 \\le x < 7"),
    ("x \\in [-2,7]", "3 \\pm 2\\sqrt{2}"), ("2 \\sin b \\cos a", "\\frac{\\pi r}{h+r}"),
    ("\\begin{pmatrix}1 & 2\\\\3 & 4\\end{pmatrix}", "(6,31,-1)"), ("10\\%", "a_{1} = 5, b = 2"))


def _symbolic_tools() -> dict[str, Any]:
    """math-verify and latex2sympy, imported on first use (sympy takes a second to load),
    their logging silenced (math-verify logs failing inputs in full) and warmed up
    outside any time limit."""
    if not _SYMPY:
        for name in ("math_verify", "latex2sympy2_extended"):
            logging.getLogger(name).setLevel(logging.CRITICAL + 1)
        import sympy
        from latex2sympy2_extended.latex2sympy2 import NormalizationConfig, latex2sympy, normalize_latex
        from math_verify.grader import should_treat_as_complex, verify

        config = NormalizationConfig(basic_latex=True, units=False, malformed_operators=True,
                                     nits=True, boxed="none", equations=False)

        def parse(latex: str) -> Any:
            normal = normalize_latex(latex, config=config)
            return latex2sympy(normal, is_real=not should_treat_as_complex(normal),
                               convert_degrees=False, normalization_config=None)

        tools = {"sympy": sympy, "parse": parse, "verify": verify}
        # The LaTeX parser builds its tables on first use: a few hundred ms per construct.
        for a, b in _WARM_UP:
            try:
                verify(parse(a), parse(b), float_rounding=9, timeout_seconds=None)
            except Exception:  # noqa: BLE001 - a warm-up, nothing depends on it
                pass
        _SYMPY.update(tools)
    return _SYMPY


# Values given to an answer's variables to tell two expressions apart: positive, not
# integers, unrelated (a real symbol takes them; one that must be an integer does not).
_POINTS = (("0.5773", "1.3247", "0.9159", "1.6180"), ("1.2589", "0.7071", "1.4427", "0.3679"))
POINT_CHECK_SECONDS = 0.05  # CPU seconds for the point check; past it, math-verify decides


def _points_apart(g: Any, p: Any, sympy: Any) -> bool:
    """Whether two sympy expressions take clearly different values at one of _POINTS.

    math-verify calls two expressions equal when their difference simplifies to 0 (an
    identity over the reals, so equal at every point) or is numerically below ~1e-9;
    a gap above CLOSED_APART at a point its variables may take disproves both. Only
    plain expressions are checked: sets, tuples, relations, matrices, a bare symbol
    (math-verify compares those by name), percentages (9% may equal 9) and anything that
    binds a variable (an integral's x is not the answer's x) are not.
    """
    exprs = (g, p)
    if not all(isinstance(e, sympy.Expr) and not isinstance(e, (sympy.Symbol, sympy.MatrixExpr))
               and not e.has(sympy.UnevaluatedExpr, sympy.Integral, sympy.Sum, sympy.Product,
                             sympy.Derivative, sympy.Limit, sympy.Subs) for e in exprs):
        return False
    names = sorted({s.name for e in exprs for s in e.free_symbols})
    symbols = [s for e in exprs for s in e.free_symbols]
    if len(names) > len(_POINTS[0]):
        return False
    for point in _POINTS[:2 if names else 1]:
        values = {s: sympy.Rational(point[names.index(s.name)]) for s in symbols}
        if any(getattr(values[s], f"is_{key}", None) is not wanted
               for s in symbols for key, wanted in s.assumptions0.items()):
            return False  # a point this variable may not take
        a, b = (e.xreplace(values).evalf(30) for e in exprs)
        if not all(v.is_number and v.is_finite for v in (a, b)):
            continue
        gap, scale = abs(a - b), max(1, abs(a), abs(b))
        if bool(gap > sympy.Rational(CLOSED_APART) * scale):
            return True
    return False


@functools.lru_cache(maxsize=4096)
def _sympy_of(item: str) -> Any:
    """A prepared answer as a sympy object: ``"L:<latex>"`` or ``"Q:<fraction>"``; None if
    it does not parse within the time limit (cached: each gold parses once)."""
    tools = _symbolic_tools()
    kind, _, body = item.partition(":")
    if kind == "Q":
        return tools["sympy"].Rational(body)
    try:
        return _timed(lambda: tools["parse"](body), SYMBOLIC_SECONDS)
    except (Exception, _OutOfTime):
        return None


@functools.lru_cache(maxsize=8192)
def _symbolic_equal(gold: str, pred: str) -> bool:
    """math-verify's verdict on two prepared answers, within the time limit (cached).

    Two closed forms whose values clearly differ are rejected before sympy (see
    :func:`_closed_apart`): the verdict math-verify would give, without its cost.
    """
    if _closed_apart(gold, pred):
        return False
    budget = getattr(_BUDGET, "current", None)
    if budget is not None and budget.refusing:
        raise _OverBudget  # not made, so not cached
    g, p = _sympy_of(gold), _sympy_of(pred)
    if g is None or p is None:
        return False
    tools = _symbolic_tools()
    try:
        if _timed(lambda: _points_apart(g, p, tools["sympy"]), POINT_CHECK_SECONDS):
            return False
    except (Exception, _OutOfTime):
        pass  # no proof they differ: math-verify decides
    try:
        return bool(_timed(lambda: tools["verify"](g, p, float_rounding=9, numeric_precision=15,
                                                   strict=True, timeout_seconds=None),
                           SYMBOLIC_SECONDS))
    except (Exception, _OutOfTime):
        return False


def _symbolic(gold: str, pred: str) -> bool:
    """:func:`_symbolic_equal`, or False (counted) when this thread's budget is spent."""
    try:
        return _symbolic_equal(gold, pred)
    except _OverBudget:
        budget = getattr(_BUDGET, "current", None)
        if budget is not None:
            budget.skipped += 1
        return False


# --- reading an answer ----------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Answer:
    """An answer as the checker reads it.

    ``kind`` is ``"number"`` (``value``, ``percent``), ``"math"`` (``latex`` for sympy,
    None when over the size caps; ``closed`` when it has no variables), ``"text"``,
    ``"invalid"`` (an equation whose sides disagree) or ``"none"`` (no answer). ``key`` is
    :func:`canonical`'s; ``words`` the answer as :func:`normalize_text` words.
    """

    kind: str
    key: Hashable
    value: Fraction | None = None
    percent: bool = False
    latex: str | None = None
    closed: bool = False
    words: str = ""  # normalize_text of the cleaned answer: how text compares


_NONE = Answer("none", ("none",))
_BARE_RE = re.compile(r"[-+]?(?:" + _NUM + r")(?:\s?%)?")
_TWO_LETTERS_RE = re.compile(r"[^\W\d_]{2}")
_CHOICE_RE = re.compile(r"\(\s*[A-Za-z]\s*\)")  # a multiple-choice letter: (C)
_WORDS_RE = re.compile(r"\(?[^\W\d_][^\W\d_'’.-]*\)?(?:[\s,.'’!?-]+\(?[^\W\d_][^\W\d_'’.-]*\)?)*[.!]?")


def read_answer(answer: Any, domain: Any = "math") -> Answer:
    r"""How the checker reads ``answer`` under ``domain``'s rule.

    >>> [read_answer(a).kind for a in ["$1,000", "x = 5", "1 + 1 = 42", "\\sqrt{2}", "odd"]]
    ['number', 'number', 'invalid', 'math', 'text']
    >>> read_answer("25\\%").value, read_answer("25\\%").percent
    (Fraction(25, 1), True)
    """
    text = _answer_text(answer)
    if text is None:
        return _NONE
    try:
        return _read(text, _is_numeric_domain(domain))
    except Exception:
        if _STRICT:
            raise
        _warn_once("read", "could not read an answer; treated as text", exc_info=True)
        words = normalize_text(text)
        return Answer("text", ("text", words), words=words)


@functools.lru_cache(maxsize=16384)
def _read_cached(text: str, numeric: bool) -> Answer:
    return _read_uncached(text, numeric)


def _read(text: str, numeric: bool) -> Answer:
    # GRPO repeats each gold G times and the policy repeats its answers: cache short ones.
    return _read_cached(text, numeric) if len(text) <= MAX_PARSE_CHARS else _read_uncached(text, numeric)


def _read_uncached(text: str, numeric: bool) -> Answer:
    t = _clean(text)  # as it is when longer than MAX_PARSE_CHARS
    words = normalize_text(t)
    if len(text) > MAX_PARSE_CHARS:  # never a number; compared as text
        return Answer("text", ("text", words), words=words)
    if not numeric:
        bare = t.rstrip(".").strip()
        if _BARE_RE.fullmatch(bare):
            value = _read_number(bare)
            if isinstance(value, tuple):
                return Answer("number", ("number", value[0]), value[0], value[1], words=words)
        return Answer("text", ("text", words), words=words)
    source = _box_run(text)  # "The answer is \boxed{5}": the box is the answer
    if source is None and _has_prose(text):
        # "We find that $x < 3$.": the math is the answer, if the sentence has one
        segments = {_compact(seg) for _, _, seg in _segments(text)}
        source = _segments(text)[-1][2] if len(segments) == 1 else None
    if source is not None:
        t = _clean(source)
        words = normalize_text(t)
    else:
        source = text
    value = _read_number(t)
    if value is _INVALID:
        return Answer("invalid", ("invalid", _compact(t)), words=words)
    if isinstance(value, tuple):
        return Answer("number", ("number", value[0]), value[0], value[1], words=words)
    if _WORDS_RE.fullmatch(t) and (_TWO_LETTERS_RE.search(t) or _CHOICE_RE.fullmatch(t)):
        return Answer("text", ("text", words), words=words)
    latex = _math_latex(source)
    return Answer("math", ("math", _compact(latex if latex is not None else t)), latex=latex,
                  closed=latex is not None and _is_closed(latex), words=words)


def canonical(answer: Any, domain: Any = "math") -> Hashable:
    """A hashable key: answers with equal keys are equal, so they group in one pass.

    Numbers key by value (``"$1,000"``, ``"1000.0"`` and ``"x = 1000"`` share one; a
    percent keys by the number before its sign), text by :func:`normalize_text`, other
    math by its compact LaTeX. The converse does not hold: ``"50%"`` equals ``"0.5"``
    and ``\\frac{1}{\\sqrt{2}}`` equals ``\\frac{\\sqrt{2}}{2}`` under
    :func:`check_answer` with different keys.

    >>> canonical("$1,000", "math"), canonical(" Paris. ", "general")
    (('number', Fraction(1000, 1)), ('text', 'paris'))
    """
    return read_answer(answer, domain).key


def check_answer(domain: Any, predicted: Any, gold: Any) -> bool:
    r"""Whether ``predicted`` is the gold answer under ``domain``'s rule (see the module doc).

    math, science: numbers by exact value (units ignored, "x = 5" reads as 5, "2 + 2" as
    4), other math through math-verify, words as text. coding, instruction,
    summarization, general (and unknown domains): :func:`normalize_text` equality, so case,
    whitespace, punctuation and list separators do not matter; two bare numbers compare
    by value. A hedged answer ("3 or 4") or a missing gold (None, NaN, "") never matches.

    >>> check_answer("math", "$1,000", "1000"), check_answer("science", "9.8 m/s^2", "9.8")
    (True, True)
    >>> check_answer("math", "\\frac{\\sqrt{3}}{2}", "\\frac{\\sqrt3}{2}")
    True
    >>> check_answer("math", "1 + \\frac{1}{\\mathrm{e}}", "1 - \\frac{1}{\\mathrm{e}}")
    False
    >>> check_answer("coding", "[1, 2, 3]", "1 2 3"), check_answer("general", "paris.", "Paris")
    (True, True)
    >>> check_answer("math", "41 or 42", "42"), check_answer("math", "42", float("nan"))
    (False, False)
    """
    budget = getattr(_BUDGET, "current", None)
    if budget is not None:  # judged in full, or (budget spent) not through sympy at all
        budget.refusing = budget.spent >= budget.seconds
    try:
        return _check(domain, predicted, gold)
    except Exception:
        if _STRICT:
            raise
        _warn_once("check", "raised while comparing two answers; judged unequal", exc_info=True)
        return False


def _check(domain: Any, predicted: Any, gold: Any) -> bool:
    pred_text, gold_text = _answer_text(predicted), _answer_text(gold)
    if pred_text is None or gold_text is None:
        return False
    numeric = _is_numeric_domain(domain)
    g = _read(gold_text, numeric)
    if numeric and g.kind == "number" and len(pred_text) > MAX_PARSE_CHARS:
        return False  # a long answer is never one number: no need to read it
    p = _read(pred_text, numeric)
    if not numeric:
        if is_hedged(pred_text):
            return False
        if p.kind == g.kind == "number":
            return _same_value((p.value, p.percent), (g.value, g.percent))
        return p.words == g.words != ""
    if "invalid" in (p.kind, g.kind):
        return False
    if g.kind == "number":
        if p.kind == "number":  # one value by construction: "41 or 42" never reads as one
            return _same_value((p.value, p.percent), (g.value, g.percent))
        if p.kind != "math" or p.latex is None or is_hedged(pred_text):
            return False
        value = _value_side(p.latex)
        if value is None or not _is_closed(value) or _KEY_ONLY_RE.search(value):
            return False
        return any(_symbolic(f"Q:{v}", f"L:{value}") for v in _candidates((g.value, g.percent)))
    if g.kind == "text" or p.kind == "text":
        return p.words == g.words != ""
    # gold is math; the prediction a number or math
    if p.key == g.key:
        return True
    if g.latex is None:
        return False
    if p.kind == "number":
        return not _KEY_ONLY_RE.search(g.latex) and any(
            _symbolic(f"L:{g.latex}", f"Q:{v}") for v in _candidates((p.value, p.percent)))
    if p.latex is None:
        return False
    gold_latex, pred_latex = g.latex, p.latex
    gold_items = _items(gold_latex)
    if len(gold_items) > 1 and all(map(_labelled, gold_items)):  # x = 1, y = 2
        return _same_items(domain, gold_items, _items(pred_latex))
    gold_eq, pred_eq = bool(_EQUALS_RE.search(gold_latex)), bool(_EQUALS_RE.search(pred_latex))
    if pred_eq and not gold_eq:
        pred_latex = _value_side(pred_latex)  # x = \sqrt{2} is \sqrt{2}; 1 + 1 = 3 is nothing
    elif gold_eq and not pred_eq:
        gold_latex = _value_side(gold_latex)
    if gold_latex is None or pred_latex is None:
        return False
    if _compact(gold_latex) == _compact(pred_latex):
        return True
    if _KEY_ONLY_RE.search(gold_latex) or _KEY_ONLY_RE.search(pred_latex):
        return False  # 204_5, 12:00: sympy would misread them
    return _symbolic(f"L:{gold_latex}", f"L:{pred_latex}")


def _same_items(domain: Any, gold_items: list[str], pred_items: list[str]) -> bool:
    """A list of named values: the same value under each name, or in order without names."""
    if len(pred_items) != len(gold_items):
        return False
    gold = [_labelled(item) for item in gold_items]
    pred = [_labelled(item) for item in pred_items]
    if len({name for name, _ in gold}) < len(gold):  # p = -1, p = 15/8: a set of solutions
        values = lambda items: ", ".join(v[1] if v else i for v, i in zip(  # noqa: E731
            [_labelled(i) for i in items], items, strict=True))
        return _check(domain, values(pred_items), values(gold_items))
    if all(pred):
        named = dict(pred)  # type: ignore[arg-type]
        return len(named) == len(pred) and all(
            name in named and _check(domain, named[name], value) for name, value in gold)  # type: ignore[misc]
    if any(pred):
        return False
    return all(_check(domain, p, g[1]) for p, g in zip(pred_items, gold, strict=True))  # type: ignore[index]


def closeness(predicted: Any, gold: Any, tolerance: float = 0.10) -> float:
    r"""``1 - rel_err / tolerance`` for a number near a numeric gold, in [0, 1]; else 0.

    ``rel_err = |answer - gold| / |gold|`` (the absolute error when the gold is 0), with
    a percent read both ways. 0 at or beyond ``tolerance`` or without one number on both
    sides. GRPO's ``answer_close`` and evaluation's partial accuracy use it.

    >>> [round(closeness(p, "50"), 3) for p in ["50", "48", "$46", "45", "x"]]
    [1.0, 0.6, 0.2, 0.0, 0.0]
    >>> round(closeness("49%", "0.5"), 3), closeness("0.05", "0")
    (0.8, 0.5)
    """
    try:
        pred_text, gold_text = _answer_text(predicted), _answer_text(gold)
        if pred_text is None or gold_text is None or len(pred_text) > MAX_PARSE_CHARS:
            return 0.0
        p, g = _read(pred_text, True), _read(gold_text, True)
        if p.kind != "number" or g.kind != "number":
            return 0.0
        err = min(abs(a - b) / abs(b) if b else abs(a) for a in _candidates((p.value, p.percent))
                  for b in _candidates((g.value, g.percent)))
        limit = Fraction(tolerance)
        return 1.0 - float(err / limit) if err < limit else 0.0
    except Exception:
        if _STRICT:
            raise
        _warn_once("closeness", "raised; scored 0.0", exc_info=True)
        return 0.0


def normalize_number(s: Any) -> float | None:
    r"""The one number a short answer states, as a float, or None.

    Handles thousands separators, currency signs, units, percent signs (the number before
    the sign is returned), decimals, fractions, arithmetic, signs, unicode digits and
    LaTeX (``\boxed{}``, ``\frac{}{}``, ``\text{}``). No single value ("41 or 42", "pi",
    "1 + 1 = 42") gives None.

    >>> [normalize_number(s) for s in ["$1,234.50", "42 apples", "\\boxed{\\frac{1}{2}}",
    ...                                 "-3 km", "50%", "x = 7", "٤٢", "41 or 42", "pi", "2 + 2"]]
    [1234.5, 42.0, 0.5, -3.0, 50.0, 7.0, 42.0, None, None, 4.0]
    """
    text = _answer_text(s)
    if text is None or len(text) > MAX_PARSE_CHARS:  # never one number
        return None
    a = read_answer(text, "math")
    if a.kind != "number":
        return None
    try:
        out = float(a.value)
    except OverflowError:
        return None
    return out if math.isfinite(out) else None


# --- hedges and free text -------------------------------------------------------------

# For scanning free text: one number with its sign and percent, thousands never from a 0.
_NUMBER_RE = re.compile(
    r"(?<![A-Za-z_.\d])(?P<sign>[-+]?)(?P<num>(?:[1-9]\d{0,2}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?"
    r"(?:[eE][-+]?\d+)?|\.\d+)(?:[ \t]?/[ \t]?(?P<den>\d+(?:\.\d+)?))?(?P<pct>[ \t]?(?:%|[Pp]ercent\b))?")
_HEDGE_RE = re.compile(
    r"\b(?:or|either|maybe|perhaps|possibly|probably|between|not sure|unsure)\b", re.IGNORECASE)


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


def is_hedged(text: Any) -> bool:
    """A hedge word together with at least two different numbers ("41 or 42").

    >>> is_hedged("41 or 42"), is_hedged("either 3 or 4"), is_hedged("1/2 or 0.5"), is_hedged("maybe 42")
    (True, True, False, False)
    """
    try:
        text = _as_text(text)
        if not _HEDGE_RE.search(text):
            return False
        spellings: set[str] = set()
        values: set[Fraction | None] = set()
        for m in _NUMBER_RE.finditer(_clean(text) if len(text) <= MAX_PARSE_CHARS else text):
            if m.group(0) not in spellings:  # a long answer may repeat one number many times
                spellings.add(m.group(0))
                values.add(_value_of(m))
                if len(values) >= 2:
                    return True
        return False
    except Exception:
        if _STRICT:
            raise
        return False


_OPERATOR_CHARS = "+-*/^×÷·"


def final_answer(text: Any) -> str | None:
    r"""The final answer of free text (no tags): the last ``\boxed{}``, else the last number.

    The lenient reading, for completions without a usable answer tag, in this order: the
    last ``\boxed{...}`` (with the boxes a separator joins to it); what follows "final
    answer is"; the last math (``$...$``, ``\(...\)``) when no number comes after it;
    the last number, unless it is an operand (``2 + 2``) or the last line hedges. Linear
    in the text's length.

    >>> final_answer("6 * 7 = 42."), final_answer("so \\boxed{\\frac{1}{2}} it is"), final_answer("2 + 2")
    ('42', '\\frac{1}{2}', None)
    >>> final_answer("#### 1,234"), final_answer("It is 41 or 42"), final_answer("no numbers")
    ('1,234', None, None)
    """
    try:
        return _final_answer(_as_text(text))
    except Exception:
        if _STRICT:
            raise
        _warn_once("final_answer", "raised; no answer", exc_info=True)
        return None


def boxed_answer(text: Any) -> str | None:
    r"""The content of the last ``\boxed{...}`` (or ``\fbox{...}``), as MATH marks its answers.

    Boxes just before it that a separator joins (``\boxed{1} and \boxed{2}``) come too, as
    one list. None without a closed box (a box holding more than ``MAX_PARSE_CHARS``
    does not count).

    >>> boxed_answer("so $x = \\boxed{\\frac{1}{2}}$.")
    '\\frac{1}{2}'
    >>> boxed_answer("\\boxed{1} and \\boxed{2}"), boxed_answer("\\boxed{1} or \\boxed{2"), boxed_answer("2")
    ('1, 2', '1', None)
    """
    try:
        return _box_run(_as_text(text))
    except Exception:
        if _STRICT:
            raise
        return None


_FINAL_RE = re.compile(r"[\s:]*(?:\$([^$]{1,200})\$|\\\((.{1,200}?)\\\)|([^\n]{1,200}?)(?:\.\s|\.?$|\n))")


def _final_answer(text: str) -> str | None:
    box, box_end = _box_run(text), max((b[1] for b in _boxes(text, 1)), default=-1)
    anchor = text.lower().rfind("final answer is")  # Minerva's "The final answer is $x$."
    if anchor > box_end:  # whichever comes last: a box, or "final answer is"
        m = _FINAL_RE.match(text, anchor + len("final answer is"))
        found = next((g for g in m.groups() if g), None) if m else None
        if found and found.strip(" .") and not _has_prose(found):
            return found.strip(" .")
    if box is not None:
        return box
    start = _number_boundary(text, max(0, len(text) - MAX_PARSE_CHARS))
    if (text.count("$", 0, start) - text.count("\\$", 0, start)) % 2:
        start = max(text.rfind("$", 0, start), 0)  # do not start inside $...$
    window = text[start:]
    tail = _clean(window)
    last = None
    for m in _NUMBER_RE.finditer(tail):
        last = m
    segments = [seg for seg in _segments(window) if seg[2] and not _has_prose(seg[2])]
    raw_last = None
    for m in _NUMBER_RE.finditer(window):
        raw_last = m
    if segments and (raw_last is None or segments[-1][1] >= raw_last.end()):
        return segments[-1][2]  # "so $x \\geq 5$ is the answer": the last math of the text
    if last is None and start > 0:  # nothing near the end: the last number further back, raw
        tail, last = text, _last_match(text)
    if last is None or _value_of(last) is None:
        return None
    before, after = tail[:last.start()].rstrip(), tail[last.end():].lstrip()
    if (before and before[-1] in _OPERATOR_CHARS) or (after and after[0] in _OPERATOR_CHARS):
        return None  # an operand: "2 + 2" does not answer 2
    if is_hedged(tail[tail.rfind("\n", 0, last.start()) + 1:]):
        return None
    return last.group(0).strip()


def _number_boundary(text: str, start: int) -> int:
    """``start`` moved past a number it would cut in two (at most 80 characters on)."""
    end = min(len(text), start + 80)
    while 0 < start < end and (text[start - 1].isdigit() or text[start - 1] in ",."):
        start += 1
    return start


def _last_match(text: str) -> re.Match | None:
    """The last _NUMBER_RE match, searching windows that grow from the end (linear)."""
    size = 8 * MAX_PARSE_CHARS
    while True:
        start = _number_boundary(text, max(0, len(text) - size))
        last = None
        for m in _NUMBER_RE.finditer(text, start):
            last = m
        if last is not None or start == 0:
            return last
        size *= 8


# --- golds ----------------------------------------------------------------------------

def gold_problem(gold: Any, domain: Any = "math") -> str | None:
    r"""Why the checker cannot score ``gold`` under ``domain``'s rule, or None if it can.

    >>> [gold_problem(g) for g in ["1,234", "\\frac{\\sqrt{3}}{2}", "odd", "1 + 1 = 42", " "]]
    [None, None, None, 'gold answer contradicts itself', 'empty gold answer']
    >>> gold_problem("\\frac{1}{", "math"), gold_problem("Paris", "general")
    ('gold answer is not parseable math', None)
    """
    text = _answer_text(gold)
    if text is None:
        return "empty gold answer"
    a = read_answer(text, domain)
    if a.kind == "text":
        return None if a.key[1] else "empty gold answer"
    if a.kind == "invalid":
        return "gold answer contradicts itself"
    if a.kind == "math":
        if a.latex is None:
            return "gold answer too long or complex for the checker"
        if not _KEY_ONLY_RE.search(a.latex) and _sympy_of(f"L:{a.latex}") is None:
            return "gold answer is not parseable math"
    return None


def _warn_once(key: str, message: str, exc_info: bool = False) -> None:
    if key not in _WARNED:
        _WARNED.add(key)
        _log.warning("reasonkit.answers %s: %s", key, message, exc_info=exc_info)
