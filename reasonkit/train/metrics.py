"""What a training stage logs: Tunix's metrics to metrics.jsonl and TensorBoard, and more.

:func:`metrics_options` points Tunix's metrics logger at ``<stage>/metrics.jsonl``
(through :class:`JsonlBackend`) and ``<stage>/tensorboard``; :func:`read_metrics` reads
the JSONL back as series. :func:`log_compiles` adds the stage's XLA compilation counts,
and :func:`grpo_metrics` is GRPO's own metric function: the fraction of prompts whose
answers all scored alike, and now and then one answer shown with its rewards
(:func:`show_answer`).
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Sequence

import numpy as np

from reasonkit import rewards, template
from reasonkit.config import GRPOConfig
from reasonkit.runtime import compiles
from reasonkit.runtime.runs import RunDir, open_jsonl
from reasonkit.runtime.session import is_writer

__all__ = ["JsonlBackend", "metrics_options", "read_metrics", "log_compiles", "grpo_metrics",
           "show_answer"]


class JsonlBackend:
    """A metrax logging backend that appends ``{"event", "step", "value"}`` lines."""

    def __init__(self, path: str | os.PathLike):
        self._f = open_jsonl(path)

    def log_scalar(self, event: str, value: Any, **kwargs: Any) -> None:
        # jax.monitoring listeners are process-wide: JAX / Orbax internals arrive here
        # too, and a closed logger may still be called. Ignore both.
        if self._f.closed or event.startswith("/jax/"):
            return
        self._f.write(json.dumps({"event": event.lstrip("/"), "step": int(kwargs.get("step") or 0),
                                  "value": float(np.asarray(value))}) + "\n")
        self._f.flush()

    def close(self) -> None:
        self._f.close()


def metrics_options(run: RunDir, stage: str):
    """Tunix metrics to ``<stage>/metrics.jsonl`` and TensorBoard ``<stage>/tensorboard``."""
    import tunix
    from metrax.logging import TensorboardBackend

    tb = str(run.stage(stage) / "tensorboard")
    jsonl = run.stage(stage) / "metrics.jsonl"
    return tunix.MetricsLoggerOptions(log_dir=tb, backend_kwargs={"custom_backend": [
        lambda: JsonlBackend(jsonl), lambda: TensorboardBackend(log_dir=tb)]})


def read_metrics(run: RunDir, stage: str) -> dict[str, tuple[list[int], list[float]]]:
    """``{event: (steps, values)}`` from a stage's metrics.jsonl (last value per step wins)."""
    series: dict[str, dict[int, float]] = {}
    for row in run.read_metrics(stage):
        if "event" in row:
            series.setdefault(row["event"], {})[row["step"]] = row["value"]
    return {k: (sorted(v), [v[s] for s in sorted(v)]) for k, v in series.items()}


def log_compiles(run: RunDir, stage: str, counter: compiles.CompileCounter,
                 step: int) -> dict[str, Any]:
    """Append ``compiles/total`` and ``compiles/after_warmup`` to the stage's metrics.jsonl."""
    summary = counter.summary()
    if summary["after_warmup"]:
        print(f"{stage}: {summary['after_warmup']} XLA compilation(s) after the first step: "
              f"{summary['names_after_warmup']}: one per step means a batch shape keeps "
              "changing; a few tiny ones once (Tunix's sampler compiles jit(equal) on its "
              "second call) cost nothing")
    for key in ("total", "after_warmup"):
        run.append_metrics(stage, {"event": f"compiles/{key}", "step": step,
                                   "value": float(summary[key] or 0)})
    return summary


def grpo_metrics(cluster, cfg: GRPOConfig, reward_fns: Sequence[Callable]) -> Callable:
    """A metric function for Tunix's GRPO learner (its ``metric_fns``): what each step's
    rewards can teach, and now and then one of the answers they scored.

    Every step it logs ``rewards/frac_zero_std`` (``rewards/train/frac_zero_std`` in
    metrics.jsonl): the fraction of prompts whose G answers all got the same reward
    (:func:`reasonkit.rewards.frac_zero_std`), which move nothing. Every
    ``cfg.show_every`` steps (0: never) it prints the first answer of the step, the end of
    its prompt and what each reward gave it.
    """
    def metrics(prompts, completions, advantages, **columns) -> dict[str, tuple[float, Callable]]:
        summed = np.asarray(columns.pop("rewards"), dtype=float)  # [B * G]: each answer's r_i
        step = cluster.global_steps  # the step these rollouts train, as the metrics number it
        if cfg.show_every and step % cfg.show_every == 0 and is_writer():
            print(show_answer(step, prompts, completions, summed, columns, reward_fns,
                              cfg.num_generations))
        return {"rewards/frac_zero_std": (rewards.frac_zero_std(summed, cfg.num_generations), np.mean)}

    return metrics


def show_answer(step: int, prompts: Sequence[str], completions: Sequence[str], summed: np.ndarray,
                columns: dict[str, Any], reward_fns: Sequence[Callable], num_generations: int,
                index: int = 0, tail: int = 100) -> str:
    """A few lines on answer ``index`` of a GRPO step: the end of its prompt, the answer, each
    reward's score of it (scored again, alone) and its group's summed rewards."""
    one = dict(prompts=[prompts[index]], completions=[completions[index]],
               **{k: np.asarray(v)[index:index + 1] for k, v in columns.items()})
    scores = []
    for fn in reward_fns:
        try:
            scores.append(f"{fn.__name__} {fn(**one)[0]:.2f}")
        except Exception as e:  # noqa: BLE001 - a printout must never stop training
            scores.append(f"{fn.__name__} ? ({type(e).__name__})")
    question = str(prompts[index]).rsplit(template.END_OF_TURN, 1)[0]
    first = index - index % num_generations
    group = " ".join(f"{r:g}" for r in summed[first:first + num_generations])
    return (f"--- GRPO step {step}: one sampled answer of {len(completions)}\n"
            f"prompt ends: ...{question[-tail:]!r}\n"
            f"answer: {completions[index]!r}\n"
            f"rewards: {', '.join(scores)}; sum {summed[index]:g} (its group of {num_generations}: {group})")
