"""Where and how a run runs: the host, the session, devices and meshes, the run directory, compiles.

- :mod:`._platform`: the notebook host (Kaggle, Colab, elsewhere): where the runs and the
  attached inputs live; imported first, it quiets the stack's noise before Tunix loads.
- :mod:`._processes`: this process and the others of several hosts (which writes, how they
  wait), and the process-wide step memory on a CPU.
- :mod:`._session`: the session (runs root, restored runs, deadline, compilation cache);
  :func:`start_session` starts it, in every notebook once reasonkit is importable.
- :mod:`._mesh`: the one place mesh axes live; per-stage layouts, resharding, several hosts.
- :mod:`._hardware`: what this machine is (devices, memory, peak FLOP/s) and the time model.
- :mod:`._runs`: the run directory every stage reads and writes, and each stage's lifecycle.
- :mod:`._compiles`: counts XLA compilations, so a stage can show it compiles once.

Nothing here imports ``reasonkit_bootstrap`` (the notebooks' first cell), nor does it import
reasonkit: the bootstrap makes reasonkit importable, then the notebook starts the session.
"""

# First: importing platform quiets the stack's noise before anything below loads Tunix.
from reasonkit.runtime import _platform as platform

# isort: split
# The modules, as namespaces (``runtime.mesh.stage_mesh``), and the names used most, by name.
from reasonkit.runtime import _compiles as compiles
from reasonkit.runtime import _hardware as hardware
from reasonkit.runtime import _mesh as mesh
from reasonkit.runtime import _processes as processes
from reasonkit.runtime import _runs as runs
from reasonkit.runtime import _session as session
from reasonkit.runtime._compiles import CompileCounter
from reasonkit.runtime._hardware import HardwareInfo, detect, format_bytes, format_duration
from reasonkit.runtime._processes import from_writer, is_writer, sync
from reasonkit.runtime._runs import (
    NOTEBOOK_OF,
    RunDir,
    checkpoint_dir,
    finish_data,
    latest_step,
    open_jsonl,
    start_from,
    write_files,
)
from reasonkit.runtime._session import start_session

__all__ = ["compiles", "hardware", "mesh", "platform", "processes", "runs", "session", "start_session",
           "CompileCounter", "HardwareInfo", "detect", "format_bytes", "format_duration", "from_writer",
           "is_writer", "sync", "NOTEBOOK_OF", "RunDir", "checkpoint_dir", "finish_data", "latest_step",
           "open_jsonl", "start_from", "write_files"]
