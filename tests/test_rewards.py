"""Reward functions: a table of worked cases, properties on arbitrary text, and timing.

Tag parsing has its own tests (test_template.py), answer checking too (test_answers.py);
here they meet in the rewards, with hostile inputs.
"""

import gc
import inspect
import logging
import math
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reasonkit import answers, template
from reasonkit import rewards as R
from reasonkit.answers import _check as answers_check
from reasonkit.answers._symbolic import _symbolic_tools
from reasonkit.config import DOMAINS
from reasonkit.presets import get_preset
from reasonkit.template import FAILURE_REASONS, TAGS, format_completion

REWARDS = R.MATH_REWARDS + [R.answer_verified, R.multi_domain, R.format_exact_fading,
                            R.format_approx_fading]
ANSWER_REWARDS = [R.answer_correct, R.answer_verified, R.answer_close, R.numeric_backup, R.multi_domain]
RS = "<reasoning>6 * 7 = 42.</reasoning>\n"  # a well-formed reasoning block
A = "<answer>{}</answer>".format


@pytest.fixture(autouse=True, scope="module")
def strict():
    """Make a bug inside a reward or the checker raise here instead of quietly scoring 0.0."""
    R._STRICT = True
    with answers.strict():
        yield
    R._STRICT = False


# (reward's name, completion, gold, expected score). A tuple gold is (answer, domain);
# domain None leaves the column out.
CASES = [
    # --- format_exact
    ("format_exact", RS + A(42) + "<end_of_turn>", "42", 3.0),
    ("format_exact", "  \n" + RS + A(42) + "\n<eos>\n", "42", 3.0),
    ("format_exact", A(42) + RS, "42", 0.0),                # answer before reasoning
    ("format_exact", "<reasoning> </reasoning>" + A(42), "42", 0.0),  # empty reasoning
    ("format_exact", RS + A(""), "42", 0.0),                # empty answer
    ("format_exact", RS + A(42) + " Done!", "42", 0.0),
    ("format_exact", "Sure! " + RS + A(42), "42", 0.0),
    ("format_exact", RS + "So:" + A(42), "42", 0.0),
    ("format_exact", RS + RS + A(42), "42", 0.0),
    ("format_exact", "<reasoning>" + A(42) + "</reasoning>", "42", 0.0),
    # --- the fading format rewards, on a step of one answer
    ("format_exact_fading", RS + A(42), "42", 0.0),         # the whole step formatted: learned
    ("format_exact_fading", "42", "42", 0.0),
    ("format_approx_fading", "<reasoning>6*7 " + A(42), "42", 1.5),  # none formatted: in full
    ("format_approx_fading", RS + A(42), "42", 0.0),
    # --- format_approx
    ("format_approx", RS + A(42), "42", 2.0),
    ("format_approx", "<reasoning>6*7 " + A(42), "42", 1.5),
    ("format_approx", A(41) + A(42), "42", -1.0),
    ("format_approx", "<answer>" * 10, "42", -2.0),
    ("format_approx", "plain text, no tags", "42", 0.0),
    ("format_approx", RS + RS + A(42), "42", 0.0),
    # --- answer_correct: normalisation
    # --- answer_verified: answer_correct, and the reasoning supports it
    ("answer_verified", RS + A(42), "42", 3.0),
    ("answer_verified", "<reasoning>6 * 7 = 41. So 42.</reasoning>" + A(42), "42", 0.0),  # a false step
    ("answer_verified", "<reasoning>6 * 7 = 42. It is 40.</reasoning>" + A(42), "42", 0.0),  # concludes 40
    ("answer_verified", "<reasoning>I know it.</reasoning>" + A(42), "42", 3.0),  # nothing to check
    ("answer_verified", RS + A(41), "42", 0.0),
    ("answer_correct", RS + A(42), "42", 3.0),
    ("answer_correct", A("42.0"), "42", 3.0),
    ("answer_correct", A("$1,234"), "1234", 3.0),
    ("answer_correct", A("1234"), "1,234", 3.0),
    ("answer_correct", A("\\$1{,}000"), "1000", 3.0),
    ("answer_correct", A("1\u202f000"), "1000", 3.0),        # thin-space grouping
    ("answer_correct", A("€3.50"), "3.5", 3.0),
    ("answer_correct", A("42 apples"), "42", 3.0),
    ("answer_correct", A("3 km"), "3", 3.0),
    ("answer_correct", A("25%"), "25", 3.0),
    ("answer_correct", A("25\\%"), "0.25", 3.0),
    ("answer_correct", A("1/2"), "0.5", 3.0),
    ("answer_correct", A("\\frac{1}{2}"), "1/2", 3.0),
    ("answer_correct", A("x = -\\dfrac{3}{4}"), "-0.75", 3.0),
    ("answer_correct", A("\\boxed{-7}"), "-7", 3.0),
    ("answer_correct", A("$\\boxed{\\text{42 apples}}$"), "42", 3.0),
    ("answer_correct", A("\u22127"), "-7", 3.0),             # unicode minus
    ("answer_correct", A("٤٢"), "42", 3.0),                  # Arabic-Indic digits
    ("answer_correct", A("４２"), "42", 3.0),                # full-width digits
    ("answer_correct", A("3 \\times 10^{8} m/s"), "300000000", 3.0),
    ("answer_correct", A("3 x 10^8 m/s"), "300000000", 3.0),  # plain-text times sign
    ("answer_correct", A("6.02x10^{23}"), "6.02e23", 3.0),
    ("answer_correct", A("max 10^3"), "1000", 0.0),          # a word's x is no times sign, and
                                                             # "max" no lead-in: not one number
    ("answer_correct", A("2^10"), "1024", 3.0),
    ("answer_correct", A("6 * 7 = 42"), "42", 3.0),
    ("answer_correct", A("Paris"), "paris", 3.0),
    ("answer_correct", A(" the  Eiffel tower! "), "The Eiffel Tower", 3.0),
    ("answer_correct", A("(2,3)"), "(2, 3)", 3.0),           # non-numeric gold: as text
    # --- answer_correct: no credit
    ("answer_correct", A("-7"), "7", 0.0),
    ("answer_correct", A("0.333"), "1/3", 0.0),
    ("answer_correct", A("\\pi"), "3.14159", 0.0),
    ("answer_correct", A("sqrt(2)"), "2", 0.0),
    ("answer_correct", A("41 or 42"), "42", 0.0),
    ("answer_correct", A("either 42 or 43"), "42", 0.0),
    ("answer_correct", A("41, 42"), "42", 0.0),              # several distinct numbers
    ("answer_correct", A(42) + A(42), "42", 0.0),
    ("answer_correct", RS + "<answer>42", "42", 0.0),
    ("answer_correct", A(42) + " or maybe 41", "42", 0.0),
    ("answer_correct", RS + "The answer is 42.", "42", 0.0),
    ("answer_correct", A("<reasoning>42</reasoning>"), "42", 0.0),
    ("answer_correct", A(42), float("nan"), 0.0),
    ("answer_correct", A(42), "", 0.0),
    ("answer_correct", A("1e400"), "1", 0.0),
    ("answer_correct", A("9" * 80), "1", 0.0),
    # --- answer_correct: equality means the same value (issue 29's repros)
    ("answer_correct", A("2 + 2"), "2", 0.0),
    ("answer_correct", A("2 + 2"), "4", 3.0),
    ("answer_correct", A("1"), "1 - x", 0.0),
    ("answer_correct", RS + A("$1 + \\frac{1}{\\mathrm{e}}$"), "$1 - \\frac{1}{\\mathrm{e}}$", 0.0),
    ("answer_correct", RS + A("$1 - \\frac{1}{e}$"), "$1 - \\frac{1}{\\mathrm{e}}$", 3.0),
    ("answer_correct", A("1 + 1 = 42"), "42", 0.0),
    ("answer_correct", A("x = 42"), "42", 3.0),
    ("answer_correct", A("5 x"), "5", 0.0),
    ("answer_correct", A("5 - x"), "5", 0.0),
    ("answer_correct", A("0,111"), "111", 0.0),
    ("answer_correct", A("11,\\! 111"), "11111", 3.0),
    ("answer_correct", A("$\\boxed{125\\textnormal{ miles}}$"), "125", 3.0),
    # --- answer_close: 1.5 * (1 - rel_err / 0.1)
    ("answer_close", A(42), "42", 1.5),
    ("answer_close", A(40), "42", 0.785714),
    ("answer_close", A(46), "50", 0.3),
    ("answer_close", A(45), "50", 0.0),                      # exactly at the tolerance
    ("answer_close", A(30), "42", 0.0),
    ("answer_close", A(-42), "42", 0.0),
    ("answer_close", A(0.05), "0", 0.75),                    # gold 0: absolute error
    ("answer_close", A("41 or 42"), "42", 0.0),
    ("answer_close", A(42), "Paris", 0.0),
    ("answer_close", "about 42", "42", 0.0),                 # no tag: numeric_backup's job
    # --- numeric_backup: only without a usable (or any other broken) tag
    ("numeric_backup", "6 * 7 = 42", "42", 1.5),
    ("numeric_backup", "so it is \\boxed{42}.", "42", 1.5),
    ("numeric_backup", RS + "<answer>42", "42", 1.5),        # cut off before </answer>
    ("numeric_backup", "That is $1,234.", "1234", 1.5),
    ("numeric_backup", RS + A(42), "42", 0.0),
    ("numeric_backup", "It is 41 or 42", "42", 0.0),
    ("numeric_backup", "42, no wait, 41", "42", 0.0),
    ("numeric_backup", A("41 or 42"), "42", 0.0),
    ("numeric_backup", "<answer></answer> 42", "42", 0.0),
    ("numeric_backup", "1" * 5000, "1", 0.0),
    ("numeric_backup", "no numbers at all", "42", 0.0),
    ("numeric_backup", "so it is 40 + 2", "2", 0.0),        # an operand is no answer
    ("numeric_backup", "so it is \\boxed{2 + 2}", "2", 0.0),
    # --- multi_domain: 0.4 format + 0.4 accuracy + 0.1 quality + 0.1 bonus
    ("multi_domain", "<reasoning>6 * 7 = 42, so 42.</reasoning>" + A(42), ("42", "math"), 1.0),
    ("multi_domain", "<reasoning>6 * 7 = 42, so 42.</reasoning>" + A(41), ("42", "math"), 0.475),
    ("multi_domain", "<reasoning>Sorted: 1, 2, 3.</reasoning>" + A("[1, 2, 3]"),
     ("1 2 3", "coding"), 1.0),
    ("multi_domain", "<reasoning>F = 2 * 4.9 N.</reasoning>" + A("9.8 N"),
     ("9.8", "science"), 0.875),                            # answer not in the reasoning
    ("multi_domain", "<reasoning>ok</reasoning>" + A("cat cat"), ("cat, cat", "instruction"),
     0.825),
    ("multi_domain", "<reasoning>It is Paris.</reasoning>" + A("paris"), ("Paris", None), 0.875),
    ("multi_domain", "<reasoning>It is Paris.</reasoning>" + A("paris"), ("Paris", "history"),
     0.875),                                                # unknown domain -> general
    ("multi_domain", "<reasoning>It is 42 apples.</reasoning>" + A("42 apples"),
     ("42", "general"), 0.5),                               # text domain: words count
    ("multi_domain", "Paris", ("Paris", "general"), 0.0),
    ("multi_domain", A("Paris"), ("Paris", "summarization"), 0.4),
]


@pytest.mark.parametrize("what, completion, gold, expected", CASES)
def test_case_table(what, completion, gold, expected):
    answer, domain = gold if isinstance(gold, tuple) else (gold, None)
    columns = {"answer": [answer]} | ({"domain": [domain]} if domain is not None else {})
    assert getattr(R, what)(None, [completion], **columns) == [pytest.approx(expected)]


def test_table_covers_every_reward():
    assert len(CASES) >= 60
    assert {fn.__name__ for fn in REWARDS} <= {what for what, *_ in CASES}


def test_a_hedge_is_no_answer():
    assert R.answer_correct(None, [RS + A("41 or 42")], answer=["42"]) == [0.0]
    assert R.extract(RS + A("41 or 42")).reason == "hedged"
    assert R.extract(RS + A("Paris or London")).reason == "ok"  # text choices are not checked


# --- properties ------------------------------------------------------------------------

SOUP = st.lists(st.sampled_from(TAGS + (
    "<end_of_turn>", "<eos>", "42", "41 or 42", "-3.5", "1,000", "½", "٤", "1e400", "9" * 70,
    "\\boxed{", "\\frac{1}{", "}", "{", "$", "%", "or", " ", "\n", "x = ", "/", "^", "é",
)), max_size=30).map("".join)
GOLDS = st.one_of(st.none(), st.text(max_size=20), st.integers(), st.floats(),
                  st.sampled_from(["42", "-0.5", "1/3", "50%", "\\frac{1}{2}", "nan", "Paris"]))


def _check_scores(completions, golds, domains):
    kwargs = {"answer": np.array(golds, dtype=object), "domain": np.array(domains)}
    for fn in REWARDS:
        scores = fn(["prompt"] * len(completions), completions, **kwargs)
        assert isinstance(scores, list) and len(scores) == len(completions)
        assert all(type(s) is float and math.isfinite(s) for s in scores), fn.__name__
    assert all(-2.0 <= s <= 2.0 for s in R.format_approx(None, completions))
    assert all(0.0 <= s < 3.0 for s in R.answer_close(None, completions, **kwargs))
    assert all(0.0 <= s <= 1.0 for s in R.multi_domain(None, completions, **kwargs))
    for completion in completions:
        found = R.extract(completion)
        assert found.reason in FAILURE_REASONS + ("ok",)
        assert found.ok == (found.answer is not None)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.one_of(st.text(), SOUP), GOLDS,
                          st.sampled_from(DOMAINS + ("", "weird"))), min_size=1, max_size=4))
def test_rewards_never_raise(rows):
    completions, golds, domains = (list(column) for column in zip(*rows, strict=True))
    _check_scores(completions, golds, domains)


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_characters="<>"), max_size=40)
       .filter(str.strip), st.integers(-10**9, 10**9))
def test_well_formed_completion_scores_full(reasoning, n):
    completion = format_completion(reasoning, str(n))
    scores = {fn.__name__: fn(None, [completion], answer=[str(n)])[0] for fn in R.MATH_REWARDS}
    assert scores == {"format_exact": 3.0, "format_approx": 2.0, "answer_correct": 3.0,
                      "answer_close": 1.5, "numeric_backup": 0.0}


@pytest.mark.parametrize("value", [None, b"<answer>42</answer>", 42, np.str_(A(42))])
def test_odd_completion_types(value):
    for fn in REWARDS:
        scores = fn(None, [value], answer=["42"])
        assert len(scores) == 1 and type(scores[0]) is float


@pytest.mark.parametrize("fn", REWARDS + [R.weighted(R.answer_correct, 2.0)],
                         ids=lambda fn: fn.__name__)
def test_completions_as_an_iterator_are_scored(fn):
    """A generator of completions is read once: the gold column must not consume it."""
    completions = [RS + A(42), RS + A(7), "6 * 7 = 42"]
    kwargs = dict(answer=["42", "42", "42"], domain=["math"] * 3)
    expected = fn(None, completions, **kwargs)
    assert len(expected) == 3
    assert fn(None, iter(completions), **kwargs) == expected
    assert fn(None, (c for c in completions), answer=iter(kwargs["answer"]),
              domain=iter(kwargs["domain"])) == expected


def test_columns_as_numpy_and_misaligned():
    completions = [A(42), A(7)]
    assert R.answer_correct(None, completions, answer=np.array(["42", "7"])) == [3.0, 3.0]
    assert R.answer_correct(None, completions, answer=np.array([42, 7])) == [3.0, 3.0]
    assert R.answer_correct(None, completions, answer=["42"]) == [3.0, 0.0]  # no raise


@pytest.mark.parametrize("fn", ANSWER_REWARDS, ids=lambda fn: fn.__name__)
def test_missing_answer_column_names_the_reward(fn):
    with pytest.raises(ValueError, match=fn.__name__):
        fn(None, [A(42)], domain=["math"])


def test_degenerate_completions_are_fast():
    kinds = ["<answer>" * 12500, "1" * 100_000, "<reasoning>" + "a " * 50_000,
             "<answer>" + "1 or " * 20_000 + "</answer>", "1," * 50_000,
             "<reasoning>" + "\\boxed{" * 14_000 + "</reasoning>" + A("{" * 2000),
             A(42) + "<eos>" * 20_000 + "x", "<answer>" + "\\frac" * 20_000 + "</answer>",
             "(" * 100_000, "٤" * 100_000]
    assert all(len(k) >= 100_000 for k in kinds)
    # CPU time of this thread: the work done, whatever else the (shared) machine is doing.
    start = time.thread_time()
    for fn in REWARDS:
        scores = fn(None, kinds, answer=["42"] * len(kinds), domain=["math"] * len(kinds))
        assert len(scores) == len(kinds)
    for kind in kinds:
        template.extract_answer(kind, hedged=answers.is_hedged)
        answers.normalize_text(kind)
        answers_check.normalize_number(kind)
    assert time.thread_time() - start < 1.0
    # The checker's own entry points, one 100 KB answer at a time: far below the 1 s bound.
    calls = [answers.final_answer, lambda k: answers.check_answer("math", k, "42"),
             lambda k: answers.check_answer("math", k, "\\frac{\\sqrt{3}}{2}"),
             lambda k: answers.check_answer("general", k, "Paris"),
             lambda k: answers.closeness(k, "42"), answers.canonical, answers.gold_problem]
    worst = 0.0
    for call in calls:
        for kind in kinds:
            start = time.thread_time()
            call(kind)
            worst = max(worst, time.thread_time() - start)
    assert worst < 0.25


# --- the cost of symbolic answers --------------------------------------------------------

TINY_STEP_S = 3.3     # the tiny preset's GRPO step on 2 cores (the demo: 200 steps in 655 s)
REWARD_SHARE = 0.05   # issue 29: all rewards together at most 5% of it


def _step_cpu(completions, gold):
    """CPU seconds of this thread for the math rewards on one step, and their scores."""
    kwargs = {"answer": np.array([gold] * len(completions)), "domain": np.array(["math"] * len(completions))}
    gc.collect()  # a full collection of sympy's caches (~0.1 s) is the process's cost, not the step's
    start = time.thread_time()
    scores = {fn.__name__: fn(["prompt"] * len(completions), completions, **kwargs) for fn in R.MATH_REWARDS}
    return time.thread_time() - start, scores


@pytest.mark.parametrize("gold, right", [("\\frac{\\sqrt{3}}{2}", "\\frac{1}{2}\\sqrt{3}"),
                                         ("7", "\\sqrt{49}")])
def test_a_step_of_new_closed_forms_is_within_the_bound(gold, right):
    """64 completions, each a closed form no cache has seen: the wrong ones are told apart
    without sympy, the right one is confirmed by it."""
    _symbolic_tools()  # sympy loads once per process, outside the bound
    answers.gold_problem(gold)  # the data filters have parsed every gold
    completions = [RS + A(f"\\sqrt{{{8191 + k}}} + \\frac{{{k + 1}}}{{{k % 11 + 2}}}") for k in range(63)]
    cpu, scores = _step_cpu(completions + [RS + A(right)], gold)
    assert scores["answer_correct"] == [0.0] * 63 + [3.0]
    assert cpu < REWARD_SHARE * TINY_STEP_S


def test_the_symbolic_budget_bounds_a_step_of_new_expressions(caplog):
    """Expressions with a variable need sympy: after SYMBOLIC_BUDGET_SECONDS a call judges
    no more of them (no credit, counted, warned once); alone, each gets its exact verdict."""
    _symbolic_tools()
    gold = "x^2 + 2x + 1"
    answers.gold_problem(gold)
    new = [RS + A(f"x^2 + {4099 + k}x - \\frac{{{k + 1}}}{{3}}") for k in range(62)]
    completions = new + [RS + A("(x+1)^2"), RS + A("1 + x^2 + 2x")]
    skipped = R.SYMBOLIC_SKIPS["answer_correct"]
    R._WARNED.discard("symbolic budget")
    with caplog.at_level(logging.WARNING, logger="reasonkit.rewards"):
        cpu, scores = _step_cpu(completions, gold)
    assert scores["answer_correct"] == [0.0] * 64  # the last two are right, but past the budget
    assert R.SYMBOLIC_SKIPS["answer_correct"] > skipped and "symbolic budget" in caplog.text
    assert cpu < REWARD_SHARE * TINY_STEP_S
    # alone, each gets its exact verdict (two in one call may not: the first may spend it all)
    assert [R.answer_correct(None, [c], answer=[gold])[0] for c in completions[-2:]] == [3.0, 3.0]


# --- weighted --------------------------------------------------------------------------

def test_weighted_scales_and_keeps_a_readable_name():
    double = R.weighted(R.format_exact, 2)
    assert double.__name__ == "format_exact_x2"
    assert R.weighted(R.answer_close, 0.25).__name__ == "answer_close_x0.25"
    assert R.weighted(R.answer_correct, 1.5, name="accuracy").__name__ == "accuracy"
    completions = [RS + A(42), "nothing"]
    assert double(None, completions, answer=["42", "42"]) == [6.0, 0.0]
    half = R.weighted(R.answer_close, 0.5)
    assert half(None, [A(40)], answer=["42"]) == [pytest.approx(0.785714 / 2)]
    # Tunix calls reward functions by keyword and inspects their parameters.
    assert list(inspect.signature(double).parameters) == ["prompts", "completions", "kwargs"]
    assert double(prompts=None, completions=completions, answer=["42"] * 2, mode="train")[0] == 6.0
    with pytest.raises(ValueError):
        R.weighted(R.format_exact, float("inf"))


def test_weighted_names_a_bad_argument():
    with pytest.raises(TypeError, match=r"weighted: fn='answer_correct' must be a reward function"):
        R.weighted("answer_correct", 0.5)  # a name instead of the function: refused up front
    for bad in (None, "0.5", float("nan")):
        with pytest.raises(ValueError, match=r"weighted: weight=.* must be a finite number"):
            R.weighted(R.answer_correct, bad)
    assert R.weighted(R.answer_correct, np.float32(0.5))(None, [A(42)], answer=["42"]) == [1.5]


@pytest.mark.parametrize("tolerance", [0.2, np.float32(0.2), np.float64(0.2)])
def test_answer_close_takes_any_real_tolerance(tolerance):
    assert R.answer_close(None, [A(41)], answer=["42"], tolerance=tolerance) == [
        pytest.approx(1.5 * (1 - (1 / 42) / 0.2), abs=1e-6)]


@pytest.mark.parametrize("tolerance", [0, -0.1, float("inf"), True, "0.1", None])
def test_answer_close_refuses_a_bad_tolerance(tolerance):
    with pytest.raises(ValueError, match=r"answer_close: tolerance=.* must be a positive number"):
        R.answer_close(None, [A(41)], answer=["42"], tolerance=tolerance)


@pytest.mark.parametrize("pred, gold", [("42", "42"), ("40", "42"), ("$46", "50"), ("49%", "0.5"),
                                        ("0.05", "0"), ("x = 9", "10"), ("30", "42"), ("pi", "3")])
def test_closeness_is_answer_close_over_its_maximum(pred, gold):
    close = R.answer_close(None, [A(pred)], answer=[gold])[0]
    assert answers.closeness(pred, gold) == pytest.approx(close / R.CLOSE_MAX_SCORE, abs=1e-6)


def test_math_rewards_list():
    assert [fn.__name__ for fn in R.MATH_REWARDS] == [
        "format_exact", "format_approx", "answer_correct", "answer_close", "numeric_backup"]


def test_from_config_names_weights_and_refuses_an_unknown_name():
    """GRPOConfig.rewards -> the functions Tunix sums; weight 1 keeps a function's own log name."""
    default = R.from_config(get_preset("tiny").grpo.rewards)
    assert default == R.MATH_REWARDS  # the very functions: Tunix logs rewards/<name> as before
    fns = R.from_config((("format_exact", 1.0), ("answer_correct", 2.0), ("multi_domain", 0.0),
                         ("format_approx", -0.5)))
    assert [fn.__name__ for fn in fns] == ["format_exact", "answer_correct_x2", "multi_domain_x0",
                                           "format_approx_x-0.5"]
    completions = [RS + A(42)]
    assert [fn(None, completions, answer=["42"])[0] for fn in fns] == [3.0, 6.0, 0.0, -1.0]
    assert set(R.BY_NAME) == {fn.__name__ for fn in REWARDS}
    with pytest.raises(ValueError, match=r"grpo\.rewards\[1\]: unknown reward 'answer'; known: "
                                         r"answer_close, answer_correct, answer_verified, format_approx, "
                                         r"format_approx_fading, format_exact, format_exact_fading, "
                                         r"multi_domain, numeric_backup$"):
        R.from_config([("format_exact", 1.0), ("answer", 1.0)])


def test_is_correct_is_the_verdict_answer_correct_pays_and_evaluation_counts():
    from reasonkit import evaluate

    gold, texts = "1234", [
        "<reasoning>r</reasoning>\n<answer>$1,234</answer>",   # right, written otherwise
        "<reasoning>r</reasoning>\n<answer>1234 or 1235</answer>",  # hedged: wrong
        "<answer>1</answer><answer>1234</answer>",             # two tags: wrong
        "The answer is 1234.",                                 # outside the tag: wrong
        "<answer>0,1234</answer>",                             # a list, not the number
    ]
    verdicts = [R.is_correct(t, gold, "math") for t in texts]
    assert verdicts == [True, False, False, False, False]
    paid = R.answer_correct(None, texts, answer=[gold] * len(texts), domain=["math"] * len(texts))
    assert [p > 0 for p in paid] == verdicts
    assert [evaluate.score({"domain": "math", "answer": gold}, t)["correct"] for t in texts] == verdicts
    assert R.is_correct("<answer>Paris</answer>", "paris", "general")
    assert R.is_correct("<answer>4</answer>", "4", None)  # no domain: the math rule


def test_answer_verified_pays_only_for_reasoned_right_answers():
    right = "<reasoning>7 - 3 = 4. 4 - 3 = 1.</reasoning>\n<answer>1</answer>"
    lucky = "<reasoning>7 - 3 = 5. 5 - 3 = 1.</reasoning>\n<answer>1</answer>"
    wrong = "<reasoning>7 - 3 = 4. 4 - 3 = 1.</reasoning>\n<answer>2</answer>"
    text = "<reasoning>hen 2, owl 3. Most often: owl.</reasoning>\n<answer>owl</answer>"
    got = R.answer_verified(None, [right, lucky, wrong, text], answer=["1", "1", "1", "owl"],
                                  domain=["math", "math", "math", "summarization"])
    assert got == [3.0, 0.0, 0.0, 3.0]
    assert R.answer_correct(None, [lucky], answer=["1"]) == [3.0]  # what it adds
    assert [f.__name__ for f in R.from_config([("answer_verified", 2.0)])] == ["answer_verified_x2"]


def test_format_fading_steps_back_as_the_step_learns_the_format():
    """A format reward that pays in full while no answer has the format and nothing once
    every answer has it; stateless, so a resumed step scores as the first run did."""
    good, bad = RS + A(42), "42"
    paid = []
    for n_good in range(9):
        step = [good] * n_good + [bad] * (8 - n_good)
        got = R.format_exact_fading(None, step, answer=["42"] * 8)
        assert got == R.format_exact_fading(None, step[::-1], answer=["42"] * 8)[::-1]  # order-free
        assert got[n_good:] == [0.0] * (8 - n_good)  # the unformatted never earn
        paid.append(got[0] if n_good else None)
    assert paid[1] == 3.0 * 7 / 8 and paid[8] == 0.0
    assert all(a > b for a, b in zip(paid[1:-1], paid[2:], strict=True))  # falls as the format spreads
    # from the config, weighted, with Tunix's log name
    fn, = R.from_config([("format_exact_fading", 0.1)])
    assert fn.__name__ == "format_exact_fading_x0.1"
    assert fn(None, [good, bad], answer=["42", "42"]) == pytest.approx([0.15, 0.0])
    assert R.format_approx_fading(None, [good, bad]) == [1.0, 0.0]  # 2.0 x (1 - 1/2)
    assert R.format_exact_fading(None, []) == []
