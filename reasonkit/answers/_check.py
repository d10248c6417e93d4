r"""The checker's decisions: read an answer, compare it with the gold, find it in free text.

:func:`read_answer` reads an answer under its domain's rule (a number, math, text, an
equation that contradicts itself, or nothing), :func:`check_answer` compares two of them
(numbers by exact value, math through sympy, text as :func:`~reasonkit.answers._text.normalize_text`),
and :func:`closeness`, :func:`normalize_number`, :func:`canonical` and
:func:`gold_problem` answer the other questions the data filters, the rewards and
evaluation ask. :func:`final_answer`, :func:`boxed_answer` and :func:`is_hedged` read free
text. Every public function here takes any input and never raises: a bug reads as "no
answer" (logged once), unless :func:`strict` is on, as in the tests.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import math
import re
from fractions import Fraction
from typing import Any, Hashable, Iterator

from reasonkit.answers._numeric import (
    _INVALID,
    _NUM,
    _NUMBER_RE,
    _candidates,
    _read_number,
    _same_value,
    _value_of,
)
from reasonkit.answers._symbolic import (
    _BUDGET,
    _EQUALS_RE,
    _KEY_ONLY_RE,
    _is_closed,
    _items,
    _labelled,
    _math_latex,
    _symbolic,
    _sympy_of,
    _value_side,
)
from reasonkit.answers._text import (
    MAX_PARSE_CHARS,
    _answer_text,
    _box_run,
    _boxes,
    _clean,
    _compact,
    _has_prose,
    _segments,
    normalize_text,
)
from reasonkit.template import as_text

__all__ = [
    "NUMERIC_DOMAINS", "Answer", "read_answer", "canonical", "check_answer", "closeness",
    "normalize_number", "is_hedged", "boxed_answer", "final_answer", "gold_problem", "strict",
]

NUMERIC_DOMAINS = ("math", "science")  # the rest compare as normalised text

_log = logging.getLogger("reasonkit.answers")
_STRICT = False  # set by strict(): a bug raises instead of reading as "no answer"
_WARNED: set[str] = set()


@contextlib.contextmanager
def strict(on: bool = True) -> Iterator[None]:
    """Within the block, a bug inside the checker raises instead of reading as "no answer".

    Every public function of the checker catches what it raises (a bad answer must never
    stop training) and logs it once; tests turn that off so that a bug shows. The flag is
    the process's, read at each call, not the thread's (Tunix computes rewards in a worker
    thread); the block restores the flag it found.

    >>> with strict():
    ...     check_answer("math", "2 + 2", "4")
    True
    """
    global _STRICT
    outer, _STRICT = _STRICT, bool(on)
    try:
        yield
    finally:
        _STRICT = outer


def _is_numeric_domain(domain: Any) -> bool:
    return as_text(domain).strip().lower() in NUMERIC_DOMAINS


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

_HEDGE_RE = re.compile(
    r"\b(?:or|either|maybe|perhaps|possibly|probably|between|not sure|unsure)\b", re.IGNORECASE)


def is_hedged(text: Any) -> bool:
    """A hedge word together with at least two different numbers ("41 or 42").

    >>> is_hedged("41 or 42"), is_hedged("either 3 or 4"), is_hedged("1/2 or 0.5"), is_hedged("maybe 42")
    (True, True, False, False)
    """
    try:
        text = as_text(text)
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
# the items before the last number of a comma-joined list: "0," of "0,111", "1,2," of "1,2,3"
_LIST_HEAD_RE = re.compile(r"(?<![\w.,])[-+]?(?:\d+(?:\.\d+)?,)+\Z")


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

    A comma that groups no thousands separates items (:mod:`reasonkit.answers`' comma rule), so the
    numbers it joins are one list, as :func:`check_answer` reads them:

    >>> final_answer("so it is 0,111."), final_answer("-2,1"), final_answer("we get 1,2,3")
    ('0,111', '-2,1', '1,2,3')
    """
    try:
        return _final_answer(as_text(text))
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
        return _box_run(as_text(text))
    except Exception:
        if _STRICT:
            raise
        return None


# "the answer is Tom", "Answer: red", "**Answer:** 12", "my answer would be 7": an answer stated
_STATED_RE = re.compile(r"\banswer\b\s*\**\s*(?:(?:is|was|would be|will be)\b\s*:?|:|=)\s*\**\s*",
                        re.IGNORECASE)
_SENTENCE_END_RE = re.compile(r"[.!?](?=\s|$)|\n")
_NEGATED_RE = re.compile(r"(?:not|never|neither|nor)\b", re.IGNORECASE)
_QUOTES = " \t\"'`*$“”‘’"


def lenient_answer(text: Any, domain: Any = "math") -> str | None:
    r"""The answer of free text (no tags), read leniently: :func:`final_answer`, or in the
    text domains a word answer the text states ("So the answer is Tom.", "Answer: red").

    The numeric domains read :func:`final_answer` alone. Elsewhere an answer stated after
    the last number wins: each "answer is X" / "answer: X" to the end of its sentence.
    Stated answers that disagree, hedge ("Tom or Dan", "maybe Tom") or deny ("not Tom")
    read as no answer: nothing is credited when the text is ambiguous. A number after the
    last statement, or a ``\boxed{}`` anywhere, leaves the reading to :func:`final_answer`;
    a statement mixing words and a number reads its number ("3 times" reads 3).

    ========================================  ==========  ==============
    text                                      domain      lenient_answer
    ========================================  ==========  ==============
    ``So the youngest is Cal. So the answer   general     ``Cal``
    is Cal.``
    ``Answer: red``                           general     ``red``
    ``apple 2, fig 1. So the answer is fig.`` general     ``fig``
    ``The answer is Tom or Dan.``             general     None
    ``The answer is Tom. No, the answer is    general     None
    Dan.``
    ``The answer is 12.``                     math        ``12``
    ``The answer is Tom.``                    math        None
    ========================================  ==========  ==============

    >>> [lenient_answer(t, "general") for t in ["So the youngest is Cal. So the answer is Cal.",
    ...      "Answer: red", "apple 2, fig 1. So the answer is fig.", "The answer is Tom or Dan.",
    ...      "The answer is Tom. No, the answer is Dan."]]
    ['Cal', 'red', 'fig', None, None]
    >>> lenient_answer("The answer is 12.", "math"), lenient_answer("The answer is Tom.", "math")
    ('12', None)
    >>> lenient_answer("peach 3. So the answer is 3 times.", "summarization")
    '3'
    """
    try:
        return _lenient_answer(as_text(text), domain)
    except Exception:
        if _STRICT:
            raise
        _warn_once("lenient_answer", "raised; no answer", exc_info=True)
        return None


def _stated(text: str) -> list[tuple[str, int]]:
    """Each stated answer and where its sentence ends; a statement that runs into the next
    one ("Answer: The final answer is 7") is only its lead-in and left out."""
    matches = list(_STATED_RE.finditer(text))
    out = []
    for m, after in zip(matches, [*matches[1:], None][:len(matches)], strict=True):
        end_m = _SENTENCE_END_RE.search(text, m.end())
        end = end_m.start() if end_m else len(text)
        if after is not None and after.start() < end:
            continue  # a lead-in: the next statement says it
        out.append((text[m.end():min(end, m.end() + 200)].strip(_QUOTES + ".,;:!?"), end))
    return out


def _lenient_answer(text: str, domain: Any) -> str | None:
    found = _final_answer(text)
    if _is_numeric_domain(domain):
        return found
    stated = _stated(text) if len(text) <= 8 * MAX_PARSE_CHARS else []
    if not stated or _final_answer(text[stated[-1][1]:]) is not None or _box_run(text) is not None:
        return found  # none stated, a number said after the last, or a box: the reading of before
    reads = []
    for answer, _ in stated:
        if not answer or _HEDGE_RE.search(answer) or _NEGATED_RE.match(answer):
            return None  # "Tom or Dan", "not Tom", nothing: ambiguous
        mixed = re.search(r"\d", answer) and re.search(r"[^\W\d_]", answer)
        reads.append(_final_answer(answer) if mixed else answer)
    if reads[-1] is None or any(r is None or not check_answer(domain, r, reads[-1]) for r in reads):
        return None  # the statements disagree
    return reads[-1]


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
    # The comma rule: numbers a bare comma joins that no thousands grouping explains
    # ("0,111", "3,5", "1,2,3") are one list, read whole as check_answer reads it.
    head = _LIST_HEAD_RE.search(tail, 0, last.start())
    start = head.start() if head else last.start()
    before, after = tail[:start].rstrip(), tail[last.end():].lstrip()
    if (before and before[-1] in _OPERATOR_CHARS) or (after and after[0] in _OPERATOR_CHARS):
        return None  # an operand: "2 + 2" does not answer 2
    if is_hedged(tail[tail.rfind("\n", 0, last.start()) + 1:]):
        return None
    return tail[start:last.end()].strip()


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
