"""The run directory: where each stage reads and writes.

```
runs/<run-name>/
  data/              rebalanced splits (JSONL) + data_report.json
  sft/ dpo/ grpo/    checkpoints, metrics.jsonl, plots, settings.json, finished.json once done
  eval/              results.json, stage_table.md, plots
```

Every notebook reads what the notebook before it wrote, so each can run on its
own in a later session as long as the earlier outputs exist.

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
import json
import os
import pathlib
import time
import warnings
from typing import IO, Any

STAGES = ("data", "sft", "dpo", "grpo", "eval")
NOTEBOOK_OF = {"data": "02_dataset_rebalance", "sft": "03_sft", "dpo": "04_dpo",
               "grpo": "05_grpo", "eval": "06_evaluation"}
KAGGLE_WORKING = pathlib.Path("/kaggle/working")


def default_root() -> pathlib.Path:
    """``$REASONKIT_RUNS``, else /kaggle/working/runs on Kaggle, else ./runs."""
    if os.environ.get("REASONKIT_RUNS"):
        return pathlib.Path(os.environ["REASONKIT_RUNS"])
    if KAGGLE_WORKING.is_dir():
        return KAGGLE_WORKING / "runs"
    return pathlib.Path("runs")


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
            name = os.environ.get("REASONKIT_RUN") or os.environ.get("REASONKIT_PRESET") or "tiny"
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
        tmp = path.with_name(name + ".tmp")
        tmp.write_text(json.dumps(obj, indent=2, default=str))
        tmp.replace(path)
        return path

    def mark_finished(self, stage: str, **info: Any) -> None:
        """Record that ``stage`` completed (with whatever summary the caller gives)."""
        self.write_json(stage, "finished.json",
                        {"finished_at": time.strftime("%Y-%m-%dT%H:%M:%S"), **info})

    def require(self, stage: str) -> pathlib.Path:
        """The stage's directory, or a clear error saying which notebook to run first."""
        marker = self.stage(stage) / "finished.json"
        if not marker.is_file():
            raise FileNotFoundError(
                f"stage {stage!r} of run {self.name!r} has not finished (no {marker}); "
                f"run notebooks/{NOTEBOOK_OF[stage]} first")
        return self.stage(stage)

    def append_metrics(self, stage: str, row: dict[str, Any]) -> None:
        """Append one JSON line to ``<stage>/metrics.jsonl``."""
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
