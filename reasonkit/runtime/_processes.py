"""This process and the others of a run: which one writes, how they wait, what this one keeps.

On several hosts (a TPU pod slice, after :func:`reasonkit.runtime._mesh.init_distributed`)
process 0 writes the run's files and the others wait for it (:func:`is_writer`,
:func:`sync`, :func:`from_writer`); on one host all of these are trivial. On a CPU,
:func:`keep_step_memory` makes the one process-wide change reasonkit makes there, when the
preset's optimisations include it.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Sequence

import numpy as np

from reasonkit import presets
from reasonkit.tunix_patches import cpu_memory

__all__ = ["process_index", "is_writer", "sync", "from_writer", "keep_step_memory"]

_STEP_MEMORY = "cpu step memory"  # its name among reasonkit.config.OPTIMISATIONS


def _running_jax() -> Any:
    """The jax module once JAX is running (distributed, or its backends up), else None.

    Asking JAX for its processes earlier would start its backends, and
    ``jax.distributed.initialize`` must come before that.
    """
    jax = sys.modules.get("jax")
    if jax is None:
        return None
    if jax.distributed.is_initialized():
        return jax
    return jax if cpu_memory.backends_started() else None


def process_index() -> int:
    """This process's index among JAX's processes: 0 on one host, and before JAX has started."""
    jax = _running_jax()
    return jax.process_index() if jax is not None else 0


def is_writer() -> bool:
    """Does this process write the run's files (settings, metrics, markers, data, plots)?

    Process 0 does; the others only read them, and write only their shards of checkpoints.
    """
    return process_index() == 0


def sync(name: str) -> None:
    """Wait until every process gets here (after process 0 wrote what the others read next).

    A no-op on one process. Every process must call it, in the same order.
    """
    jax = _running_jax()
    if jax is None or jax.process_count() == 1:
        return
    from jax.experimental import multihost_utils

    multihost_utils.sync_global_devices(f"reasonkit: {name}")


def from_writer(flag: bool) -> bool:
    """Process 0's ``flag``, on every process; ``flag`` itself on one process.

    For decisions all processes must take together, such as stopping before a deadline
    (each host's clock and deadline may differ; one more step on one host alone would
    wait forever for the others). Every process must call it, in the same order.
    """
    jax = _running_jax()
    if jax is None or jax.process_count() == 1:
        return flag
    from jax.experimental import multihost_utils

    return bool(multihost_utils.broadcast_one_to_all(np.bool_(flag)))


def _preset_optimisations() -> tuple[str, ...] | None:
    """The optimisations of the preset this process runs (``$REASONKIT_PRESET`` with
    ``$REASONKIT_OVERRIDES``, as :func:`reasonkit.presets.get_preset` reads them), found
    without starting JAX's backends; None where that cannot be known yet and does not matter.

    ``"auto"`` picks from the devices JAX sees, and asking for them starts the backends,
    which the step memory must come before. The step memory acts where JAX runs on the CPU
    alone, and there ``"auto"`` is the CPU's preset; elsewhere it leaves the process as it
    is whatever the preset (None). A preset that does not exist, or overrides it refuses,
    fail here as they would in :func:`~reasonkit.presets.get_preset`.
    """
    name = os.environ.get("REASONKIT_PRESET") or "auto"
    if name == "auto":
        if cpu_memory.backends_started():
            name = presets.preset_name(name)
        elif cpu_memory.cpu_only():
            name = presets.auto_preset_name("cpu", "cpu", 1)
        else:
            return None
    return presets.get_preset(name, **presets.env_overrides()).optimisations


def keep_step_memory(optimisations: Sequence[str] | None = None, *, libc: Any = None) -> str:
    """On a CPU, each step reuses the last step's temporaries, when ``optimisations`` include
    ``"cpu step memory"``; returns the line that says what it did.

    ``optimisations`` default to the preset's (``$REASONKIT_PRESET`` with
    ``$REASONKIT_OVERRIDES``; ``REASONKIT_OVERRIDES='{"optimisations": []}'`` turns it off).
    The change (:func:`reasonkit.tunix_patches._cpu_memory.keep_step_memory`: glibc's malloc
    settings and JAX's CPU dispatch) is to the whole process and must come before JAX starts
    its backends, so :func:`reasonkit.runtime._session.start_session` makes it once, first in
    a session; a preset chosen later in the process cannot undo it (a fresh process, with the
    preset's ``optimisations=[]``, runs without it). ``libc`` is for tests.
    """
    wanted = _preset_optimisations() if optimisations is None else tuple(optimisations)
    if wanted is not None and _STEP_MEMORY not in wanted:
        return (f"step memory: left to glibc (optimisation {_STEP_MEMORY!r} is not among the preset's "
                "optimisations)")
    said = cpu_memory.keep_step_memory(libc=libc)
    if said.startswith("step memory: kept"):
        said += (f"; optimisation {_STEP_MEMORY!r}, for this whole process: a preset chosen later cannot "
                 "undo it (off with the preset's optimisations=[] before the session starts)")
    return said
