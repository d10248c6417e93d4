r"""The one answer checker: read an answer, normalise it, compare it with the gold.

Data filters, DPO's wrong answers, the GRPO rewards and evaluation all ask this module
whether two answers are the same, so they cannot disagree. Outside this package it
imports only the leaf :mod:`reasonkit.template` (for ``as_text``).

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
number); :func:`lenient_answer` adds, in the text domains, a word answer the text states
("So the answer is Tom.").

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

The package, one way from the bottom (each module imports only those before it):
:mod:`~reasonkit.answers._text` (text, normalised words, LaTeX clean-up, boxes),
:mod:`~reasonkit.answers._numeric` (one exact value, units, equality of values),
:mod:`~reasonkit.answers._closed` (interval arithmetic on closed forms),
:mod:`~reasonkit.answers._symbolic` (the LaTeX for sympy, time limits, the budget,
math-verify), :mod:`~reasonkit.answers._check` (the decisions) and, beside them on
:mod:`~reasonkit.answers._text` alone, :mod:`~reasonkit.answers._steps` (whether a reasoning
trace supports its answer). The modules are private; this face re-exports what the rest
of reasonkit uses. Tests run the checker inside :func:`strict`, where a bug raises
instead of reading as "no answer".
"""

from reasonkit.answers._check import (
    NUMERIC_DOMAINS,
    Answer,
    boxed_answer,
    canonical,
    check_answer,
    closeness,
    final_answer,
    gold_problem,
    is_hedged,
    lenient_answer,
    read_answer,
    strict,
)
from reasonkit.answers._numeric import FLOAT_ARTEFACT, terminates
from reasonkit.answers._steps import supports
from reasonkit.answers._symbolic import symbolic_budget
from reasonkit.answers._text import normalize_text

__all__ = ["NUMERIC_DOMAINS", "Answer", "read_answer", "canonical", "check_answer", "closeness",
           "normalize_text", "is_hedged", "boxed_answer", "final_answer", "lenient_answer", "gold_problem",
           "symbolic_budget", "terminates", "FLOAT_ARTEFACT", "strict", "supports"]
