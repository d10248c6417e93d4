"""Each notebook's final check: did its stage do its job? Margins are stated in each docstring.

A check takes what the stage left (its metrics as :func:`reasonkit.train.read_metrics`
returns them, ``{name: (steps, values)}``, or scored completions) and raises
:class:`StageDidNotLearn` naming the numbers when the stage did not do what it is for,
e.g. trained with a learning rate of 1e-12, or left its adapters at their start. It
returns one line saying what it checked, for the notebook to print.

>>> flat = {"eval/loss": ([0, 10], [4.0, 3.8])}
>>> check_sft([{"format_ok": False}] * 3, [{"format_ok": True}] * 3, flat)  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
reasonkit.notebook.StageDidNotLearn: SFT: held-out loss 4.000 at step 0 -> 3.800 at step 10 (-5%): ...
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Mapping, Sequence

__all__ = ["StageDidNotLearn", "quarters", "check_sft", "check_dpo", "check_grpo", "check_stages",
           "CORRECTNESS", "HELD_OUT", "SFT_LOSS_DROP", "DPO_MIN_MARGIN", "DPO_MIN_ACCURACY", "GRPO_MIN_KL",
           "MIN_FORMAT_GAIN"]

Metrics = Mapping[str, tuple[Sequence[int], Sequence[float]]]

SFT_LOSS_DROP = 0.10  # the held-out loss at the end is at least this fraction below the start
DPO_MIN_MARGIN = 0.05  # the last quarter's mean reward margin is at least this
DPO_MIN_ACCURACY = 0.6  # and its preference accuracy (0.5 is a coin flip)
GRPO_MIN_KL = 1e-4  # the last quarter's mean KL to the reference is at least this
# GRPO's correctness rewards, as its metrics log them (a weight other than 1 adds "_x<w>")
CORRECTNESS = ("rewards/train/answer_correct", "rewards/train/answer_verified")
HELD_OUT = "held_out/accuracy"  # GRPO's greedy accuracy on held-out prompts, when it checks them
MIN_FORMAT_GAIN = 0.2  # SFT's held-out format pass is at least 20 points above the base's


class StageDidNotLearn(AssertionError):
    """A stage's final check failed: the message says which numbers, and what they should be."""


def _series(metrics: Metrics, name: str, stage: str) -> list[float]:
    if name not in metrics:
        raise StageDidNotLearn(f"{stage}: no {name!r} in its metrics (logged: {sorted(metrics)})")
    values = [float(v) for v in metrics[name][1]]
    if len(values) < 2:
        raise StageDidNotLearn(f"{stage}: {name!r} has {len(values)} value(s); a check needs two")
    return values


def quarters(values: Sequence[float]) -> tuple[float, float, int]:
    """``(first, last, n)``: the means of the first and the last quarter (``n`` values each,
    at least 1 and at most half) of ``values``.

    >>> quarters([0, 0, 1, 1, 2, 2, 3, 3])
    (0.0, 3.0, 2)
    """
    n = min(max(1, len(values) // 4), max(1, len(values) // 2))
    return statistics.fmean(values[:n]), statistics.fmean(values[-n:]), n


def check_sft(before: Sequence[Mapping[str, Any]], after: Sequence[Mapping[str, Any]],
              metrics: Metrics) -> str:
    """SFT taught the format: more of the held-out answers ``after`` SFT are in the exact
    format than ``before`` it (the base), and at least two of them; and the held-out loss at
    the last evaluation is at least :data:`SFT_LOSS_DROP` (10%) below the one before the
    first step. ``before`` and ``after`` are scored completions (``format_ok``) of the same
    prompts."""
    if len(before) != len(after) or not after:
        raise ValueError(f"before and after must score the same prompts: {len(before)} vs {len(after)}")
    base_ok, sft_ok = sum(bool(r["format_ok"]) for r in before), sum(bool(r["format_ok"]) for r in after)
    if not (sft_ok > base_ok and sft_ok >= min(2, len(after))):
        raise StageDidNotLearn(f"SFT: format {base_ok} of {len(before)} before, {sft_ok} after: "
                               "it should rise, to at least 2")
    steps, losses = metrics.get("eval/loss", ([], []))
    if len(losses) < 2:
        raise StageDidNotLearn(f"SFT: {len(losses)} held-out loss(es) logged; a check needs two")
    first, last = losses[steps.index(min(steps))], losses[steps.index(max(steps))]
    if not last <= (1 - SFT_LOSS_DROP) * first:
        raise StageDidNotLearn(f"SFT: held-out loss {first:.3f} at step {min(steps)} -> {last:.3f} at step "
                               f"{max(steps)} ({last / first - 1:+.0%}): not {SFT_LOSS_DROP:.0%} lower")
    return (f"checked: format {base_ok} -> {sft_ok} of {len(after)}; held-out loss {first:.3f} -> "
            f"{last:.3f} ({last / first - 1:+.0%})")


def check_dpo(metrics: Metrics) -> str:
    """DPO moved towards the chosen answers: the mean reward margin of the last quarter of
    the steps is at least :data:`DPO_MIN_MARGIN` (0.05) and above the first quarter's, and
    the last quarter's preference accuracy is at least :data:`DPO_MIN_ACCURACY` (0.6)."""
    early, late, _ = quarters(_series(metrics, "train/rewards/margin", "DPO"))
    _, ranked, _ = quarters(_series(metrics, "train/rewards/accuracy", "DPO"))
    if not (late >= DPO_MIN_MARGIN and late > early):
        raise StageDidNotLearn(f"DPO: reward margin {early:.3f} (first quarter) -> {late:.3f} (last): it "
                               f"should rise, to at least {DPO_MIN_MARGIN}")
    if not ranked >= DPO_MIN_ACCURACY:
        raise StageDidNotLearn(f"DPO: preference accuracy {ranked:.2f} in the last quarter, under "
                               f"{DPO_MIN_ACCURACY}")
    return f"checked: reward margin {early:.3f} -> {late:.3f}; preference accuracy {ranked:.2f} at the end"


def check_grpo(metrics: Metrics, *, correctness: str | None = None,
               held_out_prompts: int | None = None) -> str:
    """GRPO moved the policy, was paid for correct answers, and did not get worse at them.

    - **Moved**: the last quarter's mean KL to the reference is at least
      :data:`GRPO_MIN_KL` and above the first quarter's (0 at the first step).
    - **Paid for correctness**: ``correctness`` (the answer reward, as logged; default:
      the first of :data:`CORRECTNESS` logged) is among the rewards; a run on format
      rewards only fails here.
    - **Correctness did not fall**: its last-quarter mean is no more than three standard
      errors (of the difference of the two quarter means) below the first quarter's.
    - **Held-out accuracy did not fall**: when GRPO logged its greedy accuracy on
      ``held_out_prompts`` held-out prompts (:data:`HELD_OUT`, at its start and every few
      steps), the last is no more than two binomial standard errors of that block below
      the first. A rise is not asserted: on the tiny preset GRPO's held-out gain is
      smaller than one prompt of a 32-prompt block (the line printed says how it moved).
    """
    kl_early, kl_late, _ = quarters(_series(metrics, "actor/train/kl", "GRPO"))
    if not (kl_late >= GRPO_MIN_KL and kl_late > kl_early):
        raise StageDidNotLearn(f"GRPO: KL to the reference {kl_early:.2e} -> {kl_late:.2e}: the policy "
                               f"did not move (at least {GRPO_MIN_KL:g} at the end)")
    if correctness is None:
        correctness = next((k for k in sorted(metrics) if k.startswith(CORRECTNESS)), CORRECTNESS[0])
    if correctness not in metrics:
        raise StageDidNotLearn(f"GRPO: no {correctness!r} in its metrics: no reward paid for right answers "
                               f"(logged: {sorted(k for k in metrics if k.startswith('rewards/'))}); "
                               "a reward of your own that does: correctness='rewards/train/<its name>'")
    correct = _series(metrics, correctness, "GRPO")
    early, late, n = quarters(correct)
    noise = 3 * statistics.stdev(correct) * math.sqrt(2 / n)
    if not late >= early - noise:
        raise StageDidNotLearn(f"GRPO: {correctness} fell from {early:.3f} to {late:.3f} "
                               f"(noise ±{noise:.3f})")
    line = (f"checked: KL {kl_early:.4f} -> {kl_late:.4f}; {correctness.rsplit('/', 1)[-1]} "
            f"{early:.3f} -> {late:.3f} ({late - early:+.3f}, noise ±{noise:.3f})")
    if HELD_OUT in metrics:
        if not held_out_prompts or held_out_prompts < 1:
            raise ValueError(f"held_out_prompts={held_out_prompts!r}: the size of GRPO's held-out block "
                             "(grpo.eval_prompts) is needed to judge its accuracy")
        steps, accuracy = metrics[HELD_OUT]
        if len(accuracy) < 2:
            raise StageDidNotLearn(f"GRPO: {len(accuracy)} held-out check(s) logged; a check needs two")
        first, last = accuracy[0], accuracy[-1]
        se = math.sqrt(max(first * (1 - first), 1 / held_out_prompts) / held_out_prompts)
        if not last >= first - 2 * se:
            raise StageDidNotLearn(f"GRPO: held-out accuracy fell from {first:.3f} at step {steps[0]} to "
                                   f"{last:.3f} at step {steps[-1]} (two standard errors: {2 * se:.3f})")
        line += (f"; held-out accuracy {first:.3f} -> {last:.3f} (best {max(accuracy):.3f}, "
                 f"two standard errors {2 * se:.3f})")
    return line


def check_stages(results: Mapping[str, Mapping[str, Any]], stages: Sequence[str]) -> str:
    """Each stage differs from the one before it, and SFT beats the base on format.

    ``results`` is :func:`reasonkit.evaluate.evaluate_run`'s: per stage, ``rows`` (one per
    held-out prompt, with its greedy ``completion``) and ``summary``. Greedy decoding is
    deterministic, so a stage whose adapters did not move from the one before writes the
    same greedy completion for every prompt: each stage must change at least one. SFT's
    format pass must be at least :data:`MIN_FORMAT_GAIN` (20 points) above the base's.
    """
    changed = []
    for prev, cur in zip(stages, stages[1:], strict=False):  # consecutive pairs
        a, b = results[prev]["rows"], results[cur]["rows"]
        if len(a) != len(b):
            raise ValueError(f"{prev} and {cur} were scored on {len(a)} and {len(b)} prompts")
        n = sum(x["completion"] != y["completion"] for x, y in zip(a, b, strict=True))
        if n == 0:
            raise StageDidNotLearn(f"{cur}: all {len(b)} greedy completions are {prev}'s: the stage "
                                   "did not change the model")
        changed.append(f"{prev}->{cur} {n}/{len(b)}")
    line = f"checked: changed greedy answers {', '.join(changed)}"
    if "base" in stages and "sft" in stages:
        base = results["base"]["summary"]["overall"]["format_rate"]
        sft = results["sft"]["summary"]["overall"]["format_rate"]
        if not sft >= base + MIN_FORMAT_GAIN:
            raise StageDidNotLearn(f"SFT: format pass {sft:.1%} against the base's {base:.1%}: not "
                                   f"{MIN_FORMAT_GAIN * 100:.0f} points above it")
        line += f"; format pass base {base:.1%} -> SFT {sft:.1%}"
    return line
