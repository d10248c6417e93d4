"""The run directory, and the session a stage runs in: where each stage reads and writes.

```
runs/                session.json (this session's deadline), .jax_cache/ (compiled programs)
  <run-name>/
    data/            rebalanced splits (JSONL) + data_report.json
    sft/ dpo/ grpo/  checkpoints, metrics.jsonl, plots, settings.json, finished.json once done
    eval/            results.json, stage_table.md, plots
```

Every notebook reads what the notebook before it wrote, so each can run on its
own in a later session as long as the earlier outputs exist.

A session is one start of the machine (or container) the kernel runs on.
:func:`start_session`, which every notebook's first cell calls, restores runs found in
attached Kaggle inputs into the runs root (never replacing work already there), points
JAX's persistent compilation cache at ``runs/.jax_cache`` (a resumed session loads what
an earlier one compiled), and fixes the session's deadline: every notebook and stage of
the session reads the same one from ``runs/session.json`` (:func:`session_deadline`).

A stage's lifecycle lives here too: where its checkpoints are and which is the latest,
which earlier stage it starts from, the settings it records (``settings.json``) and the
checks that refuse a resume or a hand-off under other settings, and the one rule every
notebook follows for its outputs, :func:`load_or_build`: a finished stage is loaded,
never replaced silently.

>>> import tempfile
>>> run = RunDir.create("demo", root=tempfile.mkdtemp())
>>> run.is_finished("sft")
False
>>> run.require("sft")
Traceback (most recent call last):
...
FileNotFoundError: stage 'sft' of run 'demo' has not finished (no .../demo/sft/finished.json);
    run notebooks/03_sft first
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import math
import os
import pathlib
import shutil
import sys
import time
import warnings
from typing import IO, Any, Callable, Mapping, Sequence, TypeVar

import numpy as np

from reasonkit import data
from reasonkit.config import DEFAULT_REWARDS, Preset, preset_name

STAGES = ("data", "sft", "dpo", "grpo", "eval")
NOTEBOOK_OF = {"data": "02_dataset_rebalance", "sft": "03_sft", "dpo": "04_dpo",
               "grpo": "05_grpo", "eval": "06_evaluation"}
KAGGLE_WORKING = pathlib.Path("/kaggle/working")
KAGGLE_INPUT = pathlib.Path("/kaggle/input")
COLAB_DRIVE = pathlib.Path("/content/drive")
SESSION_FILE = "session.json"
CACHE_DIR = ".jax_cache"
KAGGLE_HOURS = 8.5  # Kaggle stops a session after 9 hours; the rest is for saving the outputs
MAX_HOURS = 24 * 365
T = TypeVar("T")


def default_root() -> pathlib.Path:
    """``$REASONKIT_RUNS``, else /kaggle/working/runs on Kaggle, else ./runs."""
    if os.environ.get("REASONKIT_RUNS"):
        return pathlib.Path(os.environ["REASONKIT_RUNS"])
    if KAGGLE_WORKING.is_dir():
        return KAGGLE_WORKING / "runs"
    return pathlib.Path("runs")


# --- several processes ---------------------------------------------------------------------
#
# On a multi-host slice every host runs the same program as one of JAX's processes (see
# reasonkit.mesh.init_distributed) and they share the runs root. Orbax checkpoints are
# written by all of them together (each its shards); every other file of a run by process 0
# alone, and every process reads them.


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
    try:
        from jax._src import xla_bridge  # no public way to ask without starting them

        return jax if xla_bridge.backends_are_initialized() else None
    except (ImportError, AttributeError):
        return None


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


# --- the session ---------------------------------------------------------------------------


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


def _empty(path: pathlib.Path) -> bool:
    return not path.exists() or (path.is_dir() and not any(p.is_file() for p in path.rglob("*")))


def restore_runs(root: str | os.PathLike | None = None,
                 inputs: str | os.PathLike = KAGGLE_INPUT) -> list[str]:
    """Copy each ``runs/<run>`` of the attached inputs into ``root``; what was restored.

    Kaggle mounts an earlier session's output, added as an input, read-only at
    ``/kaggle/input/<name>/`` (one folder deeper for some kinds of input). Of several
    copies of one run the one that got furthest is taken. Nothing already in ``root``
    is replaced: a stage folder (or other entry) of the run is copied only where the
    one in ``root`` is missing or empty, so work of this session always wins. Compiled
    programs under ``runs/.jax_cache`` come along, file by file.
    """
    root = pathlib.Path(root) if root is not None else default_root()
    inputs = pathlib.Path(inputs)
    if not inputs.is_dir() or not is_writer():
        return []
    found: dict[str, pathlib.Path] = {}
    caches = []
    for runs in sorted([*inputs.glob("*/runs"), *inputs.glob("*/*/runs")]):
        if not runs.is_dir() or runs.resolve() == root.resolve():
            continue
        caches.append(runs / CACHE_DIR)
        for run in sorted(p for p in runs.iterdir() if _is_run(p)):
            best = found.get(run.name)
            if best is None or _progress(run) > _progress(best):
                found[run.name] = run
    restored = []
    for name, source in sorted(found.items()):
        copied = []
        for entry in sorted(source.iterdir()):
            dest = root / name / entry.name
            if _empty(entry) or not _empty(dest):
                continue  # nothing to bring, or work already here (this session's), which wins
            if entry.is_dir():
                shutil.copytree(entry, dest, dirs_exist_ok=True)
            else:
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(entry, dest)
            copied.append(entry.name)
        if copied:
            restored.append(f"{name} ({', '.join(copied)}) from {source}")
    for cache in caches:
        if cache.is_dir():
            for f in cache.rglob("*"):
                dest = root / CACHE_DIR / f.relative_to(cache)
                if f.is_file() and not dest.exists():
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(f, dest)
    return restored


def mount_drive(root: pathlib.Path, mount: Callable[[str], Any] | None = None) -> bool:
    """On Colab, mount Google Drive when the runs root is on it (``/content/drive/...``).

    ``%env REASONKIT_RUNS=/content/drive/MyDrive/reasonkit-runs`` in a cell above the
    setup keeps the runs across Colab sessions: the runtime's own disk goes with it.
    """
    if COLAB_DRIVE not in pathlib.Path(root).absolute().parents or (COLAB_DRIVE / "MyDrive").is_dir():
        return False
    if mount is None:
        from google.colab import drive  # only on Colab

        mount = drive.mount
    mount(str(COLAB_DRIVE))
    return True


@dataclasses.dataclass(frozen=True)
class Session:
    """What :func:`start_session` set up."""

    root: pathlib.Path
    deadline: float | None
    restored: list[str]
    cache: pathlib.Path


def start_session(root: str | os.PathLike | None = None, *, inputs: str | os.PathLike = KAGGLE_INPUT,
                  env: Mapping[str, str] | None = None) -> Session:
    """Before anything else in a session: Drive, restored runs, compilation cache, deadline,
    and on a CPU, step memory kept between steps (:func:`reasonkit.hardware.keep_step_memory`).

    On several hosts, after :func:`reasonkit.mesh.init_distributed` (process 0 restores and
    writes the session's files, the others wait for it).
    """
    root = pathlib.Path(root) if root is not None else default_root()
    mount_drive(root)
    root.mkdir(parents=True, exist_ok=True)
    restored = restore_runs(root, inputs)
    for line in restored:
        print(f"restored {line}")
    cache = use_compilation_cache(root)
    print(f"runs in {root.absolute()}; compiled programs kept in {cache}")
    deadline = session_deadline(root, env=env)
    from reasonkit import hardware  # imports the model code; runs.py alone does not need it

    print(hardware.keep_step_memory(env=env))
    sync("session started")  # several processes: process 0 has restored the runs
    return Session(root, deadline, restored, cache)


def open_jsonl(path: str | os.PathLike) -> IO[str]:
    """``path`` opened to append JSON lines, after ending a line a killed kernel cut short.

    Without that, a resumed run's first line would be glued onto the cut one.
    """
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab+") as f:
        if f.tell() and (f.seek(-1, os.SEEK_END), f.read(1))[1] != b"\n":
            f.write(b"\n")
    return open(path, "a")


@dataclasses.dataclass(frozen=True)
class RunDir:
    """One run's directory tree."""

    path: pathlib.Path

    @classmethod
    def create(cls, name: str | None = None, root: str | os.PathLike | None = None) -> "RunDir":
        """Open (creating if needed) ``<root>/<name>``; name defaults to ``$REASONKIT_RUN`` or the preset."""
        if name is None:
            name = os.environ.get("REASONKIT_RUN") or preset_name()
        if not name or "/" in name or name in (".", ".."):
            raise ValueError(f"run name {name!r} must be a plain directory name")
        path = pathlib.Path(root) if root is not None else default_root()
        run = cls(path / name)
        for stage in STAGES:
            run.stage(stage).mkdir(parents=True, exist_ok=True)
        return run

    @property
    def name(self) -> str:
        return self.path.name

    def deadline(self) -> float | None:
        """This session's deadline (:func:`session_deadline`), kept beside this run."""
        return session_deadline(self.path.parent)

    def stage(self, stage: str) -> pathlib.Path:
        if stage not in STAGES:
            raise ValueError(f"unknown stage {stage!r}; stages: {STAGES}")
        return self.path / stage

    def is_finished(self, stage: str) -> bool:
        return (self.stage(stage) / "finished.json").is_file()

    def finished_info(self, stage: str) -> dict[str, Any]:
        self.require(stage)
        return json.loads((self.stage(stage) / "finished.json").read_text())

    def write_json(self, stage: str, name: str, obj: Any) -> pathlib.Path:
        """Write ``<stage>/<name>`` atomically (a kernel that dies mid-write leaves the old file)."""
        path = self.stage(stage) / name
        if not is_writer():
            return path
        tmp = path.with_name(name + ".tmp")
        tmp.write_text(json.dumps(obj, indent=2, default=str))
        tmp.replace(path)
        return path

    def mark_finished(self, stage: str, **info: Any) -> None:
        """Record that ``stage`` completed (with whatever summary the caller gives).

        Every process calls it, and it returns once the marker is written: no process goes
        on to a later stage (which requires this one) before the marker is there.
        """
        self.write_json(stage, "finished.json",
                        {"finished_at": time.strftime("%Y-%m-%dT%H:%M:%S"), **info})
        sync(f"{self.name}/{stage} finished")

    def require(self, stage: str) -> pathlib.Path:
        """The stage's directory, or a clear error saying which notebook to run first."""
        marker = self.stage(stage) / "finished.json"
        if not marker.is_file():
            raise FileNotFoundError(
                f"stage {stage!r} of run {self.name!r} has not finished (no {marker}); "
                f"run notebooks/{NOTEBOOK_OF[stage]} first")
        return self.stage(stage)

    def append_metrics(self, stage: str, row: dict[str, Any]) -> None:
        """Append one JSON line to ``<stage>/metrics.jsonl`` (process 0; others write nothing)."""
        if not is_writer():
            return
        with open_jsonl(self.stage(stage) / "metrics.jsonl") as f:
            f.write(json.dumps(row, default=float) + "\n")

    def read_metrics(self, stage: str) -> list[dict[str, Any]]:
        """The rows of ``<stage>/metrics.jsonl``, skipping (with a warning) a line cut short."""
        path = self.stage(stage) / "metrics.jsonl"
        if not path.is_file():
            return []
        rows = []
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                warnings.warn(f"{path}:{number}: skipped a line that is not JSON ({e.msg}): {line[:80]!r}",
                              stacklevel=2)
        return rows


# --- a stage's lifecycle: checkpoints, settings, hand-off, load if finished else build ------

# Which earlier stage's adapters each training stage starts from, in order of preference.
PREVIOUS = {"sft": (), "dpo": ("sft",), "grpo": ("dpo", "sft")}


def load_or_build(run: RunDir, stage: str, load: Callable[[], T], build: Callable[[], T], *,
                  rebuild: bool = False, done: bool | None = None) -> T:
    """The one rule for every stage's output (data, training, export, evaluation): a finished
    one is loaded, never replaced silently; ``rebuild=True`` builds it again.

    ``done`` overrides "finished" (default: ``<stage>/finished.json`` exists), e.g. for an
    export, whose files are its marker.

    >>> import tempfile
    >>> run = RunDir.create("lob", root=tempfile.mkdtemp())
    >>> load_or_build(run, "sft", load=lambda: "loaded", build=lambda: "built")
    'built'
    >>> run.mark_finished("sft")
    >>> load_or_build(run, "sft", load=lambda: "loaded", build=lambda: "built")
    'loaded'
    >>> load_or_build(run, "sft", load=lambda: "loaded", build=lambda: "built", rebuild=True)
    'built'
    """
    finished = run.is_finished(stage) if done is None else done
    return load() if finished and not rebuild else build()


def write_files(out: pathlib.Path, files: Mapping[str, Any]) -> None:
    """Write ``{name: text or figure}`` into ``out`` (process 0): text as it is, a figure
    (anything with ``savefig``, e.g. matplotlib's) as an image at 120 dpi."""
    if not is_writer():
        return
    for name, what in files.items():
        if isinstance(what, str):
            (out / name).write_text(what)
        else:
            what.savefig(out / name, dpi=120)


def checkpoint_dir(run: RunDir, stage: str) -> pathlib.Path:
    """Where ``stage``'s Orbax checkpoints live (one folder per saved step)."""
    return run.stage(stage) / "checkpoints"


def latest_step(run: RunDir, stage: str) -> int | None:
    """The newest complete checkpoint step of ``stage``, or None."""
    root = checkpoint_dir(run, stage)
    for sub in ("", "actor"):  # GRPO's RLCluster nests the actor's checkpoints
        d = root / sub
        # Only finished saves: Orbax writes into "<step>.orbax-checkpoint-tmp" first.
        steps = [int(p.name) for p in d.glob("[0-9]*")
                 if p.name.isdigit() and (p / "model_params").is_dir()] if d.is_dir() else []
        if steps:
            return max(steps)
    return None


def start_from(run: RunDir, stage: str) -> str | None:
    """Which earlier stage's adapters ``stage`` starts from (None: fresh LoRA on the base).

    GRPO starts from SFT when DPO was skipped; a DPO stopped half-way (checkpoints, no
    finished.json) is skipped too, with a warning: it is more likely unfinished than unwanted.
    """
    unfinished = []
    for prev in PREVIOUS[stage]:
        if run.is_finished(prev):
            for skipped, step in unfinished:
                warnings.warn(
                    f"{skipped} of run {run.name!r} stopped at step {step} without finishing: "
                    f"{stage} starts from the {prev} adapters instead. Run notebooks/"
                    f"{NOTEBOOK_OF[skipped]} again to finish it first, or delete "
                    f"{run.stage(skipped)} to skip it.", stacklevel=2)
            return prev
        step = latest_step(run, prev)
        if step:  # step 0: stopped before its first step, nothing trained
            unfinished.append((prev, step))
    if PREVIOUS[stage]:
        run.require(PREVIOUS[stage][-1])  # raises: says which notebook to run first
    return None


SETTINGS_FILE = "settings.json"
# How a stage is laid out, logged, shown, rematerialised or its attention computed (the same
# numbers to 1e-5), not what it learns: free to change, even on resume.
LAYOUT_ONLY = ("mesh", "checkpoint_every", "log_every", "show_every", "remat", "attention")
# Settings added after runs first recorded theirs, and the value every run before them
# trained with: a run that recorded none compares as if it had recorded that one.
ADDED_SETTINGS: dict[str, Any] = {"grpo.rewards": [list(pair) for pair in DEFAULT_REWARDS],
                                  # every answer padded to the max, as Tunix does
                                  "grpo.length_buckets": [[], []]}


def recorded_settings(run: RunDir, stage: str) -> dict[str, Any] | None:
    """``<stage>/settings.json``, or None for a stage not started (or from before settings
    were recorded)."""
    path = run.stage(stage) / SETTINGS_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def trained_from(run: RunDir, stage: str) -> list[str]:
    """The later stages that started from ``stage``'s adapters, directly or through another."""
    found = [stage]
    for later in ("dpo", "grpo"):
        if (recorded_settings(run, later) or {}).get("started_from") in found:
            found.append(later)
    return found[1:]


def begin_stage(run: RunDir, stage: str, overwrite: bool) -> None:
    """Refuse to train a finished stage again unless ``overwrite``; with it, clear the stage
    (checkpoints, metrics, settings, marker), warning when later stages started from it."""
    if run.is_finished(stage) and not overwrite:
        info = run.finished_info(stage)
        raise FileExistsError(
            f"stage {stage!r} of run {run.name!r} already finished ({info.get('steps')} steps, "
            f"{info.get('finished_at')}); its checkpoints are in {checkpoint_dir(run, stage)}. "
            "Pass overwrite=True to train it again from scratch, or use another run name.")
    if overwrite:
        stale = trained_from(run, stage)
        if stale:
            warnings.warn(f"retraining {stage} of run {run.name!r}: {' and '.join(stale)} started from "
                          "its old adapters, so they will not follow from the new ones until "
                          "they are trained again too (retrain=True)", stacklevel=3)
        for name in ("checkpoints", "metrics.jsonl", "tensorboard", "finished.json", SETTINGS_FILE):
            path = run.stage(stage) / name
            if is_writer():  # several processes: process 0 clears, the others wait for it
                shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
        sync(f"{run.name}/{stage} cleared")


def stage_settings(preset: Preset, run: RunDir, stage: str, started: str | None) -> dict[str, Any]:
    """What a stage's adapters are a function of, flat: model, LoRA, stage config, data, start.

    Recorded in ``<stage>/settings.json`` when the stage starts, so that a resume or a
    reload can tell that the preset, the data or the earlier stage changed since.
    """
    parts = {"model": preset.model, "lora": preset.lora, stage: getattr(preset, stage)}
    flat = {f"{head}.{k}": v for head, cfg in parts.items()
            for k, v in dataclasses.asdict(cfg).items() if k not in LAYOUT_ONLY}
    split = run.stage("data") / f"{stage}.jsonl"
    flat["data.split_sha1"] = hashlib.sha1(split.read_bytes()).hexdigest() if split.is_file() else None
    flat["started_from"] = started
    flat["started_from.finished_at"] = (run.finished_info(started).get("finished_at")
                                        if started and run.is_finished(started) else None)
    return json.loads(json.dumps(flat, default=str))  # tuples -> lists, as they read back


def settings_changes(run: RunDir, stage: str, settings: dict[str, Any]) -> list[str]:
    """``"key: recorded -> now"`` for each setting that differs from ``<stage>/settings.json``."""
    recorded = recorded_settings(run, stage)
    if recorded is None:
        return []  # a run from before settings were recorded: nothing to compare with
    before = {k: v for k, v in ADDED_SETTINGS.items() if k in settings and k not in recorded}
    return settings_diff({**recorded, **before}, settings)


def settings_diff(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """``"key: old -> new"`` for each key whose value differs (a missing key reads as None).

    >>> settings_diff({"sft.max_steps": 100, "lora.rank": 8}, {"sft.max_steps": 300, "lora.rank": 8})
    ['sft.max_steps: 100 -> 300']
    """
    return [f"{k}: {old.get(k)!r} -> {new.get(k)!r}"
            for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]


def record_settings(run: RunDir, stage: str, settings: dict[str, Any]) -> None:
    """Refuse to resume a checkpoint trained with other settings, or to start from adapters
    of another model or LoRA (:func:`check_hand_off`); then record these settings."""
    check_hand_off(run, stage, settings)
    step = latest_step(run, stage)
    changes = settings_changes(run, stage, settings) if step is not None else []
    if changes:
        raise ValueError(
            f"stage {stage!r} of run {run.name!r} has a checkpoint at step {step} trained with "
            f"other settings than now ({'; '.join(changes)}). Resuming would mix two runs: put "
            "the settings back to resume, pass overwrite=True (retrain=True in train_or_load) "
            "to start this stage again, or use another run name.")
    run.write_json(stage, SETTINGS_FILE, settings)


def check_hand_off(run: RunDir, stage: str, settings: dict[str, Any]) -> None:
    """Refuse to start ``stage`` from adapters trained for another model or LoRA than ``settings``'.

    Restoring them would fail deep in Orbax (another rank or model shape), or silently
    give another model than the one the earlier stage trained (another alpha or base).
    """
    started = settings["started_from"]
    recorded = recorded_settings(run, started) if started else None
    if recorded is None:
        return  # a fresh start, or a stage from before settings were recorded

    def arch(flat: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in flat.items() if k.startswith(("model.", "lora."))}

    changes = settings_diff(arch(recorded), arch(settings))
    if changes:
        raise ValueError(
            f"stage {stage!r} of run {run.name!r} starts from the {started!r} adapters, which were "
            f"trained for another model or LoRA than now ({'; '.join(changes)}). Put those settings "
            f"back, train {started!r} again with these (retrain=True, notebooks/"
            f"{NOTEBOOK_OF[started]}), or use another run name.")


def branch(run: RunDir, name: str, stages: Sequence[str] = ("data", "sft", "dpo")) -> RunDir:
    """A run ``name`` beside ``run`` that starts with copies of ``run``'s finished ``stages``.

    To try another setting of a later stage without training the earlier ones again
    (05_grpo's GRPO on format rewards only). Refuses a stage of ``run`` that has not
    finished, and a run ``name`` that holds another copy of one of ``stages`` (another
    ``finished.json``); one that holds these copies already (the notebook run again) is
    returned as it is, with what it trained since.

    >>> import tempfile
    >>> run = RunDir.create("main", root=tempfile.mkdtemp())
    >>> run.mark_finished("data")
    >>> branch(run, "main-try", stages=("data", "sft"))
    Traceback (most recent call last):
    ...
    FileNotFoundError: stage 'sft' of run 'main' has not finished (no .../main/sft/finished.json);
        run notebooks/03_sft first
    >>> branch(run, "main-try", stages=("data",)).is_finished("data")
    branched run 'main-try' from 'main': copied data
    True
    """
    if name == run.name:
        raise ValueError(f"branch: the new run needs another name than {run.name!r}")
    sources = {stage: run.require(stage) for stage in stages}  # raises: which notebook to run
    target = RunDir(run.path.parent / name)
    copy = []
    for stage, source in sources.items():
        dest = target.path / stage
        if _empty(dest):
            copy.append(stage)
        elif not (dest / "finished.json").is_file() or (
                (dest / "finished.json").read_text() != (source / "finished.json").read_text()):
            raise FileExistsError(
                f"run {name!r} already has a {stage} stage that is not run {run.name!r}'s "
                f"({dest}): delete {target.path} to branch {run.name!r} again, or use another name")
    target = RunDir.create(name, root=run.path.parent)
    if is_writer():
        for stage in copy:
            shutil.copytree(sources[stage], target.stage(stage), dirs_exist_ok=True)
    sync(f"{name} branched")
    print(f"branched run {name!r} from {run.name!r}: " + (f"copied {', '.join(copy)}" if copy else
                                                       f"{', '.join(stages)} already there"))
    return target


# --- the data stage ----------------------------------------------------------------------


def save_data(run: RunDir, preset: Preset, splits: data.Splits, report: data.DataReport) -> None:
    """Write the splits to ``<run>/data`` (replacing what is there) and mark the stage finished."""
    if is_writer():
        data.write_splits(splits, report, run.stage("data"), overwrite=True)
    run.mark_finished("data", preset=preset.name, **splits.sizes())


def build_data(run: RunDir, preset: Preset, count_tokens: Callable[[str], int], *,
               rebuild: bool = False) -> tuple[data.Splits, data.DataReport]:
    """The data stage from scratch: finished splits are read back (``rebuild=True`` replaces
    them); otherwise load the sources, build and write the splits.

    ``count_tokens`` counts tokens with the model's tokenizer (the stage budgets are tokens).
    """
    def build():
        records, reports = data.load_sources(preset.data)
        splits, report = data.build_splits(records, preset.data, count_tokens=count_tokens,
                                           limits=data.stage_limits(preset), source_reports=reports)
        save_data(run, preset, splits, report)
        return splits, report

    return load_or_build(run, "data", lambda: data.read_splits(run.stage("data")), build, rebuild=rebuild)


def finish_data(run: RunDir, preset: Preset, splits: data.Splits, report: data.DataReport, *,
                files: Mapping[str, Any] | None = None,
                rebuild: bool = False) -> tuple[data.Splits, data.DataReport]:
    """The data stage as ``02_dataset_rebalance`` ends it, with the splits it just built.

    A finished data stage is read back instead, saying so (and warning when it differs
    from ``splits``); otherwise (or with ``rebuild=True``) ``files`` (its plots) and the
    splits are written and the stage marked finished.
    """
    out = run.stage("data")

    def load():
        kept = data.read_splits(out)
        print(f"{out} already holds finished splits: using those, not the ones built above "
              "(set REBUILD = True to replace them)")
        if kept[0] != splits:
            print("WARNING: they differ from what this notebook just built (preset changed?)")
        return kept

    def build():
        write_files(out, files or {})
        save_data(run, preset, splits, report)  # unfinished or rebuild: write, mark finished
        print(f"wrote {splits.sizes()} to {out}")
        return splits, report

    return load_or_build(run, "data", load, build, rebuild=rebuild)
