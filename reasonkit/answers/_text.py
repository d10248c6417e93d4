r"""Answer text: coercion to text, normalised words, LaTeX clean-up, boxes and math segments.

The bottom of the checker: every other module of :mod:`reasonkit.answers` reads an
answer through these helpers. :func:`normalize_text` is how text answers compare (case,
punctuation and list separators do not matter); ``_clean`` strips LaTeX, currency and
digit grouping so that numbers, operators and words remain (``\frac{a}{b}`` becomes
``(a/b)``, ``10{,}000`` becomes ``10000``); ``_box_run`` and ``_segments`` find the
``\boxed{}`` answers and the ``$...$`` math of a sentence. Everything here is bounded:
texts longer than :data:`MAX_PARSE_CHARS` are never cleaned (the quadratic steps only
see short strings) and the scans are linear.
"""

from __future__ import annotations

import math
import numbers
import re
import unicodedata
from fractions import Fraction
from typing import Any, Sequence

from reasonkit.template import as_text

__all__ = ["MAX_PARSE_CHARS", "normalize_text"]

MAX_PARSE_CHARS = 400       # longer answers are never read as a number (a real one is short)


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
    text = as_text(x).strip()
    return None if not text or text.lower() == "nan" else text




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
    text = as_text(s)
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
    r"""``\frac{a}{b}`` -> ``(a/b)`` (``((a)/(b))`` unless plain numbers), one term whatever stands
    before it (``1 / \frac{1}{4}`` is 4); ``2\frac{1}{2}`` -> ``(2+1/2)``."""
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
                t = t[:i] + (f"({a}/{b})" if plain else f"(({a})/({b}))") + t[j:]
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


def _compact(s: str) -> str:
    """Without whitespace and a final period: LaTeX that differs only in spacing is one key."""
    return "".join(s.split()).rstrip(".")
