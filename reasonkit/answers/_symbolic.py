r"""Symbolic answers: the LaTeX handed to sympy, its time limits and budget, and the comparison.

``_math_latex`` prepares an answer for sympy (this package's unwrapping first; None over
the size caps :data:`MAX_SYMBOLIC_CHARS`, huge numbers, nested powers). math-verify and
latex2sympy load on first use (``_symbolic_tools``). Each parse (cached) and each
comparison gets :data:`SYMBOLIC_SECONDS` of CPU time, enforced by a watchdog thread in
whatever thread the checker runs (``_limited``), and :func:`symbolic_budget` bounds the
uncached sympy work of a block. ``_symbolic`` compares two prepared answers: closed
forms that clearly differ (:mod:`reasonkit.answers._closed`) and expressions that differ
at a sample point are rejected before math-verify's verdict, which alone confirms
equality.
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
from typing import Any, Callable, Iterator

from reasonkit.answers._closed import CLOSED_APART, _closed_apart
from reasonkit.answers._numeric import _is_label, _unit
from reasonkit.answers._text import _LATEX_COMMA_RE, MAX_PARSE_CHARS, _ascii_digits, _clean, _compact

__all__ = ["MAX_SYMBOLIC_CHARS", "SYMBOLIC_SECONDS", "POINT_CHECK_SECONDS", "SymbolicBudget",
           "symbolic_budget"]

MAX_SYMBOLIC_CHARS = 200    # longer answers never reach sympy
SYMBOLIC_SECONDS = 0.3      # CPU seconds for one sympy parse (cached) or one comparison


# --- the LaTeX handed to sympy --------------------------------------------------------

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


# --- the time limit -------------------------------------------------------------------

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



# --- the budget of a block ------------------------------------------------------------

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

    >>> from reasonkit.answers import check_answer
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


# --- math-verify ----------------------------------------------------------------------

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
        # The LaTeX parser builds its tables on the first use of each construct: here, untimed.
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

