"""Each notebook's final check: did its stage do its job? Margins are stated in each docstring.

A check takes what the stage left (its metrics as :func:`reasonkit.train.read_metrics`
returns them, ``{name: (steps, values)}``, or scored completions) and raises
:class:`StageDidNotLearn` naming the numbers when the stage did not do what it is for,
e.g. trained with a learning rate of 1e-12, or left its adapters at their start, or
when it made held-out accuracy worse beyond noise (:func:`paired_fall`). It returns one
line saying what it checked, for the notebook to print.

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

from reasonkit.evaluate import paired_difference

__all__ = ["StageDidNotLearn", "quarters", "paired_fall", "check_sft", "check_dpo", "check_grpo",
           "check_stages", "CORRECTNESS", "HELD_OUT", "SFT_LOSS_DROP", "DPO_MIN_MARGIN", "DPO_MIN_ACCURACY",
           "GRPO_MIN_KL", "MIN_FORMAT_GAIN", "MAX_FALL_SES"]

Metrics = Mapping[str, tuple[Sequence[int], Sequence[float]]]

SFT_LOSS_DROP = 0.10  # the held-out loss at the end is at least this fraction below the start
DPO_MIN_MARGIN = 0.05  # the last quarter's mean reward margin is at least this
DPO_MIN_ACCURACY = 0.6  # and its preference accuracy (0.5 is a coin flip)
GRPO_MIN_KL = 1e-4  # the last quarter's mean KL to the reference is at least this
# GRPO's correctness rewards, as its metrics log them (a weight other than 1 adds "_x<w>")
CORRECTNESS = ("rewards/train/answer_correct", "rewards/train/answer_verified")
HELD_OUT = "held_out/accuracy"  # GRPO's greedy accuracy on held-out prompts, when it checks them
MIN_FORMAT_GAIN = 0.2  # SFT's held-out format pass is at least 20 points above the base's
MAX_FALL_SES = 2  # held-out accuracy may fall at most this many paired standard errors


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


def _rows(scored: Sequence[Any]) -> list[Mapping[str, Any]]:
    """Scored rows (``id``, ``correct``) as they are, or booleans in prompt order as rows."""
    return [x if isinstance(x, Mapping) else {"id": i, "correct": bool(x)} for i, x in enumerate(scored)]


def paired_fall(before: Sequence[Any], after: Sequence[Any], stage: str, was: str) -> str:
    """Raise :class:`StageDidNotLearn` when accuracy ``after`` is more than
    :data:`MAX_FALL_SES` (2) paired standard errors below ``before``; else say how it moved.

    ``before`` and ``after`` score the same prompts in the same order: rows with ``correct``
    (and ``id``, as :func:`reasonkit.evaluate.score_stage` writes them), or booleans. The
    difference is paired (:func:`reasonkit.evaluate.paired_difference`): a prompt both get
    right or both wrong adds no noise, so on 32 prompts it resolves a fall of a few points
    where two binomial standard errors of the block allow about 17. ``was`` names ``before``.

    >>> paired_fall([1, 1, 0, 0] * 8, [1, 1, 0, 0] * 8, "GRPO", "its start")
    'held-out accuracy 50.0% -> 50.0% on 32 prompts (paired: +0.0 ± 0.0 points)'
    >>> paired_fall([1, 1, 0, 0] * 8, [1, 0, 0, 0] * 8, "GRPO", "its start")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    reasonkit.notebook.StageDidNotLearn: GRPO: held-out accuracy 50.0% -> 25.0% on the same 32 prompts: ...
    """
    a, b = _rows(before), _rows(after)
    if len(a) != len(b) or len(a) < 2:
        raise ValueError(f"{stage}: before and after must score the same prompts, at least two: "
                         f"{len(a)} and {len(b)}")
    d = paired_difference(a, b)  # ids must match, or it raises
    acc = [sum(bool(r["correct"]) for r in rows) / len(rows) for rows in (a, b)]
    moved = f"held-out accuracy {acc[0]:.1%} -> {acc[1]:.1%}"
    if d["mean"] < -MAX_FALL_SES * d["se"]:
        raise StageDidNotLearn(f"{stage}: {moved} on the same {d['n']} prompts: {d['mean']:+.1f} points, "
                               f"more than {MAX_FALL_SES} paired standard errors "
                               f"({MAX_FALL_SES * d['se']:.1f} points) below {was}: the stage made "
                               "the model worse")
    return f"{moved} on {d['n']} prompts (paired: {d['mean']:+.1f} ± {d['se']:.1f} points)"


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


def check_dpo(metrics: Metrics, *, held_out: tuple[Sequence[Any], Sequence[Any]] | None = None) -> str:
    """DPO moved towards the chosen answers, and did not make held-out answers worse.

    - **Moved**: the mean reward margin of the last quarter of the steps is at least
      :data:`DPO_MIN_MARGIN` (0.05) and above the first quarter's, and the last quarter's
      preference accuracy is at least :data:`DPO_MIN_ACCURACY` (0.6).
    - **Not worse**, when ``held_out`` is given: ``(before, after)``, the per-prompt
      correctness of the same held-out prompts before DPO's first step (SFT's adapters)
      and after its last (rows with ``correct``, or booleans). DPO fails when its accuracy
      is more than two paired standard errors below SFT's (:func:`paired_fall`). A margin
      can rise on pairs a model never writes while its own answers get worse.
    """
    early, late, _ = quarters(_series(metrics, "train/rewards/margin", "DPO"))
    _, ranked, _ = quarters(_series(metrics, "train/rewards/accuracy", "DPO"))
    if not (late >= DPO_MIN_MARGIN and late > early):
        raise StageDidNotLearn(f"DPO: reward margin {early:.3f} (first quarter) -> {late:.3f} (last): it "
                               f"should rise, to at least {DPO_MIN_MARGIN}")
    if not ranked >= DPO_MIN_ACCURACY:
        raise StageDidNotLearn(f"DPO: preference accuracy {ranked:.2f} in the last quarter, under "
                               f"{DPO_MIN_ACCURACY}")
    line = f"checked: reward margin {early:.3f} -> {late:.3f}; preference accuracy {ranked:.2f} at the end"
    if held_out is not None:
        line += "; " + paired_fall(*held_out, "DPO", "SFT's")
    return line


def check_grpo(metrics: Metrics, *, correctness: str | None = None, held_out_prompts: int | None = None,
               held_out: tuple[Sequence[Any], Sequence[Any]] | None = None) -> str:
    """GRPO moved the policy, was paid for correct answers, and did not get worse at them.

    - **Moved**: the last quarter's mean KL to the reference is at least
      :data:`GRPO_MIN_KL` and above the first quarter's (0 at the first step).
    - **Paid for correctness**: ``correctness`` (the answer reward, as logged; default:
      the first of :data:`CORRECTNESS` logged) is among the rewards; a run on format
      rewards only fails here.
    - **Correctness did not fall**: its last-quarter mean is no more than three standard
      errors (of the difference of the two quarter means) below the first quarter's.
    - **Held-out accuracy did not fall**: with ``held_out``, ``(first, last)``, the
      per-prompt correctness of the held-out block at the first check and at the last
      (rows with ``correct``, or booleans), the last is no more than two *paired* standard
      errors below the first (:func:`paired_fall`). Without it, when GRPO logged its greedy
      accuracy on ``held_out_prompts`` held-out prompts (:data:`HELD_OUT`, at its start and
      every few steps), the last is no more than two binomial standard errors of that
      block below the first: a wider margin (about 17 points on 32 prompts at 35%), the
      fallback when the per-prompt results were not kept. A rise is not asserted: on the
      tiny preset GRPO's held-out gain is smaller than one prompt of a 32-prompt block
      (the line printed says how it moved).
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
    if held_out is not None:
        line += "; " + paired_fall(*held_out, "GRPO", "its first held-out check")
    elif HELD_OUT in metrics:
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
                 f"two standard errors {2 * se:.3f}, unpaired)")
    return line


def check_stages(results: Mapping[str, Mapping[str, Any]], stages: Sequence[str]) -> str:
    """Each stage differs from the one before it, SFT beats the base on format, and the last
    stage does not end below SFT.

    ``results`` is :func:`reasonkit.evaluate.evaluate_run`'s: per stage, ``rows`` (one per
    held-out prompt, with its greedy ``completion`` and whether it is ``correct``) and
    ``summary``. Greedy decoding is deterministic, so a stage whose adapters did not move
    from the one before writes the same greedy completion for every prompt: each stage
    must change at least one. SFT's format pass must be at least :data:`MIN_FORMAT_GAIN`
    (20 points) above the base's. The last stage after SFT (DPO or GRPO) must not end more
    than :data:`MAX_FALL_SES` (2) paired standard errors below SFT's accuracy on the same
    prompts (:func:`paired_fall`): a series that ends worse than SFT fails, so keep SFT.

    >>> from reasonkit.testing import fake_results
    >>> check_stages(fake_results(sft=(1.0, 0.5), grpo=(1.0, 0.3)), ["sft", "grpo"])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    reasonkit.notebook.StageDidNotLearn: GRPO: held-out accuracy 50.0% -> 30.0% on the same 100 prompts: ...
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
    last = stages[-1]
    if "sft" in stages and stages.index("sft") < len(stages) - 1:  # a stage after SFT
        line += f"; {last} against SFT: " + paired_fall(results["sft"]["rows"], results[last]["rows"],
                                                        last.upper(), "SFT's")
    return line
