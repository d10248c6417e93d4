r"""The answer format: tags, special tokens, the prompt and completion text, tag parsing.

Every stage writes and reads one format. The prompt is a Gemma user turn holding the
instruction and the question; the model answers in its own turn as

    <reasoning>step-by-step work</reasoning>
    <answer>final answer</answer><end_of_turn>

This module is a leaf: it imports no other reasonkit module. It knows tags, not values:
whether an answer is *right* is :mod:`reasonkit.answers`' job.

>>> prompt = format_prompt("  What is 6 * 7?\n")   # the question is trimmed, as Gemma's template does
>>> completion = format_completion("6 * 7 = 42.", "42")
>>> split_tagged(completion), extract_answer(completion).answer, has_exact_format(completion)
(('6 * 7 = 42.', '42'), '42', True)

Parsing is built on ``str.count`` / ``str.find`` and regular expressions whose
repetitions cannot overlap, so a 100 KB degenerate completion parses in milliseconds.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Callable

__all__ = [
    "REASONING_START", "REASONING_END", "ANSWER_START", "ANSWER_END", "START_OF_TURN",
    "END_OF_TURN", "TAGS", "SPECIAL_TOKENS", "INSTRUCTION", "format_prompt",
    "format_completion", "split_tagged", "normalize_prompt", "FAILURE_REASONS", "Extraction",
    "extract_answer", "has_exact_format", "reasoning_of", "as_text",
]

REASONING_START, REASONING_END = "<reasoning>", "</reasoning>"
ANSWER_START, ANSWER_END = "<answer>", "</answer>"
START_OF_TURN, END_OF_TURN = "<start_of_turn>", "<end_of_turn>"
_EOS = "<eos>"  # Gemma's end of sequence, tolerated after the answer like <end_of_turn>
TAGS = (REASONING_START, REASONING_END, ANSWER_START, ANSWER_END)
# Every special string the tiny tokenizer must keep as one piece.
SPECIAL_TOKENS = (START_OF_TURN, END_OF_TURN, REASONING_START, REASONING_END,
                  ANSWER_START, ANSWER_END)

INSTRUCTION = (
    "Think step by step inside " + REASONING_START + " " + REASONING_END
    + ", then give only the final answer inside " + ANSWER_START + " " + ANSWER_END + "."
)


# --- writing --------------------------------------------------------------------------

def format_prompt(question: str) -> str:
    """The one prompt every stage uses: a Gemma user turn, then the model turn opens.

    The question is trimmed first, as Gemma's chat template does (``| trim``), so a
    question with stray whitespace gives the same prompt as a clean one.

    >>> print(format_prompt("2+2? \\n"))
    <start_of_turn>user
    Think step by step inside <reasoning> </reasoning>, then give only the final answer inside
    <answer> </answer>.
    2+2?<end_of_turn>
    <start_of_turn>model
    <BLANKLINE>
    """
    return (f"{START_OF_TURN}user\n{INSTRUCTION}\n{question.strip()}{END_OF_TURN}\n"
            f"{START_OF_TURN}model\n")


def format_completion(reasoning: str, answer: str) -> str:
    """The target the model learns to write, closed by the end-of-turn marker.

    >>> format_completion("2 plus 2 is 4.", "4")
    '<reasoning>2 plus 2 is 4.</reasoning>\\n<answer>4</answer><end_of_turn>'
    """
    return (f"{REASONING_START}{reasoning}{REASONING_END}\n"
            f"{ANSWER_START}{answer}{ANSWER_END}{END_OF_TURN}")


def split_tagged(text: str) -> tuple[str, str] | None:
    """``(reasoning, answer)`` from a tagged response; ``None`` without an answer tag.

    Lenient, for reading datasets: the first answer block and the first reasoning
    block, whatever surrounds them. Grading uses :func:`extract_answer`.

    >>> split_tagged("<reasoning>3 * 4 = 12.</reasoning>\\n<answer> 12 </answer><end_of_turn>")
    ('3 * 4 = 12.', '12')
    >>> split_tagged("<answer>7</answer>"), split_tagged("just 7")
    (('', '7'), None)
    """
    answer = _block(text, ANSWER_START, ANSWER_END)
    if answer is None:
        return None
    reasoning = _block(text, REASONING_START, REASONING_END)
    return (reasoning.strip() if reasoning is not None else "", answer.strip())


def _block(text: str, start: str, end: str, *, only: bool = False) -> str | None:
    """The text between the first ``start`` and the first ``end`` after it, or None; with
    ``only``, None unless each of the two tags appears exactly once."""
    if only and (text.count(start) != 1 or text.count(end) != 1):
        return None
    i = text.find(start)
    j = text.find(end, i + len(start)) if i >= 0 else -1
    return text[i + len(start):j] if j >= 0 else None


def normalize_prompt(text: str) -> str:
    """The duplicate key of a prompt: case-folded, whitespace collapsed.

    >>> normalize_prompt("  Sort 3 1\\n 2. ")
    'sort 3 1 2.'
    """
    return " ".join(text.casefold().split())


# --- reading --------------------------------------------------------------------------

# Why a completion has no usable answer. Evaluation counts these; keep the list short.
FAILURE_REASONS = (
    "no_answer_tag",         # neither <answer> nor </answer> anywhere
    "unclosed_tag",          # <answer> never closed, or </answer> without (or before) <answer>
    "multiple_answer_tags",  # more than one <answer> or </answer>, nested ones included
    "nested_tags",           # a reasoning tag inside the answer, or the answer inside reasoning
    "text_after_answer",     # anything but whitespace, <end_of_turn> or <eos> after </answer>
    "empty_answer",          # only whitespace between the tags
    "hedged",                # several values offered ("41 or 42"): the ``hedged`` test says so
)


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


def extract_answer(completion: Any, hedged: Callable[[str], bool] | None = None) -> Extraction:
    r"""The text of the one ``<answer>`` tag, or None and why not.

    Whether an answer offers several values is a question about values, not tags:
    pass ``hedged`` (:func:`reasonkit.answers.is_hedged`, as rewards and evaluation
    do) to turn such answers into the ``"hedged"`` failure. ``hedged`` must not raise.

    >>> extract_answer("<reasoning>6 * 7</reasoning><answer> 42 </answer><end_of_turn>")
    Extraction(answer='42', reason='ok', raw=' 42 ')
    >>> for c in ["The answer is 42.", "<answer>42", "<answer>4</answer><answer>2</answer>",
    ...           "<answer>42</answer> I think.", "<answer> </answer>",
    ...           "<answer><reasoning>42</reasoning></answer>"]:
    ...     print(extract_answer(c).reason)
    no_answer_tag
    unclosed_tag
    multiple_answer_tags
    text_after_answer
    empty_answer
    nested_tags
    >>> extract_answer("<answer>41 or 42</answer>", hedged=lambda a: " or " in a).reason
    'hedged'
    """
    text = as_text(completion)
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
    if hedged is not None and hedged(answer):
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
    text = as_text(completion)
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


def reasoning_of(completion: Any) -> str | None:
    """The text inside the single reasoning block, or None.

    >>> reasoning_of("<reasoning>6 * 7 = 42</reasoning><answer>42</answer>"), reasoning_of("42")
    ('6 * 7 = 42', None)
    """
    return _block(as_text(completion), REASONING_START, REASONING_END, only=True)


# Whitespace, <end_of_turn> and <eos>, one at a time: no nested quantifier, linear time.
_TAIL_RE = re.compile(r"(?:\s|" + re.escape(END_OF_TURN) + "|" + re.escape(_EOS) + r")*")


def _only_end_markers(text: str, pos: int) -> bool:
    return _TAIL_RE.fullmatch(text, pos) is not None


def as_text(x: Any) -> str:
    r"""Any value as text: None is empty, bytes are decoded (UTF-8, bad bytes replaced),
    anything else is ``str(x)``. Completions, answers and golds all come as any type.

    >>> as_text(None), as_text(b"caf\xc3\xa9"), as_text(42), as_text("x")
    ('', 'café', '42', 'x')
    """
    if x is None:
        return ""
    if isinstance(x, bytes):
        return x.decode("utf-8", "replace")
    return x if isinstance(x, str) else str(x)
