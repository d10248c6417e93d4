"""Where and how a run runs: devices and meshes, the session, the run directory, compiles.

- :mod:`.mesh`: the one place mesh axes live; per-stage layouts, resharding, several hosts.
- :mod:`.hardware`: what this machine is (devices, memory, peak FLOP/s) and the time model.
- :mod:`.session`: the session (runs root, restored runs, deadline, compilation cache, the
  processes of several hosts).
- :mod:`.runs`: the run directory every stage reads and writes, and each stage's lifecycle.
- :mod:`.compiles`: counts XLA compilations, so a stage can show it compiles once.
"""

from reasonkit.runtime import compiles, hardware, mesh, runs, session

__all__ = ["compiles", "hardware", "mesh", "runs", "session"]
