"""A CPU process whose steps reuse their temporaries: JAX's dispatch and glibc's allocator.

:func:`keep_step_memory` is the one process-wide setting reasonkit changes on a CPU: the
optimisation ``"cpu step memory"`` of a preset's ``optimisations``, made when the session
starts (:func:`reasonkit.runtime._processes.keep_step_memory`, from
:func:`reasonkit.runtime._session.start_session`, printed there). It reads
``jax._src.xla_bridge`` (JAX 0.10.2) to know whether the backends started, which JAX has no
public way to ask.
"""

from __future__ import annotations

from typing import Any

import jax

__all__ = ["cpu_only", "keep_step_memory", "backends_started"]


def backends_started() -> bool:
    """Whether JAX's backends are initialised, asked without initialising them."""
    try:
        from jax._src import xla_bridge  # no public way to ask without starting the backends
    except ImportError:
        return False
    return getattr(xla_bridge, "backends_are_initialized", lambda: False)()


# glibc's mallopt parameters (<malloc.h>); a trim threshold of -1 "disables trimming
# completely" (mallopt(3)).
_M_TRIM_THRESHOLD, _M_MMAP_MAX, _NEVER = -1, -4, -1


def cpu_only(platforms: str | None = None) -> bool:
    """Will JAX run on the CPU alone here? Answered without starting its backends.

    Yes when ``platforms`` (default: ``JAX_PLATFORMS``, JAX's ``jax_platforms``) names
    ``cpu`` first, or when it names nothing and no accelerator's runtime is installed
    (neither ``libtpu`` nor a PJRT plugin, which is how JAX finds a GPU).

    >>> cpu_only("cpu"), cpu_only("cpu,tpu"), cpu_only("tpu,cpu"), cpu_only("cuda")
    (True, True, False, False)
    """
    import importlib.metadata
    import importlib.util
    import pkgutil

    platforms = jax.config.jax_platforms if platforms is None else platforms
    if platforms:
        return platforms.split(",")[0].strip() == "cpu"
    if importlib.util.find_spec("libtpu") or importlib.metadata.entry_points(group="jax_plugins"):
        return False
    try:
        import jax_plugins
    except ImportError:
        return True
    return not any(pkgutil.iter_modules(jax_plugins.__path__))


def keep_step_memory(libc: Any = None) -> str:
    """On a CPU, let each step reuse the last step's temporaries; returns what it did.

    XLA:CPU allocates a program's temporaries in one block per call (661 MiB for the tiny
    SFT step at [4, 1024]) and frees it after. glibc maps a block that large fresh from
    the kernel every time, so each step pays a page fault per 4 KiB it touches: 170,000
    faults, about half the step's CPU time spent in the kernel (docs/performance.md).
    Two changes keep the block instead:

    - JAX's CPU client runs each computation on the calling thread
      (``jax_cpu_enable_async_dispatch`` off), so the block comes from the main thread's
      malloc arena, not from a worker thread's, which maps anything over 64 MiB anyway;
    - glibc's main arena maps nothing (``M_MMAP_MAX`` 0) and gives nothing back to the
      kernel (``M_TRIM_THRESHOLD`` -1), so the freed block is still there for the next
      call, also when another program ran in between (a GRPO step's rollout, reference
      forward and update; the benchmark's two SFT steps). The cost: the process keeps
      the most it ever held, for later allocations to reuse (the tiny demo's largest
      process: 3.5 GiB at its peak).

    The numbers computed are the same, bit for bit. The flag must be set before JAX
    starts its backends, so call this first in a process (:func:`reasonkit.runtime._session.start_session`
    does, when the preset's optimisations include ``"cpu step memory"``); it never starts them
    itself. A process where JAX may use an accelerator (:func:`cpu_only`), whose backends
    started first, or without glibc is left as it is. ``libc`` is for tests.
    """
    import ctypes
    import platform as host

    if backends_started():
        if jax.default_backend() != "cpu":
            return f"step memory: left as it is on {jax.default_backend()}"
        if jax.config.read("jax_cpu_enable_async_dispatch"):
            return ("step memory: left to glibc (JAX's backends started before keep_step_memory; "
                    "call it first in a fresh process)")
    elif cpu_only():
        jax.config.update("jax_cpu_enable_async_dispatch", False)
    else:
        return "step memory: left as it is (JAX may use an accelerator here)"
    if libc is None:
        if host.libc_ver()[0] != "glibc":
            return "step memory: left to the allocator (not glibc)"
        libc = ctypes.CDLL(None)
    if not (libc.mallopt(_M_MMAP_MAX, 0) and libc.mallopt(_M_TRIM_THRESHOLD, _NEVER)):
        return "step memory: left to glibc (mallopt refused)"
    return ("step memory: kept between steps (computations on the calling thread; glibc keeps "
            "what is freed)")
