"""DPO's preference pairs: synthetic ones made from the gold record, and on-policy ones.

A synthetic pair (:func:`preference_pair`) rejects a wrong answer or a broken format made
from the gold record. A wrong answer is wrong by the one checker (:mod:`reasonkit.answers`),
under the record's domain's rule, so a pair never rejects a right answer. An on-policy pair
(:func:`onpolicy_pair`) pairs the policy's own answers, already judged: a right one against
a wrong one of exact format (``reasonkit.train._onpolicy`` samples and judges them).
"""

from __future__ import annotations

import random
from fractions import Fraction
from typing import Sequence

from reasonkit import answers
from reasonkit.data._records import FIELDS
from reasonkit.template import (
    END_OF_TURN,
    REASONING_END,
    REASONING_START,
    format_completion,
    has_exact_format,
)

__all__ = ["REJECTED_KINDS", "wrong_answer", "preference_pair", "as_completion", "onpolicy_pair"]


REJECTED_KINDS = ("wrong_answer", "missing_tags", "answer_outside_tag")


def wrong_answer(answer: str, rng: random.Random, others: Sequence[str] = (),
                 domain: str = "general") -> str:
    """A plausible answer that the checker judges wrong under ``domain``'s rule.

    A nearby number for a numeric gold (never negative for a gold that is not);
    otherwise the items reordered or one dropped, or another gold of the domain; as a
    last resort the text reversed or negated. Every candidate is put to
    :func:`reasonkit.answers.check_answer`, so a DPO pair never rejects a right answer.

    >>> wrong_answer("10", random.Random(0)) != "10", wrong_answer("cat", random.Random(0), ["dog"])
    (True, 'dog')
    >>> wrong_answer("x = 5", random.Random(0), domain="math")
    '6'
    """
    def wrong(option: str) -> bool:
        return bool(answers.normalize_text(option)) and not answers.check_answer(domain, option, answer)

    read = answers.read_answer(answer, domain)
    if read.kind == "number":
        delta = rng.choice((-3, -2, -1, 1, 2, 3))
        number = read.value
        value = number + (abs(delta) if number + delta < 0 <= number else delta)
        option = _number_text(value) + ("%" if read.percent else "")
        if wrong(option):
            return option
    items = answer.split()
    options = []
    if len(items) > 1:
        shuffled = items[:]
        rng.shuffle(shuffled)
        options += [" ".join(items[::-1]), " ".join(shuffled), " ".join(items[:-1])]
    if others:  # a few other gold answers of the domain: a wrong item of the right kind
        options += [rng.choice(others) for _ in range(8)]
    options = [o for o in options if wrong(o)]
    if options:
        return rng.choice(options)
    for option in (answer[::-1], f"not {answer}", f"{answer} + 1", f"not ({answer}) + 1"):
        if wrong(option):
            return option
    raise AssertionError(f"no wrong answer found for gold {answer!r} ({domain})")  # unreachable


def _number_text(value: Fraction) -> str:
    """A Fraction as exact text: 12, -2.5, 1/3.

    >>> _number_text(Fraction(5, 2)), _number_text(Fraction(-1, 3)), _number_text(Fraction(7))
    ('2.5', '-1/3', '7')
    """
    for k in range(0, 20):  # a decimal when one writes it exactly
        scaled = value * 10 ** k
        if scaled.denominator == 1:
            digits = str(abs(scaled.numerator)).rjust(k + 1, "0")
            whole, frac = digits[:len(digits) - k], digits[len(digits) - k:]
            return ("-" if value < 0 else "") + whole + (f".{frac}" if k else "")
    return f"{value.numerator}/{value.denominator}"


def preference_pair(record: dict, rng: random.Random, *, others: Sequence[str] = (),
                    wrong_fraction: float = 0.5) -> dict:
    """A DPO pair from a gold record: chosen right and well formed, rejected not.

    Rejected has a wrong answer (``wrong_fraction`` of the time) or a broken format:
    no tags at all, or the answer outside its tag.

    >>> rec = {"id": "1", "domain": "math", "source": "x", "prompt": "3 * 4?",
    ...        "reasoning": "3 * 4 = 12.", "answer": "12"}
    >>> pair = preference_pair(rec, random.Random(2))
    >>> pair["chosen"], pair["rejected_kind"], pair["rejected"]
    ('<reasoning>3 * 4 = 12.</reasoning>\\n<answer>12</answer><end_of_turn>', 'missing_tags',
     '3 * 4 = 12.\\n12<end_of_turn>')
    """
    reasoning, answer = record["reasoning"], record["answer"]
    if rng.random() < wrong_fraction:
        kind = "wrong_answer"
        rejected = format_completion(reasoning, wrong_answer(answer, rng, others,
                                                                domain=record["domain"]))
    else:
        kind = rng.choice(REJECTED_KINDS[1:])
        if kind == "missing_tags":
            rejected = f"{reasoning}\n{answer}{END_OF_TURN}".lstrip("\n")
        else:
            rejected = f"{REASONING_START}{reasoning}{REASONING_END}\n{answer}{END_OF_TURN}"
    return {**{k: record[k] for k in FIELDS}, "chosen": format_completion(reasoning, answer),
            "rejected": rejected, "rejected_kind": kind}


def as_completion(text: str) -> str:
    """A sampled answer as a DPO response: the text up to its end-of-turn, which closes it
    (the sampler stops on it and leaves it out).

    >>> as_completion("<answer>4</answer>"), as_completion("<answer>4</answer><end_of_turn>x")
    ('<answer>4</answer><end_of_turn>', '<answer>4</answer><end_of_turn>')
    """
    return text.split(END_OF_TURN)[0] + END_OF_TURN


def onpolicy_pair(record: dict, texts: Sequence[str], right: Sequence[bool],
                  verified: Sequence[bool]) -> dict | None:
    """A DPO pair from the policy's own answers to ``record``'s prompt, or None.

    ``right[i]``: the checker's verdict on ``texts[i]`` (evaluation's); ``verified[i]``: and
    its reasoning supports it. Rejected: the first wrong answer of exact format (the
    model's own error, not a broken format). Chosen: the first verified right answer of
    exact format; when there is none (all wrong, or right by luck), the gold trace. No
    pair without a wrong answer of exact format. ``chosen_from`` says which chosen it is,
    ``rights`` how many of the answers were right.

    >>> rec = {"id": "1", "domain": "math", "source": "x", "prompt": "3 * 4?",
    ...        "reasoning": "3 * 4 = 12.", "answer": "12"}
    >>> good = "<reasoning>3 * 4 = 12.</reasoning>\\n<answer>12</answer>"
    >>> bad = "<reasoning>3 * 4 = 13.</reasoning>\\n<answer>13</answer>"
    >>> pair = onpolicy_pair(rec, [bad, good], [False, True], [False, True])
    >>> pair["chosen"] == as_completion(good), pair["rejected"] == as_completion(bad), pair["chosen_from"]
    (True, True, 'policy')
    >>> onpolicy_pair(rec, [bad, bad], [False, False], [False, False])["chosen_from"]
    'gold'
    >>> onpolicy_pair(rec, [good, "13"], [True, False], [True, False]) is None  # no exact-format wrong one
    True
    """
    exact = [has_exact_format(t) for t in texts]
    wrong = next((t for t, r, e in zip(texts, right, exact, strict=True) if e and not r), None)
    if wrong is None:
        return None
    chosen = next((t for t, r, v, e in zip(texts, right, verified, exact, strict=True)
                   if r and v and e), None)
    return {**{k: record[k] for k in FIELDS},
            "chosen": (format_completion(record["reasoning"], record["answer"]) if chosen is None
                       else as_completion(chosen)),
            "rejected": as_completion(wrong), "rejected_kind": "own_wrong_answer",
            "chosen_from": "gold" if chosen is None else "policy", "rights": int(sum(right))}
