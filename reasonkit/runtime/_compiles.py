"""Count XLA compilations, so a stage can show it compiles once and then never again.

XLA compiles one program per input shape. A batch whose shape differs from the last
(a longer prompt, a smaller last batch) compiles again: seconds on a CPU, minutes for
Gemma on a TPU, every time. JAX reports each backend compilation as the
``/jax/core/compile/backend_compile_duration`` event of :mod:`jax.monitoring`, with the
function's name; a :class:`CompileCounter` listens to it while it is open.

>>> import jax, jax.numpy as jnp
>>> @jax.jit
... def double(x):
...     return 2 * x
>>> three, four = jnp.ones(3), jnp.ones(4)
>>> with CompileCounter() as counter:
...     _ = double(three)   # compiles
...     _ = double(three)   # cached: same shape
...     _ = double(four)    # a new shape compiles again
>>> counter.count, counter.names
(2, ['jit(double)', 'jit(double)'])

Each compilation is also one :class:`Program`: its name and the seconds JAX spent tracing
it to a jaxpr, lowering it to StableHLO and compiling it in the backend (a program the
persistent cache holds is loaded, not compiled: ``cached``). :meth:`CompileCounter.line`
says it in one line, the programs that cost most first.

:meth:`CompileCounter.watch` wraps a stage's batch stream and marks the end of the
warm-up (by default: once the first step has run), so ``after_warmup`` counts only the
compilations that a steady state should not have. A step whose shapes its batch does not
show (GRPO's batches are text; the length buckets are chosen inside the step) says which
shape it runs with :func:`step_shape`: the first step of each such shape is warm-up too.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Iterator

import jax

__all__ = ["EVENT", "step_shape", "Program", "CompileCounter"]

EVENT = "/jax/core/compile/backend_compile_duration"
# JAX 0.10's other compile events (jax._src.dispatch): a function traced to a jaxpr, a jaxpr
# lowered to a module, and (an event without duration) a program loaded from the persistent cache.
TRACE_EVENT = "/jax/core/compile/jaxpr_trace_duration"
LOWER_EVENT = "/jax/core/compile/jaxpr_to_mlir_module_duration"
CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"
_PING = "/reasonkit/compiles/ping"
_SHAPE = "/reasonkit/compiles/step_shape"


def step_shape(key: Any) -> None:
    """Tell every open :class:`CompileCounter` that the step in progress runs shape ``key``.

    For shapes chosen inside a step, which :meth:`CompileCounter.watch` cannot see in its
    batch: the first step of each ``key`` not reported before counts as warm-up (it
    compiles for it), later ones do not. Sent as a :mod:`jax.monitoring` event, as the
    compilations are, so the code choosing shapes needs no counter in hand.
    """
    jax.monitoring.record_event_duration_secs(_SHAPE, 0.0, shape=repr(key))


@dataclasses.dataclass
class Program:
    """One XLA compilation: the function, and the seconds of each phase that led to it.

    ``trace`` is the longest trace since the program before (an outer function's trace holds
    those of the functions it calls), ``lower`` the lowering, ``compile`` the backend's.

    >>> Program("jit(train_step)", trace=1.0, lower=2.5, compile=40.0).label
    'train_step'
    """

    name: str
    trace: float = 0.0
    lower: float = 0.0
    compile: float = 0.0
    cached: bool = False  # loaded from the persistent compilation cache, not compiled

    @property
    def label(self) -> str:
        return self.name[4:-1] if self.name.startswith("jit(") and self.name.endswith(")") else self.name

    @property
    def seconds(self) -> float:
        return self.trace + self.lower + self.compile

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "trace_s": round(self.trace, 3), "lower_s": round(self.lower, 3),
                "compile_s": round(self.compile, 3), "cached": self.cached}


class CompileCounter:
    """Counts backend compilations (process-wide) between ``__enter__`` and ``__exit__``."""

    def __init__(self) -> None:
        self.count = 0
        self.names: list[str] = []
        self.warm_at: int | None = None  # count when the warm-up ended
        self.seconds = 0.0  # total compile time seen
        self.shapes = 0  # distinct batch shapes seen by watch()
        self.step_shapes: set[str] = set()  # distinct shapes steps reported (step_shape)
        self.programs: list[Program] = []  # one per compilation, in order
        self._trace, self._lower, self._hit = 0.0, 0.0, False  # the program in progress
        self._pinged = False
        self._watching, self._last_warm = False, True
        self._after, self._mark, self._after_names = 0, 0, []

    def _listen(self, event: str, duration: float, **kwargs: Any) -> None:
        if event == _PING:
            self._pinged = True
        elif event == _SHAPE:
            if self._watching and kwargs["shape"] not in self.step_shapes:
                self._last_warm = True  # the step in progress compiles for a new shape
            self.step_shapes.add(kwargs["shape"])
        elif event == TRACE_EVENT:
            self._trace = max(self._trace, duration)
        elif event == LOWER_EVENT:
            self._lower += duration
        elif event == EVENT:
            self.count += 1
            self.seconds += duration
            self.names.append(str(kwargs.get("fun_name", "?")))
            self.programs.append(Program(self.names[-1], self._trace, self._lower, duration, self._hit))
            self._trace, self._lower, self._hit = 0.0, 0.0, False

    def _hit_listen(self, event: str, **kwargs: Any) -> None:
        if event == CACHE_HIT_EVENT:
            self._hit = True  # the backend event that follows loads it

    def _registered(self) -> bool:
        self._pinged = False  # only public API: send an event and see whether it arrives
        jax.monitoring.record_event_duration_secs(_PING, 0.0)
        return self._pinged

    def _ensure(self) -> None:
        # Tunix's MetricsLogger.close() clears every jax.monitoring listener: re-register.
        if not self._registered():
            jax.monitoring.register_event_duration_secs_listener(self._listen)
            jax.monitoring.register_event_listener(self._hit_listen)

    def __enter__(self) -> "CompileCounter":
        self._ensure()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._registered():
            jax.monitoring.unregister_event_duration_listener(self._listen)
            try:
                jax.monitoring.unregister_event_listener(self._hit_listen)
            except Exception:  # noqa: BLE001 - cleared with the others (Tunix's logger closing)
                pass

    def mark_warm(self) -> None:
        """From now on, compilations count as ``after_warmup``."""
        self.warm_at = self.count
        self._after, self._mark = 0, self.count
        self._after_names: list[str] = []

    def _settle(self, warm: bool) -> None:
        # compilations since the last batch was handed out belong to that batch's step
        if not warm and self.warm_at is not None:
            self._after += self.count - self._mark
            self._after_names += self.names[self._mark:self.count]
        self._mark = self.count

    @property
    def after_warmup(self) -> int | None:
        """Compilations after the warm-up (None if it never ended).

        Under :meth:`watch`, the first step of each new batch shape is warm-up too (one
        compilation per bucket is expected); every other compilation counts.
        """
        if self.warm_at is None:
            return None
        if self._watching:
            return self._after + (0 if self._last_warm else self.count - self._mark)
        return self.count - self.warm_at

    @property
    def names_after_warmup(self) -> list[str]:
        if self.warm_at is None:
            return []
        if self._watching:
            tail = [] if self._last_warm else self.names[self._mark:self.count]
            return self._after_names + tail
        return self.names[self.warm_at:]

    def watch(self, stream: Iterable[Any], warmup_steps: int = 1, skip: int = 0) -> Iterator[Any]:
        """Yield from ``stream``, attributing compilations to the step of each batch.

        A trainer asks for the next batch after it finished the step before, so what
        compiles between two requests belongs to the step of the first. Warm-up: the
        first ``warmup_steps`` steps (and whatever the trainer compiles before them),
        the first step of every batch shape not seen before, and the first step of every
        shape a step reports with :func:`step_shape`. ``skip``: batches a resumed trainer
        reads and discards first.
        """
        self._watching, seen = True, set()
        self.shapes = 0
        self.step_shapes = set()
        for i, item in enumerate(stream):
            self._ensure()
            if i == skip + warmup_steps:
                self.mark_warm()
            elif i > skip + warmup_steps:
                self._settle(self._last_warm)
            shape = _signature(item)
            self._last_warm = i < skip + warmup_steps or shape not in seen
            seen.add(shape)
            self.shapes = len(seen)
            yield item
        if self.warm_at is None:
            self.mark_warm()  # the stream ended within the warm-up: nothing after it
            self._last_warm = True

    @property
    def compiled(self) -> int:
        """Programs the backend compiled (the others were loaded from the persistent cache)."""
        return sum(not p.cached for p in self.programs)

    def line(self, top: int = 3) -> str:
        """The compilations in one line: how many, their seconds, the costliest programs.

        >>> c = CompileCounter()
        >>> c.programs = [Program("jit(train_step)", 2.0, 3.0, 36.0),
        ...               Program("jit(eval_step)", 1.0, 1.0, 4.0),
        ...               Program("jit(equal)", 0.0, 0.0, 0.1, cached=True)]
        >>> for part in c.line().split(": ", 1):
        ...     print(part)
        compiled 2 programs in 47.1 s (trace 3.0, lower 4.0, backend 40.1), 1 loaded from the cache
        train_step 41.0 s, eval_step 6.0 s, equal 0.1 s
        """
        if not self.programs:
            return "compiled nothing"
        by_name: dict[str, float] = {}
        for p in self.programs:
            by_name[p.label] = by_name.get(p.label, 0.0) + p.seconds
        ranked = sorted(by_name.items(), key=lambda kv: -kv[1])
        parts = [f"{name} {sec:.1f} s" for name, sec in ranked[:top]]
        if len(ranked) > top:
            parts.append(f"{len(ranked) - top} others {sum(s for _, s in ranked[top:]):.1f} s")
        total = [sum(getattr(p, k) for p in self.programs) for k in ("trace", "lower", "compile")]
        cached = len(self.programs) - self.compiled
        return (f"compiled {self.compiled} programs in {sum(total):.1f} s (trace {total[0]:.1f}, lower "
                f"{total[1]:.1f}, backend {total[2]:.1f})"
                + (f", {cached} loaded from the cache" if cached else "") + ": " + ", ".join(parts))

    def summary(self) -> dict[str, Any]:
        """``{"total", "after_warmup", "shapes", "step_shapes", "names_after_warmup", "seconds",
        "compiled", "programs"}`` for logs."""
        return {"total": self.count, "after_warmup": self.after_warmup, "shapes": self.shapes,
                "step_shapes": sorted(self.step_shapes),
                "names_after_warmup": sorted(set(self.names_after_warmup)),
                "seconds": round(self.seconds, 2), "compiled": self.compiled,
                "programs": [p.to_dict() for p in self.programs], "line": self.line()}


def _signature(batch: Any) -> Any:
    """The shapes and dtypes of a batch's arrays (what XLA compiles for)."""
    if isinstance(batch, dict):
        return tuple(sorted((k, _signature(v)) for k, v in batch.items()))
    shape = getattr(batch, "shape", None)
    if shape is not None:
        dtype = getattr(batch, "dtype", "")
        # Text (GRPO's prompts) is tokenized and padded before XLA sees it: '<U37' vs '<U41'
        # is the longest string in the batch, not a new shape.
        if getattr(dtype, "kind", None) in ("U", "S", "O"):
            return tuple(shape), "text"
        return tuple(shape), str(dtype)
    if isinstance(batch, (list, tuple)):
        return tuple(_signature(v) for v in batch)
    return type(batch).__name__
