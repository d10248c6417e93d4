r"""GRPO reward functions in Tunix's signature, built on the one answer checker.

Every reward is a plain function ``fn(prompts, completions, **kwargs) -> list[float]``
that returns one Python float per completion. Gold answers arrive as
``kwargs["answer"]`` and other dataset columns (``domain``) as other keyword
arguments. Tunix sums the rewards unweighted and logs each one as
``rewards/<fn.__name__>``; :func:`weighted` rescales one and keeps a readable name.

The tags are read by :mod:`reasonkit.template` and answers judged by
:mod:`reasonkit.answers`, the same code the data filters and evaluation use: no reward
pays for an answer the checker calls wrong (``2 + 2`` for a gold of 2, ``1 + 1 = 42``
for 42, an expression with a variable for a number).

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

Tag parsing is linear in the completion's length and answers longer than
the checker's ``MAX_PARSE_CHARS`` are never read as numbers, so a 100 KB degenerate
completion scores in milliseconds; symbolic answers reach sympy only under a size cap
and a time limit, and each reward call's sympy work stops at ``_SYMBOLIC_BUDGET_SECONDS``
(answers left unjudged score 0 and count in ``SYMBOLIC_SKIPS``). No reward raises on a
model output; the one error is a programming error, a missing ``answer`` column.
"""

from __future__ import annotations

import collections
import logging
import math
import numbers
import re
from typing import Any, Callable, Sequence

import numpy as np

from reasonkit.answers import (
    check_answer,
    closeness,
    final_answer,
    is_hedged,
    normalize_text,
    supports,
    symbolic_budget,
)
from reasonkit.template import TAGS, Extraction, as_text, extract_answer, has_exact_format, reasoning_of

__all__ = [
    "reasoning_quality", "format_exact", "format_approx", "answer_correct", "answer_verified",
    "answer_close", "is_verified",
    "numeric_backup", "multi_domain", "weighted", "fading", "format_exact_fading", "format_approx_fading",
    "from_config", "extract", "is_correct", "verdict", "frac_zero_std",
    "reward_groups",
    "MATH_REWARDS",
    "BY_NAME",
    "SYMBOLIC_SKIPS",
]

_FORMAT_EXACT_SCORE = 3.0
_FORMAT_TAG_SCORE = 0.5       # format_approx: per tag present once, minus this per extra copy
ANSWER_CORRECT_SCORE = 3.0
CLOSE_MAX_SCORE = 1.5        # answer_close peaks here, always strictly below answer_correct
# answer_close reaches 0 at a relative error of 10%. GSM8K's golds are integers and MATH's
# exact, so no rounding is ever right (answers.check_answer); this is shaping for near misses.
_CLOSE_TOLERANCE = 0.10
_NUMERIC_BACKUP_SCORE = 1.5
# multi_domain weights: format, accuracy, reasoning quality, bonus (sum to 1).
_MULTI_WEIGHTS = (0.4, 0.4, 0.1, 0.1)
_REASONING_WORDS = (3, 512)   # a "reasonable" reasoning length, in words
# CPU seconds of uncached sympy work (parsing and comparing symbolic answers) one reward call
# may spend (answers.symbolic_budget); after it, an answer that only sympy could judge scores
# as wrong: never a false credit, but a right answer written in a new symbolic form can miss
# its reward (answers judged are judged exactly; the one in flight when the budget runs out
# is finished). Sized for the tiny preset's GRPO step, a few percent of it at most
# (docs/performance.md). Repeated answers are cached and closed
# forms of a clearly different value are rejected without sympy, so a realistic step never
# reaches it. A larger model's longer step affords more (set this module constant before
# training). Evaluation (evaluate.py) has no budget and stays exact.
_SYMBOLIC_BUDGET_SECONDS = 0.05
SYMBOLIC_SKIPS: collections.Counter = collections.Counter()  # reward name -> answers scored unjudged

_log = logging.getLogger(__name__)
_STRICT = False  # tests set True so that a bug raises instead of scoring 0.0
_WARNED: set[str] = set()


def extract(text: Any) -> Extraction:
    """The answer tag's text, as every reward and evaluation reads it: a hedge ("41 or 42") is no answer."""
    return extract_answer(text, hedged=is_hedged)


def is_correct(completion: Any, gold: Any, domain: Any = "math") -> bool:
    """Whether ``completion``'s single answer tag holds ``gold`` under ``domain``'s rule.

    The one verdict of right or wrong: :func:`answer_correct` pays for it, evaluation's
    accuracy counts it (:func:`reasonkit.evaluate.score`) and GRPO's held-out check
    measures it. A hedge, several answer tags or an answer outside the tag is wrong.

    >>> is_correct("<reasoning>6 * 7 = 42.</reasoning>\\n<answer>42</answer>", "42")
    True
    >>> is_correct("<answer>41 or 42</answer>", "42"), is_correct("The answer is 42.", "42")
    (False, False)
    """
    return verdict(extract(as_text(completion)), gold, domain)


def verdict(found: Extraction, gold: Any, domain: Any = "math") -> bool:
    """:func:`is_correct` on an answer tag already read (``found``), for a caller that reads
    it for more than the verdict (evaluation's score): the tag read once, judged one way."""
    return bool(found.ok and check_answer("math" if domain is None else domain, found.answer, gold))


def is_verified(completion: Any, gold: Any, domain: Any = "math") -> bool:
    r""":func:`is_correct`, and the reasoning supports the answer: its conclusion names
    it and its checkable steps hold (:func:`reasonkit.answers.supports`). A right
    answer after a wrong sum, or after a conclusion that names another, is not verified.

    >>> ok = "<reasoning>14 + 3 = 17. 2 * 6 = 12. 17 + 12 = 29.</reasoning>\n<answer>29</answer>"
    >>> lucky = "<reasoning>14 + 3 = 17. 2 * 6 = 13. 17 + 13 = 29.</reasoning>\n<answer>29</answer>"
    >>> is_verified(ok, "29"), is_verified(lucky, "29"), is_correct(lucky, "29")
    (True, False, True)
    """
    text = as_text(completion)
    return is_correct(text, gold, domain) and supports(reasoning_of(text), extract(text).answer)


# --- reasoning quality -----------------------------------------------------------------

_STEP_RE = re.compile(r"\d|[=+*/×÷<>-]|\b(?:step|first|then|next|so|therefore|thus|because|"
                      r"since|hence|finally)\b", re.IGNORECASE)


def reasoning_quality(reasoning: Any, answer: Any = None) -> float:
    """A heuristic score in [0, 1] for a reasoning trace: four checks worth 0.25 each.

    Empty or missing reasoning scores 0. Otherwise: (1) a reasonable length,
    ``_REASONING_WORDS`` words; (2) it shows work: a number, an operator or a step word
    ("then", "so", "because"); (3) it is not just the answer repeated; (4) it converges:
    the answer appears in it (word for word after :func:`normalize_text`).

    >>> reasoning_quality("6 * 7 = 42, so the answer is 42.", "42")
    1.0
    >>> reasoning_quality("42", "42"), reasoning_quality("", "42"), reasoning_quality("hmm ok")
    (0.5, 0.0, 0.25)
    """
    text = as_text(reasoning)
    if not text.strip():
        return 0.0
    n_words = len(text.split())
    norm = normalize_text(text)
    ans = normalize_text(answer) if answer is not None else ""
    checks = (
        _REASONING_WORDS[0] <= n_words <= _REASONING_WORDS[1],
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
                  lambda text: _FORMAT_EXACT_SCORE if has_exact_format(text) else 0.0)


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
            total += _FORMAT_TAG_SCORE if n == 1 else -_FORMAT_TAG_SCORE * max(n - 1, 0)
        return min(2.0, max(-2.0, total))

    return _score(format_approx, completions, score)


def answer_correct(prompts: Any, completions: Sequence[Any], **kwargs: Any) -> list[float]:
    r"""3.0 when the single answer tag is the gold answer (``answers.check_answer``), else 0.

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
    completions = _as_list(completions)  # once: an iterator is read once
    golds = _column(kwargs, "answer", completions, "answer_correct")
    domains = _column(kwargs, "domain", completions, None)

    def score(text: str, gold: Any, domain: Any) -> float:
        return ANSWER_CORRECT_SCORE if is_correct(text, gold, domain) else 0.0

    return _score(answer_correct, completions, score, golds, domains)


def answer_verified(prompts: Any, completions: Sequence[Any], **kwargs: Any) -> list[float]:
    r"""3.0 for a right answer its reasoning supports (:func:`is_verified`), else 0.

    :func:`answer_correct` with the reasoning checked too: it pays for reasoned answers,
    not lucky ones.

    >>> answer_verified(None, [
    ...     "<reasoning>13 - 2 = 11.</reasoning>\n<answer>11</answer>",  # right, reasoned
    ...     "<reasoning>13 - 2 = 7.</reasoning>\n<answer>11</answer>",   # right, a wrong step
    ...     "<reasoning>So it is 7.</reasoning>\n<answer>11</answer>",   # right, concludes 7
    ... ], answer=["11"] * 3)
    [3.0, 0.0, 0.0]
    """
    completions = _as_list(completions)
    golds = _column(kwargs, "answer", completions, "answer_verified")
    domains = _column(kwargs, "domain", completions, None)

    def score(text: str, gold: Any, domain: Any) -> float:
        return ANSWER_CORRECT_SCORE if is_verified(text, gold, domain) else 0.0

    return _score(answer_verified, completions, score, golds, domains)


def answer_close(prompts: Any, completions: Sequence[Any], *, tolerance: float = _CLOSE_TOLERANCE,
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
    completions = _as_list(completions)  # once: an iterator is read once
    golds = _column(kwargs, "answer", completions, "answer_close")

    def score(text: str, gold: Any) -> float:
        found = extract(text)
        if not found.ok:
            return 0.0
        return round(CLOSE_MAX_SCORE * closeness(found.answer, gold, tolerance), 6)

    return _score(answer_close, completions, score, golds)


def numeric_backup(prompts: Any, completions: Sequence[Any], **kwargs: Any) -> list[float]:
    r"""1.5 when a completion without a usable answer tag ends on the gold answer, else 0.

    Only for completions with no answer tag or an unclosed one (a cut-off generation),
    read leniently (``answers.final_answer``: the last ``\\boxed{}``, else the last
    number, not an operand); 0 whenever the answer tag is usable or broken some other
    way, and 0 when the last line hedges ("41 or 42"). The rule is the row's ``domain``
    when that column exists, else "math".

    >>> numeric_backup(None, [
    ...     "6 * 7 = 42",                  # no tag, last number right
    ...     "<answer>42",                  # unclosed, last number right
    ...     "42 is my guess, or 41",       # hedged
    ...     "the answer is 40 + 2",        # 2 is an operand, not an answer
    ...     "<answer>42</answer>",         # usable tag: answer_correct's job
    ... ], answer=["42"] * 5)
    [1.5, 1.5, 0.0, 0.0, 0.0]
    """
    completions = _as_list(completions)  # once: an iterator is read once
    golds = _column(kwargs, "answer", completions, "numeric_backup")
    domains = _column(kwargs, "domain", completions, None)

    def score(text: str, gold: Any, domain: Any) -> float:
        if extract(text).reason not in ("no_answer_tag", "unclosed_tag"):
            return 0.0
        final = final_answer(text)
        rule = "math" if domain is None else domain
        return _NUMERIC_BACKUP_SCORE if final is not None and check_answer(rule, final, gold) else 0.0

    return _score(numeric_backup, completions, score, golds, domains)


def multi_domain(prompts: Any, completions: Sequence[Any], **kwargs: Any) -> list[float]:
    r"""One score in [0, 1]: format 0.4 + accuracy 0.4 + reasoning quality 0.1 + bonus 0.1.

    Format: ``template.has_exact_format``. Accuracy: ``answers.check_answer`` under the
    row's ``domain`` (missing: the text rule of "general"). Reasoning quality: :func:`reasoning_quality`
    times 0.1. Bonus: all three perfect.

    >>> multi_domain(None, [
    ...     "<reasoning>6 * 7 = 42, so 42.</reasoning><answer>42</answer>",  # all perfect
    ...     "<reasoning>6 * 7 = 42, so 42.</reasoning><answer>41</answer>",  # wrong
    ...     "<reasoning>It is Paris.</reasoning><answer>paris</answer>",   # shows no step
    ...     "Paris",                                                         # no tags
    ... ], answer=["42", "42", "Paris", "Paris"], domain=["math", "math", "general", "general"])
    [1.0, 0.475, 0.875, 0.0]
    """
    completions = _as_list(completions)  # once: an iterator is read once
    golds = _column(kwargs, "answer", completions, "multi_domain")
    domains = _column(kwargs, "domain", completions, None)
    w_format, w_accuracy, w_quality, w_bonus = _MULTI_WEIGHTS

    def score(text: str, gold: Any, domain: Any) -> float:
        well_formed = has_exact_format(text)
        found = extract(text)
        correct = found.ok and check_answer(domain, found.answer, gold)
        quality = reasoning_quality(reasoning_of(text), found.answer)
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


def fading(fn: Callable[..., list[float]]) -> Callable[..., list[float]]:
    r"""A format reward that steps back as the format is learned: ``fn`` times ``1 - p``,
    ``p`` the share of the step's answers that already have the exact format.

    While few answers have the format, it pays nearly in full; once nearly all have it, it
    pays next to nothing, and the step's other rewards (the answer's) decide the
    advantages. Each call is one GRPO step's answers and nothing carries over between
    steps, so a resumed run scores a step as the first run did.

    >>> good = "<reasoning>2 + 2 = 4.</reasoning>\n<answer>4</answer>"
    >>> format_exact_fading(None, [good, good, good, "4"])  # 3 of 4 formatted: 3.0 x 0.25
    [0.75, 0.75, 0.75, 0.0]
    >>> format_exact_fading(None, [good, "4", "4", "4"])    # 1 of 4: 3.0 x 0.75
    [2.25, 0.0, 0.0, 0.0]
    >>> format_exact_fading(None, [good] * 4)               # learned: nothing left to pay
    [0.0, 0.0, 0.0, 0.0]
    """
    def stepping_back(prompts: Any, completions: Sequence[Any], **kwargs: Any) -> list[float]:
        completions = _as_list(completions)
        if not completions:
            return []
        missing = 1.0 - sum(has_exact_format(as_text(c)) for c in completions) / len(completions)
        return [float(missing * r) for r in fn(prompts, completions, **kwargs)]

    name = f"{getattr(fn, '__name__', 'reward')}_fading"
    stepping_back.__name__ = stepping_back.__qualname__ = name
    stepping_back.__wrapped__ = fn  # type: ignore[attr-defined]
    return stepping_back


format_exact_fading = fading(format_exact)
format_approx_fading = fading(format_approx)
MATH_REWARDS = [format_exact, format_approx, answer_correct, answer_close, numeric_backup]
# The reward functions GRPOConfig.rewards can name (a lookup of this module's functions).
BY_NAME = {fn.__name__: fn for fn in (*MATH_REWARDS, answer_verified, multi_domain,
                                      format_exact_fading, format_approx_fading)}


def from_config(pairs: Sequence[tuple[str, float]]) -> list[Callable[..., list[float]]]:
    """The functions ``GRPOConfig.rewards`` names, each with its weight, in its order.

    Weight 1 gives the function itself, logged by Tunix as ``rewards/<name>``; another
    weight :func:`weighted` (``rewards/<name>_x<weight>``); weight 0 logs a reward
    without training on it.

    >>> [fn.__name__ for fn in from_config([("format_exact", 1.0), ("answer_correct", 2.0),
    ...                                     ("answer_close", 0.0)])]
    ['format_exact', 'answer_correct_x2', 'answer_close_x0']
    >>> from_config([("format_exact", 1.0), ("answer_right", 1.0)])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: grpo.rewards[1]: unknown reward 'answer_right'; known: answer_close, answer_correct, ...
    """
    fns = []
    for i, (name, weight) in enumerate(pairs):
        if name not in BY_NAME:
            raise ValueError(f"grpo.rewards[{i}]: unknown reward {name!r}; known: "
                             f"{', '.join(sorted(BY_NAME))}")
        fn = BY_NAME[name]
        fns.append(fn if weight == 1 else weighted(fn, weight))
    return fns


# --- what a GRPO step's rewards can teach ----------------------------------------------

def frac_zero_std(rewards: Sequence[float], num_generations: int) -> float:
    """The fraction of prompt groups whose ``num_generations`` (G) rewards are all equal.

    Such a group has no spread, so every advantage in it is 0: it teaches nothing, however
    high its rewards (TRL logs this as ``frac_reward_zero_std``). ``rewards`` is a GRPO
    step's summed reward per answer, the G answers of a prompt side by side:

    >>> frac_zero_std([3.0, 3.0,    # group 0: both answers scored 3: no signal
    ...                0.0, 1.5,    # group 1
    ...                0.0, 0.0,    # group 2: no signal
    ...                2.0, 5.0],   # group 3
    ...               num_generations=2)
    0.5
    """
    groups = reward_groups(rewards, num_generations, "frac_zero_std")
    return float(np.mean(np.all(groups == groups[:, :1], axis=1)))


def reward_groups(rewards: Sequence[float], num_generations: int, caller: str) -> np.ndarray:
    """A GRPO step's rewards as ``[prompts, G]``, or a ValueError naming ``caller``.

    >>> reward_groups([1, 2, 3, 4], 2, "f").tolist()
    [[1.0, 2.0], [3.0, 4.0]]
    """
    scores = np.asarray(rewards, dtype=np.float64)
    if scores.ndim != 1 or not len(scores) or len(scores) % num_generations:
        raise ValueError(f"{caller}: {scores.shape} rewards do not split into groups of "
                         f"num_generations={num_generations}")
    return scores.reshape(-1, num_generations)  # [prompts, G]


# --- plumbing ------------------------------------------------------------------------

def _as_list(completions: Any) -> list:
    if completions is None:
        return []
    if isinstance(completions, (str, bytes)):
        return [completions]
    return list(completions)


def _column(kwargs: dict, key: str, completions: list, reward: str | None) -> list:
    """kwargs[key] as a list aligned with completions; ``reward`` set means required.

    ``completions`` is the list :func:`_as_list` made: an iterator read here would leave
    nothing for :func:`_score` to score.
    """
    n = len(completions)
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
    """Apply ``score(text, *row)`` to every completion; a bug scores 0.0 instead of raising.

    The call's sympy work is bounded by ``_SYMBOLIC_BUDGET_SECONDS``.
    """
    out = []
    with symbolic_budget(_SYMBOLIC_BUDGET_SECONDS) as budget:
        for i, completion in enumerate(_as_list(completions)):
            try:
                value = float(score(as_text(completion), *(column[i] for column in columns)))
            except Exception:
                if _STRICT:
                    raise
                _warn_once(reward.__name__, "raised on a completion; scored 0.0", exc_info=True)
                value = 0.0
            out.append(value if math.isfinite(value) else 0.0)
    if budget is not None and budget.skipped:
        SYMBOLIC_SKIPS[reward.__name__] += budget.skipped
        _warn_once("symbolic budget", f"{reward.__name__} spent its {_SYMBOLIC_BUDGET_SECONDS:g} s of "
                   f"sympy time on one call; {budget.skipped} comparisons after it were not made and "
                   "scored as wrong (never credited). rewards.SYMBOLIC_SKIPS counts them; warned once")
    return out


def _warn_once(key: str, message: str, exc_info: bool = False) -> None:
    if key not in _WARNED:
        _WARNED.add(key)
        _log.warning("reasonkit.rewards %s: %s", key.split(":")[0], message, exc_info=exc_info)
