r"""Answer extraction and GRPO reward functions in Tunix's signature.

Every reward is a plain function ``fn(prompts, completions, **kwargs) -> list[float]``
that returns one Python float per completion. Gold answers arrive as
``kwargs["answer"]`` and other dataset columns (``domain``) as other keyword
arguments. Tunix sums the rewards unweighted and logs each one as
``rewards/<fn.__name__>``; :func:`weighted` rescales one and keeps a readable name.

The five math rewards on four completions for the question "6 * 7?" (gold ``42``):

>>> completions = [
...     "<reasoning>6 * 7 = 42.</reasoning>\n<answer>42</answer><end_of_turn>",  # right
...     "<reasoning>6 * 7 = 40.</reasoning>\n<answer>40</answer>",                # close
...     "<reasoning>6 * 7 = 42.</reasoning>\n<answer>41 or 42</answer>",          # hedged
...     "6 * 7 = 42",                                                            # no tags
... ]
>>> for fn in MATH_REWARDS:
...     print(f"{fn.__name__:15}", [round(r, 2) for r in fn(None, completions, answer=["42"] * 4)])
format_exact    [3.0, 3.0, 3.0, 0.0]
format_approx   [2.0, 2.0, 2.0, 0.0]
answer_correct  [3.0, 0.0, 0.0, 0.0]
answer_close    [1.5, 0.79, 0.0, 0.0]
numeric_backup  [0.0, 0.0, 0.0, 1.5]

Parsing is built on ``str.count`` / ``str.find`` and regular expressions whose
repetitions cannot overlap, so a 100 KB degenerate completion scores in milliseconds.
LaTeX and number clean-up only runs on strings of at most ``MAX_PARSE_CHARS``
characters: a real final answer is short. No reward raises on a model output; the
one error is a programming error, a missing ``answer`` column.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import numbers
import re
import unicodedata
from fractions import Fraction
from typing import Any, Callable, Sequence

from reasonkit.config import DOMAINS
from reasonkit.data import (
    ANSWER_END,
    ANSWER_START,
    END_OF_TURN,
    REASONING_END,
    REASONING_START,
)

__all__ = [
    "FAILURE_REASONS", "Extraction", "extract_answer", "normalize_number", "normalize_text",
    "check_answer", "numeric_closeness", "has_exact_format", "reasoning_quality", "format_exact",
    "format_approx", "answer_correct", "answer_close", "numeric_backup", "multi_domain", "weighted",
    "MATH_REWARDS",
]

EOS = "<eos>"  # Gemma's end of sequence, tolerated after the answer like <end_of_turn>
TAGS = (REASONING_START, REASONING_END, ANSWER_START, ANSWER_END)

# Why a completion has no usable answer. Evaluation counts these; keep the list short.
FAILURE_REASONS = (
    "no_answer_tag",         # neither <answer> nor </answer> anywhere
    "unclosed_tag",          # <answer> never closed, or </answer> without (or before) <answer>
    "multiple_answer_tags",  # more than one <answer> or </answer>, nested ones included
    "nested_tags",           # a reasoning tag inside the answer, or the answer inside reasoning
    "text_after_answer",     # anything but whitespace, <end_of_turn> or <eos> after </answer>
    "empty_answer",          # only whitespace between the tags
    "hedged",                # several values offered: "41 or 42", "either 3 or 4"
)

FORMAT_EXACT_SCORE = 3.0
FORMAT_TAG_SCORE = 0.5       # format_approx: per tag present once, minus this per extra copy
ANSWER_CORRECT_SCORE = 3.0
CLOSE_MAX_SCORE = 1.5        # answer_close peaks here, always strictly below answer_correct
CLOSE_TOLERANCE = 0.10       # relative error at which answer_close reaches 0
NUMERIC_BACKUP_SCORE = 1.5
# multi_domain weights: format, accuracy, reasoning quality, bonus (sum to 1).
MULTI_WEIGHTS = (0.4, 0.4, 0.1, 0.1)
REASONING_WORDS = (3, 512)   # a "reasonable" reasoning length, in words
MAX_PARSE_CHARS = 400        # longer strings are never a single number

_log = logging.getLogger(__name__)
_STRICT = False  # tests set True so that a bug raises instead of scoring 0.0
_WARNED: set[str] = set()


# --- extraction ----------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Extraction:
    """What :func:`extract_answer` found.

    ``answer`` is the stripped text of the single answer tag, or None when there is
    no usable answer; ``reason`` is ``"ok"`` or one of :data:`FAILURE_REASONS`;
    ``raw`` is the text inside the (first) answer tag when there is one.
    """

    answer: str | None
    reason: str
    raw: str | None = None

    @property
    def ok(self) -> bool:
        return self.reason == "ok"


def extract_answer(completion: Any) -> Extraction:
    r"""The text of the one ``<answer>`` tag, or None and why not.

    >>> extract_answer("<reasoning>6 * 7</reasoning><answer> 42 </answer><end_of_turn>")
    Extraction(answer='42', reason='ok', raw=' 42 ')
    >>> for c in ["The answer is 42.", "<answer>42", "<answer>4</answer><answer>2</answer>",
    ...           "<answer>42</answer> I think.", "<answer> </answer>",
    ...           "<answer>41 or 42</answer>", "<answer><reasoning>42</reasoning></answer>"]:
    ...     print(extract_answer(c).reason)
    no_answer_tag
    unclosed_tag
    multiple_answer_tags
    text_after_answer
    empty_answer
    hedged
    nested_tags
    """
    text = _as_text(completion)
    n_open, n_close = text.count(ANSWER_START), text.count(ANSWER_END)
    if n_open == 0 and n_close == 0:
        return Extraction(None, "no_answer_tag")
    if n_open > 1 or n_close > 1:
        return Extraction(None, "multiple_answer_tags")
    start, end = text.find(ANSWER_START), text.find(ANSWER_END)
    if n_open != n_close or end < start:
        raw = text[start + len(ANSWER_START):] if start >= 0 else None
        return Extraction(None, "unclosed_tag", raw)
    raw = text[start + len(ANSWER_START):end]
    after = end + len(ANSWER_END)
    opened = text.rfind(REASONING_START, 0, start)  # a reasoning block still open at <answer>
    inside = (opened >= 0 and text.find(REASONING_END, opened, start) < 0
              and text.find(REASONING_END, after) >= 0)
    if inside or REASONING_START in raw or REASONING_END in raw:
        return Extraction(None, "nested_tags", raw)
    if not _only_end_markers(text, after):
        return Extraction(None, "text_after_answer", raw)
    answer = raw.strip()
    if not answer:
        return Extraction(None, "empty_answer", raw)
    if _is_hedged(answer):
        return Extraction(None, "hedged", raw)
    return Extraction(answer, "ok", raw)


def has_exact_format(completion: Any) -> bool:
    r"""True for one non-empty reasoning block, then one non-empty answer block, then nothing.

    Whitespace may surround the blocks; ``<end_of_turn>`` and ``<eos>`` may follow.

    >>> has_exact_format("<reasoning>2 + 2 = 4</reasoning>\n<answer>4</answer><end_of_turn>")
    True
    >>> has_exact_format("<answer>4</answer><reasoning>2 + 2 = 4</reasoning>")
    False
    """
    text = _as_text(completion)
    if any(text.count(tag) != 1 for tag in TAGS):
        return False
    r0, r1, a0, a1 = (text.find(tag) for tag in TAGS)
    if not r0 < r1 < a0 < a1:
        return False
    reasoning = text[r0 + len(REASONING_START):r1]
    between = text[r1 + len(REASONING_END):a0]
    answer = text[a0 + len(ANSWER_START):a1]
    return (not text[:r0].strip() and not between.strip() and bool(reasoning.strip())
            and bool(answer.strip()) and _only_end_markers(text, a1 + len(ANSWER_END)))


def _reasoning_of(text: str) -> str | None:
    """The text inside the single reasoning block, or None."""
    if text.count(REASONING_START) != 1 or text.count(REASONING_END) != 1:
        return None
    r0, r1 = text.find(REASONING_START), text.find(REASONING_END)
    return text[r0 + len(REASONING_START):r1] if r0 < r1 else None


# Whitespace, <end_of_turn> and <eos>, one at a time: no nested quantifier, linear time.
_TAIL_RE = re.compile(r"(?:\s|" + re.escape(END_OF_TURN) + "|" + re.escape(EOS) + r")*")


def _only_end_markers(text: str, pos: int) -> bool:
    return _TAIL_RE.fullmatch(text, pos) is not None


_HEDGE_RE = re.compile(
    r"\b(?:or|either|maybe|perhaps|possibly|probably|between|not sure|unsure)\b", re.IGNORECASE)


def _is_hedged(text: str) -> bool:
    """A hedge word together with at least two different numbers ("41 or 42")."""
    if not _HEDGE_RE.search(text):
        return False
    spellings, values = set(), set()
    for m in _NUMBER_RE.finditer(_clean_math(text) if len(text) <= MAX_PARSE_CHARS else text):
        if m.group(0) not in spellings:  # a long answer may repeat one number thousands of times
            spellings.add(m.group(0))
            values.add(_value_of(m)[0])
            if len(values) >= 2:
                return True
    return False


# --- numbers -------------------------------------------------------------------------

# 1,234,567 | 1234 | 12.5 | 1.5e3 | .5  -- every repetition starts with a fixed character.
_UNSIGNED = r"(?:(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?|\.\d+)"
_NUMBER_RE = re.compile(
    r"(?<![A-Za-z_.\d])(?P<sign>[-+]?)(?P<num>" + _UNSIGNED + r")"
    r"(?:[ \t]?/[ \t]?(?P<den>" + _UNSIGNED + r"))?"
    r"(?P<pct>[ \t]?(?:%|[Pp]ercent\b))?")
_PLAIN_RE = re.compile(r"[-+]?\d+(?:\.\d+)?")
_WRAPPERS = ("\\boxed", "\\fbox", "\\text", "\\textbf", "\\textrm", "\\textit", "\\mathrm",
             "\\mathbf", "\\mbox", "\\operatorname")
_FRACS = ("\\dfrac", "\\tfrac", "\\cfrac", "\\frac")
_REPLACEMENTS = (
    ("\\\\", " "), ("\\$", ""), ("$", ""), ("\\%", "%"), ("{,}", ","), ("\\,", ""),
    ("\\!", ""), ("\\;", " "), ("\\:", " "), ("\\ ", " "), ("\\(", ""), ("\\)", ""),
    ("\\[", ""), ("\\]", ""), ("^{\\circ}", ""), ("^\\circ", ""), ("°", ""),
    ("\\approx", "="), ("≈", "="), ("€", ""), ("£", ""), ("¥", ""), ("₹", ""),
    ("\u2212", "-"), ("\u2013", "-"), ("\u2014", "-"),
)
# 3 \times 10^{8}, 3 x 10^8 -> 3e8 (before powers, or 10^8 would become a second number);
# a letter x counts as "times" only right after a digit ("max 10^9" stays 10^9).
_SCI_RE = re.compile(r"[ \t]*(?:\\times|\\cdot|×|·|\*|(?:(?<=\d)|(?<=\d[ \t]))[xX])[ \t]*10[ \t]*"
                     r"\^[ \t]*\{?[ \t]*([-+]?\d{1,3})[ \t]*\}?")
_POWER_RE = re.compile(r"(?<![\w.])(\d{1,6})\^\{?([-+]?\d{1,2})\}?")
_UNIT_POWER_RE = re.compile(r"(?<=[^\W\d_])(?:\^\{?[-+]?\d{1,2}\}?|[⁻¹²³⁴⁵⁶⁷⁸⁹⁰]+)")
_DIGIT_GROUP_RE = re.compile(r"(?<=\d)[\u2009\u202f\u00a0'’](?=\d{3}(?!\d))")
_COMMAND_RE = re.compile(r"\\([A-Za-z]+)")
_HARMLESS_COMMANDS = {"left", "right", "displaystyle", "textstyle", "quad", "qquad", "big",
                      "Big", "bigl", "bigr", "mathit", "rm", "bf", "it", "mathbb"}
# Left after clean-up, these mean the answer is symbolic, not one number.
_SYMBOLIC = ("\\", "^", "π", "√", "∞", "±", "∓", "²", "³")
_SYMBOLIC_WORD_RE = re.compile(r"\b(?:sqrt|root|log|ln|sin|cos|tan|exp|pi|inf|infinity)\b",
                               re.IGNORECASE)
_Value = tuple[Fraction, bool]  # (value, written with a percent sign)


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


def _fracs(t: str) -> str:
    r"""``\frac{a}{b}`` -> ``a/b`` (``(a)/(b)`` when a or b is not a plain number)."""
    for command in _FRACS:
        i = t.find(command)
        while i >= 0:
            a, j = _braced(t, i + len(command))
            b, j = _braced(t, j) if a is not None else (None, j)
            if a is None or b is None:
                t = t[:i] + t[i + len(command):]
            else:
                a, b = a.strip(), b.strip()
                plain = _PLAIN_RE.fullmatch(a) and _PLAIN_RE.fullmatch(b)
                t = t[:i] + (f"{a}/{b}" if plain else f"({a})/({b})") + t[j:]
            i = t.find(command, i)
    return t


def _power(m: re.Match) -> str:
    base, exp = int(m.group(1)), int(m.group(2))
    if base == 0 and exp < 0:
        return m.group(0)
    value = Fraction(base) ** exp
    return str(value) if len(str(value)) <= 40 else m.group(0)


def _clean_math(text: str) -> str:
    """Strip LaTeX, currency and digit grouping so that only numbers and words remain."""
    t = _ascii_digits(text)
    t = _fracs(_unwrap(t, _WRAPPERS))
    for old, new in _REPLACEMENTS:
        t = t.replace(old, new)
    t = _SCI_RE.sub(r"e\1", t)
    t = _POWER_RE.sub(_power, t)
    t = _UNIT_POWER_RE.sub("", t)
    t = _DIGIT_GROUP_RE.sub("", t)
    t = _COMMAND_RE.sub(lambda m: " " if m.group(1) in _HARMLESS_COMMANDS else m.group(0), t)
    return t.replace("{", "").replace("}", "")


def _decimal(s: str) -> Fraction | None:
    s = _ascii_digits(s).replace(",", "")
    exponent = s.lower().partition("e")[2]
    if exponent and abs(int(exponent)) > 300:
        return None
    return Fraction(s)


def _value_of(m: re.Match) -> tuple[Fraction | None, bool]:
    """A _NUMBER_RE match as (value, or None if unreadable; written with a percent sign?)."""
    value = None
    if len(m.group(0)) <= 64:
        value = _decimal(m.group("num"))
        if value is not None and m.group("den") is not None:
            den = _decimal(m.group("den"))
            value = value / den if den else None
        if value is not None and m.group("sign") == "-":
            value = -value
    return value, m.group("pct") is not None


def _numbers(text: str) -> list[tuple[Fraction | None, bool]]:
    """Every number in ``text`` in order (short texts: each one costs a Fraction)."""
    return [_value_of(m) for m in _NUMBER_RE.finditer(text)]


def _single_number(text: str | None) -> _Value | None:
    """The one numeric value in a short answer ("$1,234", "x = 5", "42 apples"), or None.

    None when there is no number, several different ones, or a symbolic part (pi, a root,
    a power that is not a unit exponent).
    """
    if text is None or len(text) > MAX_PARSE_CHARS:
        return None
    t = _clean_math(text)
    if t.count("=") == 1:  # "x = 5", "6 * 7 = 42": the value is on the right
        t = t.split("=", 1)[1]
    if any(s in t for s in _SYMBOLIC) or _SYMBOLIC_WORD_RE.search(t):
        return None
    values = _numbers(t)
    if not values or any(v is None for v, _ in values) or len({v for v, _ in values}) != 1:
        return None
    return values[0][0], any(pct for _, pct in values)


def _candidates(value: _Value) -> tuple[Fraction, ...]:
    """A percent is read both ways: "50%" may mean 50 or 0.5."""
    v, pct = value
    return (v, v / 100) if pct else (v,)


def _same_number(a: _Value | None, b: _Value | None) -> bool:
    if a is None or b is None:
        return False
    return any(x == y for x in _candidates(a) for y in _candidates(b))


def _relative_error(pred: _Value, gold: _Value) -> Fraction:
    """|pred - gold| / |gold| (absolute error when gold is 0), best over percent readings."""
    return min(abs(p - g) / abs(g) if g else abs(p)
               for p in _candidates(pred) for g in _candidates(gold))


def numeric_closeness(predicted: Any, gold: Any, tolerance: float = CLOSE_TOLERANCE) -> float:
    r"""``1 - rel_err / tolerance`` for a number near a numeric gold, in [0, 1]; else 0.

    ``rel_err`` is :func:`answer_close`'s: relative to the gold (absolute when the gold is
    0), with a percent read both ways. 0 at or beyond ``tolerance`` or without a single
    number on both sides. Evaluation's partial accuracy uses the same number.

    >>> [round(numeric_closeness(p, "50"), 3) for p in ["50", "48", "$46", "45", "x"]]
    [1.0, 0.6, 0.2, 0.0, 0.0]
    >>> round(numeric_closeness("49%", "0.5"), 3), numeric_closeness("0.05", "0")
    (0.8, 0.5)
    """
    pred_value, gold_value = _single_number(_gold_text(predicted)), _single_number(_gold_text(gold))
    if pred_value is None or gold_value is None:
        return 0.0
    limit = Fraction(tolerance)
    err = _relative_error(pred_value, gold_value)
    return 1.0 - float(err / limit) if err < limit else 0.0


def normalize_number(s: Any) -> float | None:
    r"""The single number a short answer states, as a float, or None.

    Handles thousands separators, currency signs, unit words, percent signs (the number
    before the sign is returned), decimals, fractions, signs, unicode digits and LaTeX
    ``\boxed{}`` / ``\frac{}{}``. Several different numbers ("41 or 42") give None.

    >>> [normalize_number(s) for s in ["$1,234.50", "42 apples", "\\boxed{\\frac{1}{2}}",
    ...                                 "-3 km", "50%", "x = 7", "٤٢", "41 or 42", "pi"]]
    [1234.5, 42.0, 0.5, -3.0, 50.0, 7.0, 42.0, None, None]
    """
    value = _single_number(_gold_text(s))
    if value is None:
        return None
    try:
        out = float(value[0])
    except OverflowError:
        return None
    return out if math.isfinite(out) else None


# Signed decimals stay one token ("-3.5"); everything else splits on non-alphanumerics.
_TEXT_TOKEN_RE = re.compile(r"(?<![^\W\d_])-?\d+(?:\.\d+)*|[^\W_]+")


def normalize_text(s: Any) -> str:
    r"""Lower case, LaTeX wrappers and punctuation removed, whitespace collapsed.

    Lists compare item by item, whatever separates them.

    >>> normalize_text("  The Eiffel Tower!  ")
    'the eiffel tower'
    >>> normalize_text("[1, 2, -3.5]") == normalize_text("1 2 -3.5") == "1 2 -3.5"
    True
    >>> normalize_text("\\boxed{\\text{Paris}}")
    'paris'
    """
    text = _as_text(s)
    if len(text) <= MAX_PARSE_CHARS:
        text = _unwrap(text, _WRAPPERS)
    text = unicodedata.normalize("NFKC", text).casefold()
    return " ".join(_TEXT_TOKEN_RE.findall(text))


def _bare_number(text: str) -> _Value | None:
    """Like _single_number, but the text must be nothing but the number."""
    if len(text) > MAX_PARSE_CHARS:
        return None
    t = _clean_math(text).strip().rstrip(".").strip()
    return _single_number(t) if _NUMBER_RE.fullmatch(t) else None


def check_answer(domain: Any, predicted: Any, gold: Any) -> bool:
    r"""Whether an extracted answer matches the gold answer under ``domain``'s rule.

    math, science: numbers compare by value (units ignored, "x = 5" reads as 5); a
    non-numeric gold compares as text. coding, instruction, summarization, general
    (and unknown domains): :func:`normalize_text` equality, so case, whitespace,
    punctuation and list separators do not matter; two bare numbers compare by value.
    A hedged answer ("3 or 4") or a missing gold (None, NaN, "") never matches.

    >>> check_answer("math", "$1,000", "1000"), check_answer("science", "9.8 m/s^2", "9.8")
    (True, True)
    >>> check_answer("coding", "[1, 2, 3]", "1 2 3"), check_answer("general", "paris.", "Paris")
    (True, True)
    >>> check_answer("math", "41 or 42", "42"), check_answer("math", "42", float("nan"))
    (False, False)
    """
    pred, ref = _gold_text(predicted), _gold_text(gold)
    if pred is None or ref is None or _is_hedged(pred):
        return False
    if _domain(domain) in ("math", "science"):
        gold_value = _single_number(ref)
        if gold_value is not None:
            return _same_number(_single_number(pred), gold_value)
        return _texts_match(pred, ref)
    if _texts_match(pred, ref):
        return True
    return _same_number(_bare_number(pred), _bare_number(ref))


def _texts_match(pred: str, gold: str) -> bool:
    ref = normalize_text(gold)
    return bool(ref) and normalize_text(pred) == ref


_STEP_RE = re.compile(r"\d|[=+*/×÷<>-]|\b(?:step|first|then|next|so|therefore|thus|because|"
                      r"since|hence|finally)\b", re.IGNORECASE)


def reasoning_quality(reasoning: Any, answer: Any = None) -> float:
    """A heuristic score in [0, 1] for a reasoning trace: four checks worth 0.25 each.

    Empty or missing reasoning scores 0. Otherwise: (1) a reasonable length,
    ``REASONING_WORDS`` words; (2) it shows work: a number, an operator or a step word
    ("then", "so", "because"); (3) it is not just the answer repeated; (4) it converges:
    the answer appears in it (word for word after :func:`normalize_text`).

    >>> reasoning_quality("6 * 7 = 42, so the answer is 42.", "42")
    1.0
    >>> reasoning_quality("42", "42"), reasoning_quality("", "42"), reasoning_quality("hmm ok")
    (0.5, 0.0, 0.25)
    """
    text = _as_text(reasoning)
    if not text.strip():
        return 0.0
    n_words = len(text.split())
    norm = normalize_text(text)
    ans = normalize_text(answer) if answer is not None else ""
    checks = (
        REASONING_WORDS[0] <= n_words <= REASONING_WORDS[1],
        _STEP_RE.search(text) is not None,
        norm != ans,
        bool(ans) and f" {ans} " in f" {norm} ",
    )
    return sum(checks) / len(checks)


# --- rewards -------------------------------------------------------------------------

def format_exact(prompts: Any, completions: Sequence[Any], **kwargs: Any) -> list[float]:
    r"""3.0 for exactly one reasoning block followed by exactly one answer block, else 0.

    Only whitespace may surround them; ``<end_of_turn>`` and ``<eos>`` may follow.

    >>> format_exact(None, [
    ...     "<reasoning>6 * 7 = 42</reasoning>\n<answer>42</answer><end_of_turn>",  # ok
    ...     "<reasoning>6 * 7 = 42</reasoning><answer>42</answer> Done!",          # text after
    ...     "<answer>42</answer>",                                                 # no reasoning
    ... ])
    [3.0, 0.0, 0.0]
    """
    return _score(format_exact, completions,
                  lambda text: FORMAT_EXACT_SCORE if has_exact_format(text) else 0.0)


def format_approx(prompts: Any, completions: Sequence[Any], **kwargs: Any) -> list[float]:
    r"""+0.5 per tag present exactly once, -0.5 per extra copy of a tag, clamped to [-2, 2].

    The four tags are ``<reasoning>``, ``</reasoning>``, ``<answer>``, ``</answer>``.

    >>> format_approx(None, [
    ...     "<reasoning>r</reasoning><answer>a</answer>",      # 4 tags once:   4 * 0.5
    ...     "<reasoning>r</reasoning> a",                      # 2 tags once:   2 * 0.5
    ...     "<answer>a</answer><answer>b</answer>",            # 2 tags twice: -2 * 0.5
    ...     "<answer>" * 10,                                   # 9 extra copies, clamped
    ... ])
    [2.0, 1.0, -1.0, -2.0]
    """
    def score(text: str) -> float:
        total = 0.0
        for tag in TAGS:
            n = text.count(tag)
            total += FORMAT_TAG_SCORE if n == 1 else -FORMAT_TAG_SCORE * max(n - 1, 0)
        return min(2.0, max(-2.0, total))

    return _score(format_approx, completions, score)


def answer_correct(prompts: Any, completions: Sequence[Any], **kwargs: Any) -> list[float]:
    r"""3.0 when the single answer tag matches the gold answer (:func:`check_answer`), else 0.

    The rule is the row's ``domain`` when that column exists, else "math". No credit for
    hedging, several answer tags, an unclosed tag, text after it or an answer outside it.

    >>> answer_correct(None, [
    ...     "<answer>$1,234.00</answer>",           # currency, separators, decimals
    ...     "<answer>\\boxed{1234}</answer>",       # LaTeX
    ...     "<answer>1234 or 1235</answer>",        # hedged
    ...     "The answer is 1234.",                  # outside the tag
    ... ], answer=["1234"] * 4)
    [3.0, 3.0, 0.0, 0.0]
    """
    golds = _column(kwargs, "answer", completions, "answer_correct")
    domains = _column(kwargs, "domain", completions, None)

    def score(text: str, gold: Any, domain: Any) -> float:
        found = extract_answer(text)
        rule = "math" if domain is None else domain
        return ANSWER_CORRECT_SCORE if found.ok and check_answer(rule, found.answer, gold) else 0.0

    return _score(answer_correct, completions, score, golds, domains)


def answer_close(prompts: Any, completions: Sequence[Any], *, tolerance: float = CLOSE_TOLERANCE,
                 **kwargs: Any) -> list[float]:
    r"""Partial credit ``1.5 * (1 - rel_err / tolerance)`` for a number near a numeric gold.

    ``rel_err = |answer - gold| / |gold|`` (the absolute error when the gold is 0); 0 at
    or beyond ``tolerance`` (10%), and 0 without a usable answer tag or a numeric gold.
    An exact answer also earns the maximum 1.5, so closer is never worse; the score is
    always strictly below answer_correct's 3.0.

    >>> answer_close(None, ["<answer>42</answer>", "<answer>40</answer>",
    ...                     "<answer>30</answer>", "<answer>forty</answer>"], answer=["42"] * 4)
    [1.5, 0.785714, 0.0, 0.0]
    """
    if not (isinstance(tolerance, numbers.Real) and not isinstance(tolerance, bool)
            and 0 < tolerance < math.inf):
        raise ValueError(f"answer_close: tolerance={tolerance!r} must be a positive number")
    tolerance = float(tolerance)
    golds = _column(kwargs, "answer", completions, "answer_close")

    def score(text: str, gold: Any) -> float:
        found = extract_answer(text)
        if not found.ok:
            return 0.0
        return round(CLOSE_MAX_SCORE * numeric_closeness(found.answer, gold, tolerance), 6)

    return _score(answer_close, completions, score, golds)


def numeric_backup(prompts: Any, completions: Sequence[Any], **kwargs: Any) -> list[float]:
    r"""1.5 when a completion without a usable answer tag ends on the gold number, else 0.

    Only for completions with no answer tag or an unclosed one (a cut-off generation);
    0 whenever the answer tag is usable or broken some other way, and 0 when the last line
    hedges ("41 or 42").

    >>> numeric_backup(None, [
    ...     "6 * 7 = 42",                  # no tag, last number right
    ...     "<answer>42",                  # unclosed, last number right
    ...     "42 is my guess, or 41",       # hedged
    ...     "<answer>42</answer>",         # usable tag: answer_correct's job
    ... ], answer=["42"] * 4)
    [1.5, 1.5, 0.0, 0.0]
    """
    golds = _column(kwargs, "answer", completions, "numeric_backup")

    def score(text: str, gold: Any) -> float:
        if extract_answer(text).reason not in ("no_answer_tag", "unclosed_tag"):
            return 0.0
        gold_value = _single_number(_gold_text(gold))
        last = _last_number(text)
        return NUMERIC_BACKUP_SCORE if _same_number(last, gold_value) else 0.0

    return _score(numeric_backup, completions, score, golds)


def _last_number(text: str) -> _Value | None:
    """The last number in a completion (None if its last line hedges or it is unreadable)."""
    start = max(0, len(text) - MAX_PARSE_CHARS)
    while 0 < start < len(text) and not text[start - 1].isspace():
        start += 1  # do not cut a number in two
    tail = text[start:]
    values = _numbers(_clean_math(tail))
    if not values:  # nothing near the end: the last match anywhere, without LaTeX clean-up
        last = None
        for match in _NUMBER_RE.finditer(text):
            last = match
        values = [_value_of(last)] if last is not None else []
    if not values or values[-1][0] is None or _is_hedged(tail[tail.rfind("\n") + 1:]):
        return None
    return values[-1][0], values[-1][1]


def multi_domain(prompts: Any, completions: Sequence[Any], **kwargs: Any) -> list[float]:
    r"""One score in [0, 1]: format 0.4 + accuracy 0.4 + reasoning quality 0.1 + bonus 0.1.

    Format: :func:`has_exact_format`. Accuracy: :func:`check_answer` under the row's
    ``domain`` (missing -> "general"). Reasoning quality: :func:`reasoning_quality`
    times 0.1. Bonus: all three perfect.

    >>> multi_domain(None, [
    ...     "<reasoning>6 * 7 = 42, so 42.</reasoning><answer>42</answer>",  # all perfect
    ...     "<reasoning>6 * 7 = 42, so 42.</reasoning><answer>41</answer>",  # wrong
    ...     "<reasoning>It is Paris.</reasoning><answer>paris</answer>",   # shows no step
    ...     "Paris",                                                         # no tags
    ... ], answer=["42", "42", "Paris", "Paris"], domain=["math", "math", "general", "general"])
    [1.0, 0.475, 0.875, 0.0]
    """
    golds = _column(kwargs, "answer", completions, "multi_domain")
    domains = _column(kwargs, "domain", completions, None)
    w_format, w_accuracy, w_quality, w_bonus = MULTI_WEIGHTS

    def score(text: str, gold: Any, domain: Any) -> float:
        well_formed = has_exact_format(text)
        found = extract_answer(text)
        correct = found.ok and check_answer(domain, found.answer, gold)
        quality = reasoning_quality(_reasoning_of(text), found.answer)
        bonus = well_formed and correct and quality >= 1.0
        total = w_format * well_formed + w_accuracy * correct + w_quality * quality
        return round(min(1.0, total + w_bonus * bonus), 6)

    return _score(multi_domain, completions, score, golds, domains)


def weighted(fn: Callable[..., list[float]], weight: float,
             name: str | None = None) -> Callable[..., list[float]]:
    """``fn`` with every score multiplied by ``weight``, named for Tunix's logs.

    >>> half = weighted(answer_correct, 0.5)
    >>> half.__name__, half(None, ["<answer>42</answer>"], answer=["42"])
    ('answer_correct_x0.5', [1.5])
    >>> weighted(format_exact, 2, name="format").__name__
    'format'
    """
    if not callable(fn):
        raise TypeError(f"weighted: fn={fn!r} must be a reward function "
                        "fn(prompts, completions, **kwargs), not its name or result")
    if not isinstance(weight, numbers.Real) or not math.isfinite(weight):
        raise ValueError(f"weighted: weight={weight!r} must be a finite number")
    weight = float(weight)
    label = name or f"{getattr(fn, '__name__', 'reward')}_x{weight:g}"

    def scaled(prompts: Any, completions: Sequence[Any], **kwargs: Any) -> list[float]:
        return [float(weight * r) for r in fn(prompts, completions, **kwargs)]

    scaled.__name__ = scaled.__qualname__ = label
    scaled.__doc__ = f"{label}: {getattr(fn, '__name__', 'reward')} times {weight:g}."
    scaled.__wrapped__ = fn  # type: ignore[attr-defined]
    return scaled


MATH_REWARDS = [format_exact, format_approx, answer_correct, answer_close, numeric_backup]


# --- plumbing ------------------------------------------------------------------------

def _as_text(x: Any) -> str:
    if x is None:
        return ""
    if isinstance(x, bytes):
        return x.decode("utf-8", "replace")
    return x if isinstance(x, str) else str(x)


def _as_list(completions: Any) -> list:
    if completions is None:
        return []
    if isinstance(completions, (str, bytes)):
        return [completions]
    return list(completions)


def _gold_text(g: Any) -> str | None:
    """A gold (or predicted) answer as stripped text; None when missing, empty or NaN."""
    if g is None:
        return None
    if isinstance(g, numbers.Number) and not isinstance(g, bool):
        try:
            if math.isnan(g):  # type: ignore[arg-type]
                return None
        except (TypeError, ValueError):
            pass
    text = _as_text(g).strip()
    return None if not text or text.lower() == "nan" else text


def _domain(d: Any) -> str:
    name = _as_text(d).strip().lower()
    return name if name in DOMAINS else "general"


def _column(kwargs: dict, key: str, completions: Sequence[Any], reward: str | None) -> list:
    """kwargs[key] as a list aligned with completions; ``reward`` set means required."""
    n = len(_as_list(completions))
    values = kwargs.get(key)
    if values is None:
        if reward is not None:
            raise ValueError(
                f"{reward} needs the gold answers as the keyword argument {key!r} (a dataset "
                f"column named {key!r}); got keyword arguments {sorted(kwargs)}")
        return [None] * n
    if isinstance(values, (str, bytes)):
        return [values] * n
    try:
        values = list(values)
    except TypeError:  # a scalar, e.g. a 0-d numpy array
        return [values] * n
    if len(values) != n:
        _warn_once(f"{reward or key}:length", f"{len(values)} values of {key!r} for {n} "
                   "completions; rows without one score 0")
        values = (values + [None] * n)[:n]
    return values


def _score(reward: Callable, completions: Sequence[Any], score: Callable[..., float],
           *columns: list) -> list[float]:
    """Apply ``score(text, *row)`` to every completion; a bug scores 0.0 instead of raising."""
    out = []
    for i, completion in enumerate(_as_list(completions)):
        try:
            value = float(score(_as_text(completion), *(column[i] for column in columns)))
        except Exception:
            if _STRICT:
                raise
            _warn_once(reward.__name__, "raised on a completion; scored 0.0", exc_info=True)
            value = 0.0
        out.append(value if math.isfinite(value) else 0.0)
    return out


def _warn_once(key: str, message: str, exc_info: bool = False) -> None:
    if key not in _WARNED:
        _WARNED.add(key)
        _log.warning("reasonkit.rewards %s: %s", key.split(":")[0], message, exc_info=exc_info)
