"""The answer format: prompt and completion text, tag parsing, every failure reason."""

import subprocess
import sys
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reasonkit import answers, template
from reasonkit.template import (
    FAILURE_REASONS,
    INSTRUCTION,
    SPECIAL_TOKENS,
    TAGS,
    extract_answer,
    format_completion,
    format_prompt,
    has_exact_format,
    reasoning_of,
    split_tagged,
)

RS = "<reasoning>6 * 7 = 42.</reasoning>\n"  # a well-formed reasoning block
A = "<answer>{}</answer>".format


def test_the_template_is_a_leaf():
    """template imports no other reasonkit module (DESIGN.md's data-flow line)."""
    code = ("import sys, reasonkit.template; "
            "print(sorted(m for m in sys.modules if m.startswith('reasonkit')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['reasonkit', 'reasonkit.template']"


# --- writing --------------------------------------------------------------------------

def test_prompt_is_a_gemma_user_turn_then_the_model_turn():
    prompt = format_prompt("What is 6 * 7?")
    assert prompt == (f"<start_of_turn>user\n{INSTRUCTION}\nWhat is 6 * 7?<end_of_turn>\n"
                      "<start_of_turn>model\n")
    assert all(tag in INSTRUCTION for tag in TAGS)


@pytest.mark.parametrize("question", ["What is 6 * 7?  ", "\n What is 6 * 7?\n", "\tWhat is 6 * 7?\r\n"])
def test_prompt_trims_the_question_as_gemma_s_template_does(question):
    """Gemma's chat template applies ``| trim`` to each message (issue 33, item 4)."""
    assert format_prompt(question) == format_prompt("What is 6 * 7?")


def test_prompt_keeps_the_question_s_inner_whitespace():
    code = "What does this code print?\nx = 5\n  print(x)"
    assert f"\n{code}<end_of_turn>" in format_prompt(code + "\n")


def test_completion_ends_the_model_s_turn():
    assert format_completion("6 * 7 = 42.", "42") == (
        "<reasoning>6 * 7 = 42.</reasoning>\n<answer>42</answer><end_of_turn>")
    assert SPECIAL_TOKENS[:2] == ("<start_of_turn>", "<end_of_turn>")


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_characters="<>"), max_size=40),
       st.text(alphabet=st.characters(blacklist_characters="<>"), max_size=20).filter(str.strip))
def test_a_completion_reads_back(reasoning, answer):
    completion = format_completion(reasoning, answer)
    assert split_tagged(completion) == (reasoning.strip(), answer.strip())
    assert extract_answer(completion).answer == answer.strip()
    assert has_exact_format(completion) == bool(reasoning.strip())
    assert reasoning_of(completion) == reasoning


def test_split_tagged_is_lenient():
    assert split_tagged("Sure! <answer> 7 </answer> and more") == ("", "7")
    assert split_tagged("<reasoning>a</reasoning><answer>1</answer><answer>2</answer>") == ("a", "1")
    assert split_tagged("<answer>7") is None and split_tagged("just 7") is None


# --- reading --------------------------------------------------------------------------

# (completion, reason): every failure reason and its look-alikes.
EXTRACTIONS = [
    (RS + A(42), "ok"),
    (RS + A(" 42 ") + "\n<end_of_turn><eos>\n", "ok"),
    ("The answer is 42.", "no_answer_tag"),
    ("", "no_answer_tag"),
    ("<ANSWER>42</ANSWER>", "no_answer_tag"),
    (RS + "<answer>42", "unclosed_tag"),
    ("42</answer>", "unclosed_tag"),
    ("</answer>42<answer>", "unclosed_tag"),
    (A(41) + A(42), "multiple_answer_tags"),
    ("<answer><answer>42</answer></answer>", "multiple_answer_tags"),
    ("<answer>" * 3, "multiple_answer_tags"),
    ("<answer><reasoning>6*7</reasoning>42</answer>", "nested_tags"),
    ("<reasoning>so " + A(42) + " done</reasoning>", "nested_tags"),
    (RS + A(42) + " because 6 * 7 = 42", "text_after_answer"),
    (A(42) + "<reasoning>6*7</reasoning>", "text_after_answer"),
    (RS + A("   \n "), "empty_answer"),
    (A("41 or 42"), "hedged"),
    (A("either 3 or 4"), "hedged"),
    (A("between 10 and 12"), "hedged"),
    (A("maybe 42"), "ok"),                 # one value: not a hedge
    (A("1/2 or 0.5"), "ok"),               # one value, two spellings
    (A("Paris or London"), "ok"),          # text choices are not a number hedge
]


@pytest.mark.parametrize("completion, reason", EXTRACTIONS)
def test_extraction_reasons(completion, reason):
    assert extract_answer(completion, hedged=answers.is_hedged).reason == reason


def test_every_reason_is_covered_and_distinct():
    assert {reason for _, reason in EXTRACTIONS} == set(FAILURE_REASONS) | {"ok"}
    assert len(set(FAILURE_REASONS)) == len(FAILURE_REASONS) and "ok" not in FAILURE_REASONS


def test_extraction_fields():
    found = extract_answer(RS + A(" 42 "))
    assert (found.ok, found.answer, found.raw) == (True, "42", " 42 ")
    hedged = extract_answer(A("41 or 42"), hedged=answers.is_hedged)
    assert (hedged.ok, hedged.answer, hedged.raw) == (False, None, "41 or 42")
    assert extract_answer(A("41 or 42")).ok  # without a hedge test, tags are all it checks


@pytest.mark.parametrize("value", [None, b"<answer>42</answer>", 42, bytes([0xff]) + b"<answer>1</answer>"])
def test_odd_completion_types(value):
    found = extract_answer(value)
    assert found.reason in FAILURE_REASONS + ("ok",) and has_exact_format(value) is False


@pytest.mark.parametrize("completion, ok", [
    (RS + A(42) + "<end_of_turn>", True),
    ("  \n" + RS + A(42) + "\n<eos>\n", True),
    (A(42) + RS, False),                     # answer before reasoning
    ("<reasoning> </reasoning>" + A(42), False),
    (RS + A(""), False),
    (RS + "So:" + A(42), False),
    ("Sure! " + RS + A(42), False),
])
def test_exact_format(completion, ok):
    assert has_exact_format(completion) is ok


def test_parsing_is_linear_on_degenerate_text():
    kinds = ["<answer>" * 12500, "<reasoning>" + "a " * 50_000, A(42) + "<eos>" * 20_000 + "x",
             "<reasoning>" * 9000 + "</answer>", " " * 100_000 + A(42)]
    start = time.perf_counter()
    for kind in kinds:
        extract_answer(kind)
        has_exact_format(kind)
        split_tagged(kind)
        reasoning_of(kind)
    assert time.perf_counter() - start < 0.5
    assert template.extract_answer(" " * 100_000 + A(42)).answer == "42"
