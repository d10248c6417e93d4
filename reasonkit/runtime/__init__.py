"""Where and how a run runs: the host, the session, devices and meshes, the run directory, compiles.

- :mod:`.platform`: the notebook host (Kaggle, Colab, elsewhere): where the runs and the
  attached inputs live; imported first, it quiets the stack's noise before Tunix loads.
- :mod:`.processes`: this process and the others of several hosts (which writes, how they
  wait), and the process-wide step memory on a CPU.
- :mod:`.session`: the session (runs root, restored runs, deadline, compilation cache);
  :func:`start_session` starts it, in every notebook once reasonkit is importable.
- :mod:`.mesh`: the one place mesh axes live; per-stage layouts, resharding, several hosts.
- :mod:`.hardware`: what this machine is (devices, memory, peak FLOP/s) and the time model.
- :mod:`.runs`: the run directory every stage reads and writes, and each stage's lifecycle.
- :mod:`.compiles`: counts XLA compilations, so a stage can show it compiles once.

Nothing here imports ``reasonkit_bootstrap`` (the notebooks' first cell), nor does it import
reasonkit: the bootstrap makes reasonkit importable, then the notebook starts the session.
"""

# First: importing platform quiets the stack's noise before anything below loads Tunix.
from reasonkit.runtime import platform

# isort: split
from reasonkit.runtime import compiles, hardware, mesh, processes, runs, session
from reasonkit.runtime.session import start_session

__all__ = ["compiles", "hardware", "mesh", "platform", "processes", "runs", "session", "start_session"]
