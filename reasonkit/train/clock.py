"""A stage's time budget: stop the batch stream in time for a clean save, and say when it ends.

:func:`until` passes batches on while another step and the final checkpoint still fit
before the session's deadline, and stops all processes together; :func:`eta` is the line
it prints once the step time is known: time per step, steps left, and whether the stage
ends before the deadline.
"""

from __future__ import annotations

import time
from typing import Any, Iterable, Iterator

from reasonkit.runtime.hardware import format_duration
from reasonkit.runtime.session import from_writer

__all__ = ["until", "eta"]


def until(stream: Iterable[Any], deadline: float | None, margin_s: float = 120.0, *,
          total: int | None = None, skip: int = 0, name: str = "training",
          warmup: int = 2) -> Iterator[Any]:
    """Yield from ``stream`` while there is time for another step before ``deadline``.

    The trainer stops when its data ends and saves a final checkpoint, so stopping the
    stream is a clean stop; re-running the notebook resumes from there. The margin
    grows to twice the slowest step seen, plus ``margin_s`` for the checkpoint write.
    ``deadline`` is the session's (:meth:`reasonkit.runtime.runs.RunDir.deadline`).

    With ``total`` (the stage's ``max_steps``), once ``warmup`` steps have run after the
    first (which compiles), it prints the measured time per step, when the stage should
    end and whether that is before the deadline. ``skip``: batches a resumed trainer
    reads and discards first (they take no step).
    """
    last, slowest, steady = time.time(), 0.0, []
    for i, item in enumerate(stream):
        # From one request to the next: the trainer's step on the batch before, and this fetch.
        now = time.time()
        gap, last = now - last, now
        slowest = max(slowest, gap)
        if i >= skip + 2:  # the step on batch i - 1 was not the first (compiling) one
            steady.append(gap)
            if total is not None and len(steady) == warmup and i < total:
                print(eta(name, sum(steady) / len(steady), i, total, deadline, now))
        # Several processes stop together, when process 0 says so.
        if from_writer(deadline is not None and now + 2 * slowest + margin_s > deadline):
            print("time budget: stopping cleanly" + (f", {deadline - now:.0f}s before the deadline"
                                                     if deadline is not None else ""))
            return
        yield item


def eta(name: str, per_step: float, done: int, total: int, deadline: float | None,
        now: float | None = None) -> str:
    """One line: the measured time per step, when the stage ends, and against the deadline.

    >>> print(eta("SFT", 2.0, 40, 240, deadline=1000.0, now=0.0))
    SFT: 2.00 s/step after warm-up; 200 steps left, 6.7 min: ends 10.0 min before the deadline
    >>> print(eta("GRPO", 10.0, 0, 100, deadline=500.0, now=0.0))  # doctest: +NORMALIZE_WHITESPACE
    GRPO: 10.0 s/step after warm-up; 100 steps left, 16.7 min: does NOT fit the deadline
    (8.3 min left): it stops cleanly near step 50; run again in a new session to resume
    """
    now = time.time() if now is None else now
    left = total - done
    need = left * per_step
    rate = f"{per_step:.3g} s/step" if per_step < 1 else f"{per_step:.2f} s/step" if per_step < 10 \
        else f"{per_step:.1f} s/step"
    line = f"{name}: {rate} after warm-up; {left} steps left, {format_duration(need)}"
    if deadline is None:
        return line + "; no deadline set"
    spare = deadline - now - need
    if spare >= 0:
        return line + f": ends {format_duration(spare)} before the deadline"
    reach = done + max(0, int((deadline - now) / per_step))
    return (line + f": does NOT fit the deadline ({format_duration(max(0.0, deadline - now))} left): "
            f"it stops cleanly near step {reach}; run again in a new session to resume")
