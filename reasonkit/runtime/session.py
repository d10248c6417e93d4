"""The session a stage runs in: the runs root, restored runs, the deadline, the processes.

A session is one start of the machine (or container) the kernel runs on.
:func:`start_session`, which every notebook's first cell calls, mounts Google Drive on
Colab (the runs live there by default: each Colab notebook runs in its own runtime),
restores runs found in attached Kaggle inputs into the runs root (never replacing work
already there, and saying what each run holds, or where it looked when it found none), points
JAX's persistent compilation cache at ``runs/.jax_cache`` (a resumed session loads what
an earlier one compiled), fixes the session's deadline (every notebook and stage of the
session reads the same one from ``runs/session.json``, :func:`session_deadline`), and on a
CPU makes the one process-wide change reasonkit makes there
(:func:`reasonkit.tunix_patches.cpu_memory.keep_step_memory`, printed). On several hosts,
process 0 writes the runs and the others wait for it (:func:`is_writer`, :func:`sync`).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import math
import os
import pathlib
import re
import shutil
import sys
import time
import warnings
from typing import Any, Callable, Mapping, TypeVar

import numpy as np

import reasonkit_bootstrap  # the one list of where Kaggle mounts inputs (standard library only)

# The stack's messages that are noise in a notebook and say nothing true about this setup:
# (warning category, start of its message). tqdm asks for ipywidgets (its bars print as text);
# JAX deprecates `with mesh:`, which Tunix 0.1.7's examples and ours still use.
QUIET_WARNINGS = ((Warning, "IProgress not found"),
                  (DeprecationWarning, "`with mesh:` context manager has been deprecated"))
# absl lines (Tunix logs through absl): the TPU rollout's device scan, on any other device.
QUIET_ABSL = ("Skipping non-TPU device",)
# C++ logs of XLA and gRPC below warnings (the TCP and platform notes of its start-up).
QUIET_ENV = {"TF_CPP_MIN_LOG_LEVEL": "2", "GRPC_VERBOSITY": "ERROR"}


def quiet_infrastructure(env: dict[str, str] | None = None) -> None:
    """Silence the messages above, and only those; a variable already set is left as it is.

    Runs when this module is imported, before anything imports Tunix (runs.py imports this
    module first), so that the first cell prints what it set up and not these.
    """
    env = os.environ if env is None else env
    for category, start in QUIET_WARNINGS:
        warnings.filterwarnings("ignore", message=re.escape(start), category=category)
    absl = logging.getLogger("absl")
    if not any(isinstance(f, _Quiet) for f in absl.filters):
        absl.addFilter(_Quiet())
    for name, value in QUIET_ENV.items():
        env.setdefault(name, value)


class _Quiet(logging.Filter):
    """Drops the absl lines of :data:`QUIET_ABSL`."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(QUIET_ABSL)


quiet_infrastructure()

from reasonkit.tunix_patches import cpu_memory  # noqa: E402 - after the filters: it imports Tunix

__all__ = ["STAGES", "KAGGLE_WORKING", "KAGGLE_INPUT", "COLAB_DRIVE", "SESSION_FILE", "CACHE_DIR",
           "KAGGLE_HOURS", "MAX_HOURS", "default_root", "process_index", "is_writer", "sync",
           "from_writer", "session_id", "parse_hours", "on_kaggle", "session_deadline",
           "MIN_COMPILE_ENV", "use_compilation_cache", "restore_runs", "run_holds", "on_colab",
           "COLAB_RUNS", "mount_drive", "Session", "holds_no_file", "start_session", "QUIET_WARNINGS",
           "QUIET_ABSL", "QUIET_ENV", "quiet_infrastructure"]

STAGES = ("data", "sft", "dpo", "grpo", "eval")  # what a run directory holds, in order
T = TypeVar("T")


KAGGLE_WORKING = pathlib.Path("/kaggle/working")


KAGGLE_INPUT = pathlib.Path(reasonkit_bootstrap.KAGGLE_INPUT)  # or $REASONKIT_KAGGLE_INPUT


COLAB_DRIVE = pathlib.Path("/content/drive")


COLAB_RUNS = "MyDrive/reasonkit-runs"  # the runs root on Colab, under COLAB_DRIVE


SESSION_FILE = "session.json"


CACHE_DIR = ".jax_cache"


KAGGLE_HOURS = 8.5  # Kaggle stops a session after 9 hours; the rest is for saving the outputs


MAX_HOURS = 24 * 365


def default_root(env: Mapping[str, str] | None = None) -> pathlib.Path:
    """``$REASONKIT_RUNS``; else /kaggle/working/runs on Kaggle; else on Colab a folder on
    Google Drive (``/content/drive/MyDrive/reasonkit-runs``: each Colab notebook gets a
    runtime of its own, whose disk the next notebook never sees); else ./runs."""
    env = os.environ if env is None else env
    if env.get("REASONKIT_RUNS"):
        return pathlib.Path(env["REASONKIT_RUNS"])
    if KAGGLE_WORKING.is_dir():
        return KAGGLE_WORKING / "runs"
    if on_colab(env):
        return COLAB_DRIVE / COLAB_RUNS
    return pathlib.Path("runs")


def on_colab(env: Mapping[str, str] | None = None) -> bool:
    """A Colab runtime: its kernels set ``COLAB_RELEASE_TAG`` (and have imported google.colab)."""
    env = os.environ if env is None else env
    return bool(env.get("COLAB_RELEASE_TAG")) or (env is os.environ and "google.colab" in sys.modules)


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


def session_id(proc: str | os.PathLike = "/proc") -> int:
    """When this session began: the start of process 1, in seconds since the epoch.

    On a virtual machine process 1 starts at boot; in a container (Kaggle's, Colab's)
    when the container starts. Either way a new session has a new one and every kernel
    of a session sees the same. ``btime`` in ``/proc/stat`` is the boot, and process
    1's start field counts clock ticks from it. Without /proc: the boot, from the clocks.
    """
    proc = pathlib.Path(proc)
    try:
        boot = next(int(line.split()[1]) for line in (proc / "stat").read_text().splitlines()
                    if line.startswith("btime "))
    except (OSError, StopIteration, ValueError, IndexError):
        return round(time.time() - time.monotonic())
    try:  # the fields after the command name, which may hold spaces: field 22 is the start
        fields = (proc / "1" / "stat").read_text().rsplit(")", 1)[1].split()
        return boot + int(fields[19]) // os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return boot


def parse_hours(text: str, name: str = "REASONKIT_DEADLINE_HOURS") -> float:
    """Hours of a time budget: a positive, finite number no larger than a year.

    >>> parse_hours("8.5")
    8.5
    >>> parse_hours("nan")
    Traceback (most recent call last):
    ...
    ValueError: REASONKIT_DEADLINE_HOURS='nan': must be a positive, finite number of hours, e.g. 8.5
    """
    why = "must be a positive, finite number of hours, e.g. 8.5"
    try:
        hours = float(text)
    except ValueError:
        raise ValueError(f"{name}={text!r}: {why}") from None
    if not math.isfinite(hours) or hours <= 0:
        raise ValueError(f"{name}={text!r}: {why}")
    if hours > MAX_HOURS:
        raise ValueError(f"{name}={text!r}: {why}; more than a year ({MAX_HOURS} h) is surely a slip")
    return hours


def on_kaggle(env: Mapping[str, str] | None = None) -> bool:
    """A Kaggle notebook: its kernels set ``KAGGLE_KERNEL_RUN_TYPE``; /kaggle/working exists."""
    env = os.environ if env is None else env
    return bool(env.get("KAGGLE_KERNEL_RUN_TYPE")) or KAGGLE_WORKING.is_dir()


def _clock(t: float) -> str:
    return datetime.datetime.fromtimestamp(t).strftime("%H:%M")


def session_deadline(root: str | os.PathLike | None = None, *, env: Mapping[str, str] | None = None,
                     session: int | None = None, now: float | None = None,
                     kaggle: bool | None = None, quiet: bool = False) -> float | None:
    """This session's deadline (seconds since the epoch), or None for no deadline.

    ``$REASONKIT_DEADLINE_HOURS`` hours from the session's start: on Kaggle the session's
    own start (:func:`session_id`), elsewhere the moment a notebook of this session first
    asked. Unset, Kaggle gets :data:`KAGGLE_HOURS` and other machines no deadline. The
    start is kept in ``<root>/session.json`` with the session it belongs to, so every
    notebook and stage of a session (with the same settings) gets the same deadline, and a
    run restored into a new session (a new start of the machine) gets a new one.
    """
    env = os.environ if env is None else env
    root = pathlib.Path(root) if root is not None else default_root()
    session = session_id() if session is None else session
    now = time.time() if now is None else now
    kaggle = on_kaggle(env) if kaggle is None else kaggle
    text = str(env.get("REASONKIT_DEADLINE_HOURS") or "").strip()
    hours = parse_hours(text) if text else KAGGLE_HOURS if kaggle else None
    if hours is None:
        return None
    path = root / SESSION_FILE
    try:
        stored = json.loads(path.read_text())
    except (OSError, ValueError):
        stored = {}
    if stored.get("session") == session:
        start = float(stored["start"])
    else:  # no session yet, or an earlier one's: this session starts its own clock
        # A Kaggle session lasts 12 hours at most: an older start is not this session's (a
        # container that shares its host's processes); count from now instead.
        start = float(session) if kaggle and now - session < 12 * 3600 else now
    deadline = start + hours * 3600
    why = (f"REASONKIT_DEADLINE_HOURS={text}" if text else f"Kaggle's default, {KAGGLE_HOURS} h")
    if is_writer() and (stored.get("session") != session or stored.get("deadline") != deadline):
        root.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(SESSION_FILE + ".tmp")
        tmp.write_text(json.dumps({"session": session, "start": start, "hours": hours,
                                   "deadline": deadline, "set_by": why}, indent=2))
        tmp.replace(path)
    if not quiet:
        left = deadline - now
        print(f"session deadline {_clock(deadline)} ({why} from the session's start at "
              f"{_clock(start)}): " + (f"{left / 3600:.2f} h from now" if left > 0
                                       else f"passed {-left / 3600:.2f} h ago"))
    return deadline


MIN_COMPILE_ENV = "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"  # seconds; JAX's default: 1


def use_compilation_cache(root: str | os.PathLike) -> pathlib.Path:
    """Keep JAX's compiled programs in ``<root>/.jax_cache``: a resumed session loads them.

    Every program is kept, not only those that took JAX's default 1 s to compile: each
    notebook compiles a few hundred small ones (eager ops; at the tiny preset, the
    evaluation's sampler too), and the next notebook's kernel loads them instead
    (docs/performance.md). A ``JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS`` already in
    the environment is kept.
    Set before JAX is imported (the environment variables) or after (its config); either
    way before the first compilation that should be kept.
    """
    least = os.environ.get(MIN_COMPILE_ENV, "0")
    try:
        least_s = float(least)
    except ValueError:
        raise ValueError(f"{MIN_COMPILE_ENV}={least!r} in the environment: expected the "
                         "seconds a program must take to compile to be kept, e.g. 0 or 1.0") from None
    path = pathlib.Path(root) / CACHE_DIR
    path.mkdir(parents=True, exist_ok=True)
    os.environ["JAX_COMPILATION_CACHE_DIR"] = str(path.resolve())
    os.environ[MIN_COMPILE_ENV] = least
    if "jax" in sys.modules:
        config = sys.modules["jax"].config
        config.update("jax_compilation_cache_dir", str(path.resolve()))
        config.update("jax_persistent_cache_min_compile_time_secs", least_s)
    return path


def _is_run(folder: pathlib.Path) -> bool:
    return folder.is_dir() and any((folder / stage).is_dir() for stage in STAGES)


def _progress(run: pathlib.Path) -> tuple[int, int]:
    """How far a run got: finished stages, then files (more is further)."""
    finished = sum((run / stage / "finished.json").is_file() for stage in STAGES)
    return finished, sum(1 for p in run.rglob("*") if p.is_file())


def holds_no_file(path: pathlib.Path) -> bool:
    return not path.exists() or (path.is_dir() and not any(p.is_file() for p in path.rglob("*")))


def run_holds(run: pathlib.Path) -> str:
    """What a run folder holds, stage by stage: finished, or started (files but no marker).

    >>> import tempfile
    >>> run = pathlib.Path(tempfile.mkdtemp())
    >>> for f in ("data/finished.json", "sft/finished.json", "dpo/checkpoints/20/x"):
    ...     (run / f).parent.mkdir(parents=True, exist_ok=True)
    ...     _ = (run / f).write_text("")
    >>> run_holds(run)
    'data, sft finished; dpo started, not finished'
    """
    finished = [s for s in STAGES if (run / s / "finished.json").is_file()]
    started = [s for s in STAGES if s not in finished and not holds_no_file(run / s)]
    parts = ([f"{', '.join(finished)} finished"] if finished else []) + (
        [f"{', '.join(started)} started, not finished"] if started else [])
    return "; ".join(parts) or "no stage yet"


def _runs_in_inputs(inputs: pathlib.Path, root: pathlib.Path) -> tuple[dict[str, pathlib.Path], list]:
    """``({run name: the copy that got furthest}, [the runs/ folders found])`` in the inputs."""
    found: dict[str, pathlib.Path] = {}
    folders = []
    for folder in reasonkit_bootstrap.input_folders(inputs):
        runs = folder / "runs"
        if not runs.is_dir() or runs.resolve() == root.resolve():
            continue
        folders.append(runs)
        for run in sorted(p for p in runs.iterdir() if _is_run(p)):
            best = found.get(run.name)
            if best is None or _progress(run) > _progress(best):
                found[run.name] = run
    return found, folders


def _copy_missing(source: pathlib.Path, dest: pathlib.Path) -> list[str]:
    """Copy each entry of ``source`` whose twin in ``dest`` is missing or empty; their names."""
    copied = []
    for entry in sorted(source.iterdir()):
        target = dest / entry.name
        if holds_no_file(entry) or not holds_no_file(target):
            continue  # nothing to bring, or work already here (this session's), which wins
        if entry.is_dir():
            shutil.copytree(entry, target, dirs_exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(entry, target)
        copied.append(entry.name)
    return copied


def restore_runs(root: str | os.PathLike | None = None,
                 inputs: str | os.PathLike | None = None) -> list[str]:
    """Copy each ``runs/<run>`` of the attached inputs into ``root``; one line per run found.

    Kaggle mounts an input read-only under /kaggle/input (``$REASONKIT_KAGGLE_INPUT``, or
    ``inputs``), in either of its layouts: an earlier notebook version's output at
    ``notebooks/<owner>/<slug>/`` (``<slug>/`` in older sessions), a dataset made of a
    runs folder at ``datasets/<owner>/<slug>/`` (``<slug>/``), a zip one folder deeper
    (:func:`reasonkit_bootstrap.input_folders`: a bounded search). Of several copies of
    one run the one that got furthest is taken. Nothing already in ``root`` is replaced:
    a stage folder (or other entry) of the run is copied only where the one in ``root``
    is missing or empty, so work of this session always wins. Compiled programs under
    ``runs/.jax_cache`` come along, file by file.

    Each line names the run, where it came from, what it holds and what was copied (or
    that it was here already). No line: no input holds a run (:func:`start_session` then
    says where it looked).
    """
    root = pathlib.Path(root) if root is not None else default_root()
    inputs = reasonkit_bootstrap.input_root(inputs)
    if not inputs.is_dir() or not is_writer():
        return []
    found, folders = _runs_in_inputs(inputs, root)
    lines = []
    for name, source in sorted(found.items()):
        copied = _copy_missing(source, root / name)
        holds = run_holds(source)
        if copied:
            lines.append(f"restored run {name!r} from {source}: it holds {holds}; copied "
                         f"{', '.join(copied)}")
        else:
            lines.append(f"run {name!r} in {source} (it holds {holds}) is here already: nothing copied, "
                         "this session's work wins")
    for cache in (f / CACHE_DIR for f in folders):
        if cache.is_dir():
            for f in cache.rglob("*"):
                dest = root / CACHE_DIR / f.relative_to(cache)
                if f.is_file() and not dest.exists():
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(f, dest)
    return lines


def mount_drive(root: pathlib.Path, mount: Callable[[str], Any] | None = None) -> bool:
    """Mount Google Drive when the runs root is on it (``/content/drive/...``); whether it did.

    On Colab the runs root is on Drive by default (:func:`default_root`). Where Drive cannot
    be mounted (access refused, or a process without Colab's notebook, such as ``!python
    -m reasonkit``, before the notebook mounted it) this stops with what to do: the next
    notebook, in a runtime of its own, would not find this one's outputs.
    """
    if COLAB_DRIVE not in pathlib.Path(root).absolute().parents or (COLAB_DRIVE / "MyDrive").is_dir():
        return False
    why = None
    if mount is None:
        try:
            from google.colab import drive  # only on Colab

            mount = drive.mount
        except ImportError:
            why = "google.colab is not importable here (not a Colab notebook's kernel)"
    if mount is not None:
        try:
            mount(str(COLAB_DRIVE))
        except Exception as e:  # noqa: BLE001 - Colab raises several kinds; all end the same way
            why = f"mounting it failed: {type(e).__name__}: {e}"
    if why or not (COLAB_DRIVE / "MyDrive").is_dir():
        raise RuntimeError(
            f"the runs root {root} is on Google Drive, which is not mounted "
            f"({why or 'no MyDrive after mounting'}). "
            "On Colab each notebook runs in a runtime of its own: a later notebook finds an earlier one's "
            "outputs only on Drive. Run this notebook's first cell and allow access to Drive, or, to keep "
            "this notebook's runs on this runtime's disk (lost with it, invisible to the other notebooks; "
            "`!python -m reasonkit run` runs every stage in one process and needs no Drive), set "
            "%env REASONKIT_RUNS=/content/runs in a cell above the first.")
    return True


@dataclasses.dataclass(frozen=True)
class Session:
    """What :func:`start_session` set up."""

    root: pathlib.Path
    deadline: float | None
    restored: list[str]
    cache: pathlib.Path


def start_session(root: str | os.PathLike | None = None, *, inputs: str | os.PathLike | None = None,
                  env: Mapping[str, str] | None = None) -> Session:
    """Before anything else in a session: Drive, restored runs, compilation cache, deadline,
    and on a CPU, step memory kept between steps
    (:func:`reasonkit.tunix_patches.cpu_memory.keep_step_memory`, printed; off with
    ``REASONKIT_KEEP_STEP_MEMORY=0``).

    On Kaggle (an input root exists) it says which runs it restored and what each holds,
    or, finding none, where it looked. On several hosts, after
    :func:`reasonkit.runtime.mesh.init_distributed` (process 0 restores and writes the
    session's files, the others wait for it).
    """
    root = pathlib.Path(root) if root is not None else default_root(env)
    inputs = reasonkit_bootstrap.input_root(inputs, env)
    mount_drive(root)
    if on_colab(env) and COLAB_DRIVE not in root.absolute().parents:
        print(f"runs in {root.absolute()}, this runtime's own disk: on Colab the next notebook runs in "
              "another runtime and will not see them (unset REASONKIT_RUNS to keep them on Drive)")
    root.mkdir(parents=True, exist_ok=True)
    restored = restore_runs(root, inputs)
    for line in restored:
        print(line)
    if not restored and inputs.is_dir() and is_writer():
        print(f"no earlier run in the Kaggle inputs: looked for runs/ in "
              f"{reasonkit_bootstrap.looked_in(inputs)}; to go on from an earlier session, add its "
              "output as an input (Add Input > Your Work, or the notebook's Output)")
    cache = use_compilation_cache(root)
    print(f"runs in {root.absolute()}; compiled programs kept in {cache}")
    deadline = session_deadline(root, env=env)
    print(cpu_memory.keep_step_memory(env=env))
    sync("session started")  # several processes: process 0 has restored the runs
    return Session(root, deadline, restored, cache)
