"""What a training stage logs: Tunix's metrics to metrics.jsonl and TensorBoard, and more.

:func:`metrics_options` points Tunix's metrics logger at ``<stage>/metrics.jsonl``
(through :class:`JsonlBackend`) and ``<stage>/tensorboard``; :func:`read_metrics` reads
the JSONL back as series. :func:`log_compiles` adds the stage's XLA compilation counts,
and :func:`grpo_metrics` is GRPO's own metric function: the fraction of prompts whose
answers all scored alike (summed, right or wrong alone, and per reward: each reward
wrapped in :class:`Recorded`), and now and then one answer shown with its rewards
(:func:`show_answer`).
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Sequence

import numpy as np

from reasonkit import rewards, template
from reasonkit.config import GRPOConfig, Preset
from reasonkit.runtime import RunDir, compiles, is_writer, open_jsonl
from reasonkit.train import _seam

__all__ = ["JsonlBackend", "metrics_options", "read_metrics", "log_compiles", "Recorded",
           "grpo_metrics", "show_answer", "show_progress"]


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
    """Say the stage's compilations in one line (:meth:`CompileCounter.line`) and append
    ``compiles/total``, ``compiles/after_warmup``, ``compiles/backend`` (programs compiled, not
    loaded from the cache) and ``compiles/seconds/<program>`` to the stage's metrics.jsonl."""
    summary = counter.summary()
    print(f"{stage}: {summary['line']}")
    if summary["after_warmup"]:
        print(f"{stage}: {summary['after_warmup']} XLA compilation(s) after the first step: "
              f"{summary['names_after_warmup']}: one per step means a batch shape keeps "
              "changing; a few tiny ones once (Tunix's sampler compiles jit(equal) on its "
              "second call) cost nothing")
    for key, name in (("total", "total"), ("after_warmup", "after_warmup"), ("compiled", "backend")):
        run.append_metrics(stage, {"event": f"compiles/{name}", "step": step,
                                   "value": float(summary[key] or 0)})
    seconds: dict[str, float] = {}
    for program in counter.programs:
        seconds[program.label] = seconds.get(program.label, 0.0) + program.seconds
    for label, value in seconds.items():
        run.append_metrics(stage, {"event": f"compiles/seconds/{label}", "step": step,
                                   "value": round(value, 3)})
    return summary


class Recorded:
    """A reward function that keeps what it returned for the last call it scored a whole step.

    Tunix logs each reward's mean, not its values per answer; :func:`grpo_metrics` reads
    ``last`` to tell which rewards had a spread within each group. Named as the function
    it wraps (Tunix logs a reward by ``__name__``), and it returns exactly what that returns.

    >>> from reasonkit import rewards
    >>> fn = Recorded(rewards.answer_correct)
    >>> fn.__name__, fn(None, ["<answer>4</answer>", "5"], answer=["4", "4"]), fn.last
    ('answer_correct', [3.0, 0.0], [3.0, 0.0])
    """

    def __init__(self, fn: Callable[..., Sequence[float]]):
        self.fn, self.__name__, self.last = fn, fn.__name__, None
        # Tunix reads a reward's signature (for algorithm settings it asks for): fn's
        self.__wrapped__, self.__doc__ = fn, fn.__doc__

    def __call__(self, prompts, completions, **kwargs) -> Sequence[float]:
        out = self.fn(prompts, completions, **kwargs)
        self.last = out
        return out


def grpo_metrics(cluster, cfg: GRPOConfig, reward_fns: Sequence[Callable]) -> Callable:
    """A metric function for Tunix's GRPO learner (its ``metric_fns``): what each step's
    rewards can teach, and now and then one of the answers they scored.

    Every step it logs the fraction of prompts whose G answers all scored alike
    (:func:`reasonkit.rewards.frac_zero_std`), which move nothing: ``rewards/frac_zero_std``
    (``rewards/train/frac_zero_std`` in metrics.jsonl) for the summed reward, and
    ``rewards/frac_zero_std/correct`` for right or wrong alone
    (:func:`reasonkit.rewards.is_correct`): a group whose answers are all right or all wrong
    has nothing to teach about correctness, however its format rewards spread. Each reward
    function wrapped in :class:`Recorded` adds ``rewards/frac_zero_std/<its name>``. Every
    ``cfg.show_every`` steps (0: never) it prints the first answer of the step, the end of
    its prompt and what each reward gave it.
    """
    g = cfg.num_generations

    def metrics(prompts, completions, advantages, **columns) -> dict[str, tuple[float, Callable]]:
        summed = np.asarray(columns.pop("rewards"), dtype=float)  # [B * G]: each answer's r_i
        out = {"rewards/frac_zero_std": (rewards.frac_zero_std(summed, g), np.mean)}
        n = len(summed)
        for fn in reward_fns:  # before show_answer scores one answer again
            last = getattr(fn, "last", None)
            if last is not None and len(last) == n:
                out[f"rewards/frac_zero_std/{fn.__name__}"] = (rewards.frac_zero_std(last, g), np.mean)
        if "answer" in columns:
            domains = columns.get("domain", ["math"] * n)
            right = [float(rewards.is_correct(c, a, d))
                     for c, a, d in zip(completions, columns["answer"], domains, strict=True)]
            out["rewards/frac_zero_std/correct"] = (rewards.frac_zero_std(right, g), np.mean)
        step = cluster.global_steps  # the step these rollouts train, as the metrics number it
        if cfg.show_every and step % cfg.show_every == 0 and is_writer():
            print(show_answer(step, prompts, completions, summed, columns, reward_fns, g))
        return out

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


def show_progress(trainer, preset: Preset, stage: str, reward_fns: Sequence[Callable] = ()):
    """Give a built trainer a progress bar of the current step: recent loss, the learning
    rate (GRPO: its KL, total reward and ``answer_correct``), printed as a line ten times a
    stage (the patch package's ``progress``); returns the bar.

    ``trainer``: the ``PeftTrainer`` (``"sft"``), ``DPOTrainer`` (``"dpo"``) or the RL
    cluster's actor trainer (``"grpo"``, whose ``reward_fns`` name the correctness reward).
    """
    cfg = getattr(preset, stage)
    label = {"sft": "SFT", "dpo": getattr(cfg, "algorithm", "dpo").upper(), "grpo": "GRPO"}[stage]
    extra = []
    if stage == "grpo":  # Tunix logs the rewards under a prefix of their own, not the trainer's
        extra = [("rewards", "sum", "reward")] + [
            ("rewards", fn.__name__, "correct") for fn in reward_fns
            if fn.__name__.startswith("answer_correct")][:1]
    return _seam.show_recent(trainer, extra=extra, every=max(1, cfg.max_steps // 10), label=label)
