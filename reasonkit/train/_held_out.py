"""GRPO's truth during RL: greedy accuracy on held-out prompts every few steps, the best adapters kept.

A rising reward says the policy found more of what the reward pays for, not that it
answers more questions right. Every ``grpo.eval_every`` steps (and at the start of each
session and at the end) :class:`HeldOutCheck` answers a fixed block of the held-out eval
split greedily, with evaluation's decoding (``preset.eval``) and its verdict
(:func:`reasonkit.rewards.is_correct`), and logs to the stage's metrics.jsonl:

- ``held_out/accuracy`` and ``held_out/format_rate``, at the step the policy had trained;
- ``held_out/reward``: the mean summed reward of the steps since the check before;
- ``held_out/alarm``: 1 when that reward rose while the accuracy fell by more than one
  standard error of the block (a printed warning says so), else 0.

The block (:func:`held_out_block`) holds no training prompt: the data stage holds the eval
split out before any stage's set is drawn. The adapters of the best accuracy so far
(ties: the earliest) are saved under ``<grpo>/best/`` with their step and accuracy
(:func:`best_info`); :func:`load_best` loads them. The last adapters stay the stage's own.

The check reads the policy's live weights through a sampler of its own: it draws no
random numbers, calls none of the rollout's code and reads no batch, so training with
checks is the same, step for step, as training without them, and a resumed run as an
uninterrupted one.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import time
from typing import Any, Iterable, Iterator, Sequence

import jax
import numpy as np

from reasonkit import data, models, rewards, template
from reasonkit.config import Preset
from reasonkit.runtime import RunDir, from_writer, is_writer, runs
from reasonkit.train import _generation as generation
from reasonkit.train._metrics import read_metrics

__all__ = ["BEST_DIR", "ADAPTERS_FILE", "INFO_FILE", "CHECKS_FILE", "per_prompt", "first_and_last",
           "Reading", "held_out_block", "diverging", "HeldOutCheck", "for_run", "checked", "best_info",
           "load_best", "progress"]

BEST_DIR = "best"  # <grpo>/best: the adapters of the best held-out accuracy
ADAPTERS_FILE = "adapters.safetensors"
INFO_FILE = "best.json"
CHECKS_FILE = runs.HELD_OUT_FILE  # <stage>/held_out.jsonl: each check's verdict per prompt


@dataclasses.dataclass(frozen=True)
class Reading:
    """One held-out check: the step the policy had trained, what it scored, the reward then."""

    step: int
    accuracy: float
    format_rate: float
    n: int
    reward: float | None = None  # mean summed reward of the steps since the check before
    alarm: bool = False
    seconds: float = 0.0
    trained: float | None = None  # accuracy on a block of the stage's own training prompts


def held_out_block(records: Sequence[dict], n: int) -> list[dict]:
    """The first ``n`` of ``records`` taken in turn from each domain (in order of first appearance).

    >>> recs = [{"id": i, "domain": d} for i, d in enumerate("aaab")]
    >>> [r["id"] for r in held_out_block(recs, 3)]
    [0, 3, 1]
    """
    by_domain: dict[str, list[dict]] = {}
    for r in records:
        by_domain.setdefault(r.get("domain", "general"), []).append(r)
    queues = list(by_domain.values())
    out: list[dict] = []
    for i in range(max((len(q) for q in queues), default=0)):
        out += [q[i] for q in queues if i < len(q)]
    return out[:n]


def diverging(before: Reading | None, now: Reading) -> bool:
    """Whether the reward rose from ``before`` to ``now`` while held-out accuracy fell by
    more than one standard error of ``before``'s rate on ``now.n`` prompts.

    >>> a = Reading(step=50, accuracy=0.40, format_rate=1.0, n=32, reward=6.0)
    >>> diverging(a, dataclasses.replace(a, step=100, accuracy=0.25, reward=6.3))
    True
    >>> diverging(a, dataclasses.replace(a, step=100, accuracy=0.375, reward=6.3))  # within noise
    False
    >>> diverging(a, dataclasses.replace(a, step=100, accuracy=0.25, reward=5.9))  # both fell
    False
    """
    if before is None or before.reward is None or now.reward is None or not now.n:
        return False
    noise = math.sqrt(max(before.accuracy * (1 - before.accuracy), 1e-12) / now.n)
    return now.reward > before.reward and now.accuracy < before.accuracy - noise


def _flat_lora(policy) -> dict[str, np.ndarray]:
    """The policy's LoRA adapters, whole on the host (all processes call it), as safetensors
    writes them: its numpy writer knows no bfloat16, and float32 holds it exactly
    (:func:`load_best` casts back)."""
    return {k: v.astype(np.float32) if v.dtype.name == "bfloat16" else v
            for k, v in models.lora_params(policy).items()}


class HeldOutCheck:
    """Greedy accuracy of ``policy`` on a held-out block, logged; the best adapters saved.

    ``records``: the block (:func:`held_out_block`). ``fresh``: the stage starts from step 0,
    so a best from an earlier, cleared run of it is removed. Calling it with a step runs
    one check (:meth:`__call__`); ``readings`` holds this session's. ``trained``: a block of
    the stage's own training prompts, checked the same way beside it and logged as
    ``held_out/trained_accuracy``: the gap between the two is how much of what GRPO learns
    carries to prompts it never saw.
    """

    def __init__(self, policy, tokenizer, records: Sequence[dict], preset: Preset, run: RunDir,
                 *, stage: str = "grpo", fresh: bool = False, trained: Sequence[dict] = ()):
        self.policy, self.tokenizer, self.records = policy, tokenizer, list(records)
        self.trained = list(trained)
        self.trained_prompts = [template.format_prompt(r["prompt"]) for r in self.trained]
        self.preset, self.run, self.stage = preset, run, stage
        self.prompts = [template.format_prompt(r["prompt"]) for r in self.records]
        self.readings: list[Reading] = []
        self.warm_seconds = 0.0  # spent in warm()
        self._sampler = None  # made at the first check: its programs compile once
        self.best_dir = run.stage(stage) / BEST_DIR
        if fresh and is_writer():
            shutil.rmtree(self.best_dir, ignore_errors=True)
        self.best = best_info(run, stage) if not fresh else None

    @property
    def seconds(self) -> float:
        """Time spent checking in this session (compiling included)."""
        return sum(r.seconds for r in self.readings) + self.warm_seconds

    def _texts(self, prompts: Sequence[str], desc: str) -> list[str]:
        cfg = self.preset.eval
        if self._sampler is None:
            self._sampler = generation.make_sampler(self.policy, self.tokenizer, self.preset.model, cfg)
        return generation.generate(self._sampler, prompts, cfg, models.stop_token_ids(self.tokenizer),
                                   desc=desc)

    def warm(self) -> float:
        """Compile the check's programs for the weights as they are now (one batch, not
        scored or logged); returns the seconds it took."""
        t0 = time.perf_counter()
        self._texts(self.prompts[:self.preset.eval.batch_size], "held-out: compiling")
        seconds = time.perf_counter() - t0
        self.warm_seconds += seconds
        return seconds

    def _previous(self, step: int) -> tuple[Reading | None, dict[str, tuple[list[int], list[float]]]]:
        """The last check logged before ``step`` (this session's or an earlier one's), and the metrics."""
        m = read_metrics(self.run, self.stage)
        steps, values = m.get("held_out/accuracy", ([], []))
        before = [(s, v) for s, v in zip(steps, values, strict=True) if s < step]
        if not before:
            return None, m
        s, acc = before[-1]
        reward = dict(zip(*m.get("held_out/reward", ([], [])), strict=True)).get(s)
        fmt = dict(zip(*m.get("held_out/format_rate", ([], [])), strict=True)).get(s, 0.0)
        return Reading(step=s, accuracy=acc, format_rate=fmt, n=len(self.records), reward=reward), m

    def __call__(self, step: int) -> Reading:
        """Check the policy as it is after ``step`` steps: log, keep it if best, warn on divergence."""
        t0 = time.perf_counter()
        texts = self._texts(self.prompts, f"held-out, step {step}")
        right = self._right(texts, self.records)
        n = len(self.records)
        accuracy = float(np.mean(right)) if n else 0.0
        trained = None
        if self.trained:
            seen = self._texts(self.trained_prompts, f"training prompts, step {step}")
            trained = float(np.mean(self._right(seen, self.trained)))
        fmt = float(np.mean([template.has_exact_format(t) for t in texts])) if n else 0.0
        before, m = self._previous(step)
        steps, sums = m.get("rewards/train/sum", ([], []))
        since = before.step if before is not None else 0
        window = [v for s, v in zip(steps, sums, strict=True) if since <= s < step]
        reading = Reading(step=step, accuracy=accuracy, format_rate=fmt, n=n,
                          reward=float(np.mean(window)) if window else None, trained=trained)
        reading = dataclasses.replace(reading, alarm=diverging(before, reading))
        # process 0's word (it alone may read an earlier session's best): the adapters are
        # gathered from every process, so all of them must agree to save
        if from_writer(self.best is None or accuracy > self.best["accuracy"]):
            self._save_best(reading)
        reading = dataclasses.replace(reading, seconds=time.perf_counter() - t0)
        self.readings.append(reading)
        self._log(reading, before, since)
        if is_writer():  # the verdict per prompt, for a paired comparison of two checks
            with runs.open_jsonl(self.run.stage(self.stage) / CHECKS_FILE) as f:
                f.write(json.dumps({"step": step, "rows": [
                    {"id": r.get("id"), "correct": bool(c)} for r, c in zip(self.records, right,
                                                                            strict=True)]}) + "\n")
        return reading

    @staticmethod
    def _right(texts: Sequence[str], records: Sequence[dict]) -> list[bool]:
        return [rewards.is_correct(t, r["answer"], r.get("domain", "general"))
                for t, r in zip(texts, records, strict=True)]

    def _save_best(self, reading: Reading) -> None:
        from safetensors.numpy import save_file

        tensors = _flat_lora(self.policy)
        self.best = {"step": reading.step, "accuracy": reading.accuracy,
                     "format_rate": reading.format_rate, "n": reading.n,
                     "ids": [r.get("id") for r in self.records]}
        if is_writer():
            self.best_dir.mkdir(parents=True, exist_ok=True)
            tmp = self.best_dir / (ADAPTERS_FILE + ".tmp")
            save_file(tensors, str(tmp))
            tmp.replace(self.best_dir / ADAPTERS_FILE)
            (self.best_dir / INFO_FILE).write_text(json.dumps(self.best, indent=2, default=str))

    def _log(self, reading: Reading, before: Reading | None, since: int) -> None:
        for name, value in (("accuracy", reading.accuracy), ("format_rate", reading.format_rate),
                            ("reward", reading.reward), ("alarm", float(reading.alarm)),
                            ("trained_accuracy", reading.trained)):
            if value is not None:
                self.run.append_metrics(self.stage, {"event": f"held_out/{name}", "step": reading.step,
                                                     "value": float(value)})
        if not is_writer():
            return
        right = round(reading.accuracy * reading.n)
        reward = ("" if reading.reward is None else
                  f"; mean reward {reading.reward:.3f} over steps {since}-{reading.step - 1}")
        trained = ("" if reading.trained is None else
                   f"; on {len(self.trained)} of its training prompts {reading.trained:.1%}")
        print(f"GRPO held-out check, step {reading.step}: accuracy {reading.accuracy:.1%} ({right} of "
              f"{reading.n}), format {reading.format_rate:.1%}{trained}{reward}; best "
              f"{self.best['accuracy']:.1%} at step {self.best['step']} ({reading.seconds:.1f} s)")
        if reading.alarm:
            print(f"WARNING: GRPO step {reading.step}: the reward rose ({before.reward:.3f} -> "
                  f"{reading.reward:.3f}) while held-out accuracy fell ({before.accuracy:.1%} -> "
                  f"{reading.accuracy:.1%} of {reading.n} prompts, more than one standard error): the "
                  "policy may be learning what the reward pays for rather than right answers. The "
                  f"best adapters so far are step {self.best['step']}'s "
                  "(reasonkit.train._held_out.load_best)")


def for_run(preset: Preset, run: RunDir, policy, tokenizer, *, start: int = 0,
            splits: data.Splits | None = None, trained: Sequence[dict] = ()) -> HeldOutCheck | None:
    """GRPO's :class:`HeldOutCheck` for ``run``: ``grpo.eval_prompts`` prompts of its eval split
    (``splits``, default: read from the run), or of its ``eval_hard`` block when GRPO trains
    on harder prompts, on ``policy``, the model the learner trains; ``start``: the step it
    starts or resumes from (``cluster.global_steps``); ``trained``: GRPO's training records,
    whose first ``grpo.eval_prompts`` (in turn by domain) are checked beside it. None when
    ``grpo.eval_every`` is 0 or the split is empty."""
    cfg = preset.grpo
    if not cfg.eval_every:
        return None
    splits = splits if splits is not None else data.read_splits(run.require("data"))[0]
    hard = cfg.difficulty > preset.data.difficulty and splits.eval_hard
    block = held_out_block(splits.eval_hard if hard else splits.eval, cfg.eval_prompts)
    if not block:
        print("GRPO: no held-out check (the eval split is empty)")
        return None
    return HeldOutCheck(policy, tokenizer, block, preset, run, fresh=start == 0,
                        trained=held_out_block(trained, cfg.eval_prompts))


def checked(stream: Iterable[Any], check: HeldOutCheck | None, every: int, *,
            start: int = 0) -> Iterator[Any]:
    """``stream``, with ``check(step)`` run before handing out the batch of each step due.

    Item ``i`` of a GRPO batch stream trains step ``i + 1``: when the learner asks for it,
    the policy has trained ``i`` steps. Due: the first step this session trains
    (``start``, the step it resumed from; the items before it are discarded) and every
    multiple of ``every``. The step after the last batch is for the caller to check.

    The first update leaves the weights in another device layout than they were loaded
    in, and the check's sampler compiles again for it: ``check.warm()`` does that on the
    next step, within the warm-up the compile counters allow (so no later check compiles).

    >>> class Log(list):
    ...     def __call__(self, step): self.append(step)
    ...     def warm(self): self.append("warm")
    >>> log = Log()
    >>> list(checked("abcdef", log, 3)), log
    (['a', 'b', 'c', 'd', 'e', 'f'], [0, 'warm', 3])
    >>> log = Log()
    >>> list(checked("abcdef", log, 3, start=4)), log  # resumed at step 4: items 0-3 discarded
    (['a', 'b', 'c', 'd', 'e', 'f'], [4, 'warm'])
    """
    for i, item in enumerate(stream):
        if check is not None and every and i >= start:
            if i == start or i % every == 0:
                check(i)
            elif i == start + 1:
                check.warm()
        yield item


def per_prompt(run: RunDir, stage: str = "grpo") -> dict[int, list[dict[str, Any]]]:
    """``{step: [{"id", "correct"}, ...]}``: each held-out check's verdict per prompt (the
    last one logged for a step wins: a resumed stage checks its start again)."""
    path = run.stage(stage) / CHECKS_FILE
    if not path.is_file():
        return {}
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {r["step"]: r["rows"] for r in rows}


def first_and_last(run: RunDir, stage: str = "grpo") -> tuple[list[dict], list[dict]] | None:
    """The first and the last check's verdicts per prompt, on the same prompts, or None
    (fewer than two checks, or a block that changed between them)."""
    checks = per_prompt(run, stage)
    if len(checks) < 2:
        return None
    first, last = checks[min(checks)], checks[max(checks)]
    if [r["id"] for r in first] != [r["id"] for r in last]:
        return None
    return first, last


def best_info(run: RunDir, stage: str = "grpo") -> dict[str, Any] | None:
    """``{"step", "accuracy", "format_rate", "n", "ids"}`` of the best held-out check, or None."""
    path = run.stage(stage) / BEST_DIR / INFO_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def load_best(preset: Preset, run: RunDir, mesh=None, *, stage: str = "grpo"):
    """``(policy, tokenizer, info)``: the base with the adapters of GRPO's best held-out check.

    ``info`` is :func:`best_info`'s. The stage's own (last) adapters load as every stage's
    do (:func:`reasonkit.models.load_policy`).
    """
    from flax import nnx
    from safetensors.numpy import load_file

    info = best_info(run, stage)
    path = run.stage(stage) / BEST_DIR / ADAPTERS_FILE
    if info is None or not path.is_file():
        raise FileNotFoundError(f"no best held-out adapters under {path.parent}: GRPO of run "
                                f"{run.name!r} ran no held-out check (grpo.eval_every=0, or it has "
                                "not started)")
    saved = load_file(str(path))
    _, policy, tok, _ = models.load_policy(preset, run, None, mesh)
    state = nnx.state(policy, nnx.LoRAParam)
    flat = list(nnx.to_flat_state(state))
    names = {".".join(map(str, p)) for p, _ in flat}
    if names != set(saved):
        missing, extra = sorted(names - set(saved))[:3], sorted(set(saved) - names)[:3]
        raise ValueError(f"{path}: its adapters do not fit preset {preset.name!r}'s LoRA "
                         f"(missing {missing}, extra {extra})")
    for p, var in flat:
        old = var.value
        new = saved[".".join(map(str, p))].astype(old.dtype)
        if new.shape != old.shape:
            raise ValueError(f"{path}: adapter {'.'.join(map(str, p))} has shape {new.shape}, "
                             f"the preset's LoRA {old.shape}")
        var.value = jax.device_put(new, old.sharding)
    nnx.update(policy, state)
    return policy, tok, info


def progress(run: RunDir, stage: str = "grpo") -> dict[str, Any]:
    """What GRPO's held-out checks and rewards say, from the stage's metrics.jsonl.

    ``accuracy``: ``(first, last)``, the first check's and the last's; ``reward``: the mean
    summed reward over the first and the last quarter of the steps (at most 50 steps each);
    ``correct``: the same for ``answer_correct`` when it was a reward; ``best``:
    :func:`best_info`; ``alarms``: the steps whose check raised the alarm; ``checks``: how many.
    """
    m = read_metrics(run, stage)
    steps, acc = m.get("held_out/accuracy", ([], []))
    out: dict[str, Any] = {"checks": len(steps), "best": best_info(run, stage),
                           "accuracy": (acc[0], acc[-1]) if acc else None,
                           "alarms": [s for s, v in zip(*m.get("held_out/alarm", ([], [])), strict=True)
                                      if v]}
    for key, event in (("reward", "rewards/train/sum"), ("correct", "rewards/train/answer_correct")):
        values = m.get(event, ([], []))[1]
        width = max(1, min(len(values) // 4, 50)) if values else 0
        out[key] = (float(np.mean(values[:width])), float(np.mean(values[-width:]))) if values else None
    return out
