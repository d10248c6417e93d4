"""A stage's time budget: stop the batch stream in time for a clean save, and say when it ends.

:func:`until` passes batches on while another step and the final checkpoint still fit
before the session's deadline, and stops all processes together; :func:`eta` is the line
it prints once the step time is known: time per step, steps left, and whether the stage
ends before the deadline. The time per step comes from steps that compiled nothing:
a step that compiles (the first, and with a compile counter each step of a new batch
shape or length bucket) can take a hundred times a steady one, so those are counted
apart.
"""

from __future__ import annotations

import time
from typing import Any, Iterable, Iterator

from reasonkit.runtime import CompileCounter, format_duration, from_writer

__all__ = ["until", "eta"]


def _warm_state(counter: CompileCounter | None) -> tuple[int, int, int] | None:
    """What changes when a step compiles: compilations, batch shapes, step shapes seen."""
    if counter is None:
        return None
    return counter.count, counter.shapes, len(counter.step_shapes)


def until(stream: Iterable[Any], deadline: float | None, margin_s: float = 120.0, *,
          total: int | None = None, skip: int = 0, name: str = "training",
          warmup: int = 2, counter: CompileCounter | None = None) -> Iterator[Any]:
    """Yield from ``stream`` while there is time for another step before ``deadline``.

    The trainer stops when its data ends and saves a final checkpoint, so stopping the
    stream is a clean stop; re-running the notebook resumes from there. The margin
    grows to twice the slowest step seen, plus ``margin_s`` for the checkpoint write.
    ``deadline`` is the session's (:meth:`reasonkit.runtime._runs.RunDir.deadline`).

    With ``total`` (the stage's ``max_steps``), once ``warmup`` steady steps have run, it
    prints the measured time per step, when the stage should end and whether that is
    before the deadline. Steady: not the first step (it compiles), and, with ``counter``
    (a :class:`~reasonkit.runtime._compiles.CompileCounter` watching the same stream), no
    step during which the counter saw a compilation, a new batch shape or a new step shape
    (GRPO's length buckets): those are warm-up, their time counted apart and named in the
    line. ``skip``: batches a resumed trainer reads and discards first (they take no step).
    """
    last, slowest, steady = time.time(), 0.0, []
    state = _warm_state(counter)
    compiling = [0, 0.0]  # warm-up steps (the first included) and their seconds
    for i, item in enumerate(stream):
        # From one request to the next: the trainer's step on the batch before, and this fetch.
        now = time.time()
        gap, last = now - last, now
        slowest = max(slowest, gap)
        before, state = state, _warm_state(counter)
        if i > skip:  # the trainer's step on batch i - 1 (not a discarded batch) ran
            # The first step compiles; another that compiled or met a new shape is warm-up too.
            if i == skip + 1 or before != state:
                compiling[0] += 1
                compiling[1] += gap
            else:
                steady.append(gap)
                if total is not None and len(steady) == warmup and i < total:
                    print(eta(name, sum(steady) / len(steady), i, total, deadline, now,
                              compiled=tuple(compiling) if counter is not None else None))
        # Several processes stop together, when process 0 says so.
        if from_writer(deadline is not None and now + 2 * slowest + margin_s > deadline):
            print("time budget: stopping cleanly" + (f", {deadline - now:.0f}s before the deadline"
                                                     if deadline is not None else ""))
            return
        yield item


def eta(name: str, per_step: float, done: int, total: int, deadline: float | None,
        now: float | None = None, compiled: tuple[int, float] | None = None) -> str:
    """One line: the measured time per step, when the stage ends, and against the deadline.

    ``compiled``: ``(steps, seconds)`` of the warm-up steps (the first, and those that
    compiled), left out of the time per step and named in the line; a new shape met later
    compiles on top of the ETA.

    >>> print(eta("SFT", 2.0, 40, 240, deadline=1000.0, now=0.0))
    SFT: 2.00 s/step after warm-up; 200 steps left, 6.7 min: ends 10.0 min before the deadline
    >>> print(eta("GRPO", 10.0, 0, 100, deadline=500.0, now=0.0))  # doctest: +NORMALIZE_WHITESPACE
    GRPO: 10.0 s/step after warm-up; 100 steps left, 16.7 min: does NOT fit the deadline
    (8.3 min left): it stops cleanly near step 50; run again in a new session to resume
    >>> print(eta("GRPO", 1.5, 10, 200, deadline=None, compiled=(4, 95.0)))  # doctest: +NORMALIZE_WHITESPACE
    GRPO: 1.50 s/step after warm-up (not counted: 4 steps that compiled, 95 s); 190 steps left,
    4.8 min; no deadline set
    """
    now = time.time() if now is None else now
    left = total - done
    need = left * per_step
    rate = f"{per_step:.3g} s/step" if per_step < 1 else f"{per_step:.2f} s/step" if per_step < 10 \
        else f"{per_step:.1f} s/step"
    apart = "" if compiled is None else (
        f" (not counted: {compiled[0]} step{'s' * (compiled[0] != 1)} that compiled, "
        f"{format_duration(compiled[1])})")
    line = f"{name}: {rate} after warm-up{apart}; {left} steps left, {format_duration(need)}"
    if deadline is None:
        return line + "; no deadline set"
    spare = deadline - now - need
    if spare >= 0:
        return line + f": ends {format_duration(spare)} before the deadline"
    reach = done + max(0, int((deadline - now) / per_step))
    return (line + f": does NOT fit the deadline ({format_duration(max(0.0, deadline - now))} left): "
            f"it stops cleanly near step {reach}; run again in a new session to resume")
