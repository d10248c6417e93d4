"""The session a stage runs in: its runs root, restored runs, deadline and compilation cache.

A session is one start of the machine (or container) the kernel runs on.
:func:`start_session`, which every notebook calls once reasonkit is importable (the cell
after ``reasonkit_bootstrap.setup()``, and ``python -m reasonkit``), makes the preset's one
process-wide change on a CPU first (:func:`reasonkit.runtime._processes.keep_step_memory`),
mounts Google Drive on Colab (the runs live there by default: each Colab notebook runs in its
own runtime), restores runs found in attached Kaggle inputs into the runs root (never
replacing work already there, and saying what each run holds, or where it looked when it
found none), points JAX's persistent compilation cache at ``runs/.jax_cache`` (a resumed
session loads what an earlier one compiled) and fixes the session's deadline (every notebook
and stage of the session reads the same one from ``runs/session.json``,
:func:`session_deadline`). Where this runs is :mod:`.platform`'s; the processes of several
hosts are :mod:`.processes`'.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import os
import pathlib
import shutil
import sys
import time
from typing import Mapping, Sequence

from reasonkit.config import TRAIN_STAGES
from reasonkit.runtime import _platform as platform
from reasonkit.runtime import _processes as processes
from reasonkit.runtime._platform import default_root
from reasonkit.runtime._processes import is_writer, sync

__all__ = ["STAGES", "CACHE_DIR", "KAGGLE_HOURS", "session_id", "parse_hours",
           "session_deadline", "MIN_COMPILE_ENV", "use_compilation_cache", "restore_runs", "run_holds",
           "Session", "holds_no_file", "start_session"]

STAGES = ("data", *TRAIN_STAGES, "eval")  # what a run directory holds, in order
_SESSION_FILE = "session.json"
CACHE_DIR = ".jax_cache"
KAGGLE_HOURS = 8.5  # Kaggle stops a session after 9 hours; the rest is for saving the outputs
_MAX_HOURS = 24 * 365


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
    if hours > _MAX_HOURS:
        raise ValueError(f"{name}={text!r}: {why}; more than a year ({_MAX_HOURS} h) is surely a slip")
    return hours


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
    kaggle = platform.on_kaggle(env) if kaggle is None else kaggle
    text = str(env.get("REASONKIT_DEADLINE_HOURS") or "").strip()
    hours = parse_hours(text) if text else KAGGLE_HOURS if kaggle else None
    if hours is None:
        return None
    path = root / _SESSION_FILE
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
        tmp = path.with_name(_SESSION_FILE + ".tmp")
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
    for folder in platform.input_folders(inputs):
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
    (:func:`.platform.input_folders`: a bounded search). Of several copies of
    one run the one that got furthest is taken. Nothing already in ``root`` is replaced:
    a stage folder (or other entry) of the run is copied only where the one in ``root``
    is missing or empty, so work of this session always wins. Compiled programs under
    ``runs/.jax_cache`` come along, file by file.

    Each line names the run, where it came from, what it holds and what was copied (or
    that it was here already). No line: no input holds a run (:func:`start_session` then
    says where it looked).
    """
    root = pathlib.Path(root) if root is not None else default_root()
    inputs = platform.input_root(inputs)
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


@dataclasses.dataclass(frozen=True)
class Session:
    """What :func:`start_session` set up."""

    root: pathlib.Path
    deadline: float | None
    restored: list[str]
    cache: pathlib.Path


def start_session(root: str | os.PathLike | None = None, *, inputs: str | os.PathLike | None = None,
                  env: Mapping[str, str] | None = None,
                  optimisations: Sequence[str] | None = None) -> Session:
    """Before anything else in a session: step memory, Drive, restored runs, compilation
    cache, deadline; each said in a line.

    First, on a CPU, each step keeps its temporaries for the next when the preset's
    ``optimisations`` include ``"cpu step memory"``
    (:func:`reasonkit.runtime._processes.keep_step_memory`). ``optimisations`` default to the
    preset's: ``$REASONKIT_PRESET`` with ``$REASONKIT_OVERRIDES`` (a preset that does not
    exist stops the session here, as it would stop the notebook's ``get_preset()``);
    ``REASONKIT_OVERRIDES='{"optimisations": []}'`` leaves the process as Tunix and JAX
    ship. It changes the whole process and must come before JAX starts: a preset chosen
    later in the process cannot undo it.

    On Kaggle (an input root exists) it says which runs it restored and what each holds,
    or, finding none, where it looked. On several hosts, after
    :func:`reasonkit.runtime._mesh.init_distributed` (process 0 restores and writes the
    session's files, the others wait for it).
    """
    step_memory = processes.keep_step_memory(optimisations)
    root = pathlib.Path(root) if root is not None else default_root(env)
    inputs = platform.input_root(inputs, env)
    platform.mount_drive(root)
    if platform.on_colab(env) and platform.COLAB_DRIVE not in root.absolute().parents:
        print(f"runs in {root.absolute()}, this runtime's own disk: on Colab the next notebook runs in "
              "another runtime and will not see them (unset REASONKIT_RUNS to keep them on Drive)")
    root.mkdir(parents=True, exist_ok=True)
    restored = restore_runs(root, inputs)
    for line in restored:
        print(line)
    if not restored and inputs.is_dir() and is_writer():
        print(f"no earlier run in the Kaggle inputs: looked for runs/ in "
              f"{platform.looked_in(inputs)}; to go on from an earlier session, add its "
              "output as an input (Add Input > Your Work, or the notebook's Output)")
    cache = use_compilation_cache(root)
    print(f"runs in {root.absolute()}; compiled programs kept in {cache}")
    deadline = session_deadline(root, env=env)
    print(step_memory)
    sync("session started")  # several processes: process 0 has restored the runs
    return Session(root, deadline, restored, cache)
