"""Where and how a run runs: devices and meshes, the session, the run directory, compiles.

- :mod:`.mesh`: the one place mesh axes live; per-stage layouts, resharding, several hosts.
- :mod:`.hardware`: what this machine is (devices, memory, peak FLOP/s) and the time model.
- :mod:`.session`: the session (runs root, restored runs, deadline, compilation cache, the
  processes of several hosts).
- :mod:`.runs`: the run directory every stage reads and writes, and each stage's lifecycle.
- :mod:`.compiles`: counts XLA compilations, so a stage can show it compiles once.
"""

from reasonkit.runtime import compiles, hardware, mesh, runs, session
from reasonkit.runtime.hardware import detect, format_duration
from reasonkit.runtime.mesh import init_distributed, make_mesh, stage_mesh
from reasonkit.runtime.runs import RunDir
from reasonkit.runtime.session import start_session

__all__ = ["compiles", "hardware", "mesh", "runs", "session", "detect", "format_duration",
           "init_distributed", "make_mesh", "stage_mesh", "RunDir", "start_session"]
