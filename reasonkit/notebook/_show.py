"""What the notebooks show of a model and its evaluation: a few completions, GRPO's groups,
the changes from stage to stage and an optional LLM judge's scores.

>>> [r["id"] for r in pick_examples([{"id": i, "domain": d} for i, d in enumerate(["general", "math"])])]
[1, 0]
"""

from __future__ import annotations

import collections
import dataclasses
import math
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from reasonkit import models, template
from reasonkit import rewards as rewards_lib
from reasonkit.config import EvalConfig, ModelConfig, Preset
from reasonkit.evaluate import LABELS, generate, make_sampler, ordered, score_stage, standard_error

__all__ = ["pick_examples", "show_completions", "group_advantages", "rollout_groups", "noise_points",
           "describe_changes", "judge"]


def pick_examples(records: Sequence[dict], prefer: Sequence[str] = ("math", "coding", "summarization"),
                  n: int = 3) -> list[dict]:
    """The first record of each ``prefer`` domain, then of other domains, ``n`` at most.

    The notebooks show these prompts before and after every stage; data without some of
    the preferred domains still gives ``n`` examples when it has ``n`` domains.

    >>> recs = [{"id": i, "domain": d} for i, d in enumerate(["general", "math", "math", "science"])]
    >>> [r["id"] for r in pick_examples(recs)]
    [1, 0, 3]
    """
    first_of: dict[str, dict] = {}
    for r in records:
        first_of.setdefault(r["domain"], r)
    order = [d for d in prefer if d in first_of] + [d for d in first_of if d not in prefer]
    return [first_of[d] for d in order[:n]]


def show_completions(model, tokenizer, records: Sequence[dict], model_cfg: ModelConfig,
                     cfg: EvalConfig, label: str) -> list[dict]:
    """Greedy completions of a few ``records``, printed with their scores (for notebooks).

    Returns the rows :func:`reasonkit.evaluate.score_stage` builds for them (greedy only).
    """
    sampler = make_sampler(model, tokenizer, model_cfg, cfg)
    prompts = [template.format_prompt(r["prompt"]) for r in records]
    texts = generate(sampler, prompts, cfg, models.stop_token_ids(tokenizer), desc=label)
    rows = score_stage(records, texts, [[] for _ in records])
    for row in rows:
        print(f"--- {label} · {row['domain']}: {row['prompt']!r} (gold {row['gold']!r})")
        print(f"{row['completion']}\n    format ok: {row['format_ok']}, correct: {row['correct']} "
              f"({row['reason']})")
    return rows


def group_advantages(rewards: Sequence[float], num_generations: int) -> np.ndarray:
    """GRPO's advantages: each reward minus its group's mean, over the group's standard deviation.

    ``rewards`` holds groups of ``num_generations`` answers to one prompt, one group after
    another, as Tunix's GRPO learner orders them. As ``tunix.rl.algo_core.compute_advantages``
    does, the standard deviation is the sample one (``ddof=1``) plus 1e-6, so a group whose
    answers all score the same gets advantages of 0: it moves nothing.

    >>> group_advantages([3.0, 0.0, 0.0, 3.0,   5.0, 5.0, 5.0, 5.0], 4).round(3).tolist()
    [0.866, -0.866, -0.866, 0.866, 0.0, 0.0, 0.0, 0.0]
    """
    if num_generations < 2:
        raise ValueError(f"group_advantages: num_generations={num_generations}; a group needs "
                         "at least 2 answers to have a spread")
    groups = rewards_lib.reward_groups(rewards, num_generations, "group_advantages")  # [prompts, G]
    mean, std = groups.mean(axis=1, keepdims=True), groups.std(axis=1, ddof=1, keepdims=True)
    return ((groups - mean) / (std + 1e-6)).reshape(-1)


def rollout_groups(model, tokenizer, batch: Mapping[str, Any], preset: Preset,
                   reward_fns: Sequence[Callable], *, prompts: int = 1, seed: int = 0) -> dict[str, Any]:
    """What one GRPO step sees for the first ``prompts`` rows of a GRPO ``batch``: ``G`` answers each.

    Sampled with GRPO's settings (``preset.grpo``: ``num_generations``, temperature, top-p,
    top-k, lengths) by a Tunix sampler, as the rollouts are, scored by ``reward_fns`` with the
    batch's other columns as keyword arguments, as Tunix calls them. Returns the
    ``completions`` (prompt by prompt, ``G`` each), ``rewards`` (``{fn name: [...]}``),
    their ``total`` and the ``advantages`` (:func:`group_advantages`).
    """
    g = preset.grpo
    prompts = min(prompts, len(batch["prompts"]))
    cfg = dataclasses.replace(preset.eval, batch_size=prompts * g.num_generations, buckets=1,
                              temperature=g.temperature, top_p=g.top_p, top_k=g.top_k,
                              max_prompt_length=g.max_prompt_length,
                              max_generation_length=g.max_generation_length)
    repeat = lambda column: [x for x in column[:prompts] for _ in range(g.num_generations)]  # noqa: E731
    sampler = make_sampler(model, tokenizer, preset.model, cfg)
    texts = generate(sampler, [str(p) for p in repeat(batch["prompts"])], cfg,
                     models.stop_token_ids(tokenizer), sample=True, seed=seed, desc="GRPO groups")
    columns = {k: repeat(v) for k, v in batch.items() if k != "prompts"}
    rewards = {fn.__name__: [float(x) for x in fn(None, texts, **columns)] for fn in reward_fns}
    total = np.sum(list(rewards.values()), axis=0)  # [prompts * G]
    return {"completions": texts, "rewards": rewards, "total": total,
            "advantages": group_advantages(total, g.num_generations)}


def noise_points(a: float, b: float, n_a: int, n_b: int) -> float:
    """Two standard errors of the difference of two rates, in percentage points.

    Rates are smoothed to (x + 1) / (n + 2) first, so a rate of 0% or 100% does not
    claim zero uncertainty.

    >>> round(noise_points(0.0, 0.042, 96, 96), 1)  # 4 of 96 right is still noise
    5.0
    """
    def se(p, n):
        return standard_error((p * n + 1) / (n + 2), n)
    return 200 * math.hypot(se(a, n_a), se(b, n_b))


def describe_changes(results: dict[str, dict], metrics: Sequence[str] = ("format_rate", "accuracy"),
                     min_points: float = 2.0) -> list[str]:
    """Plain-language lines: what each stage improved or regressed versus the one before.

    A change counts when it exceeds both ``min_points`` percentage points and two
    standard errors of the difference (:func:`noise_points`); smaller moves are
    reported as unchanged.

    >>> r = {s: {"summary": {"overall": {"n": 400, "format_rate": f, "accuracy": a}}}
    ...      for s, f, a in [("base", 0.5, 0.2), ("sft", 0.9, 0.3), ("dpo", 0.77, 0.31)]}
    >>> for line in describe_changes(r): print(line)
    sft vs base: format pass improved 50.0% -> 90.0% (+40.0 points)
    sft vs base: accuracy improved 20.0% -> 30.0% (+10.0 points)
    dpo vs sft: format pass REGRESSED 90.0% -> 77.0% (-13.0 points)
    dpo vs sft: accuracy unchanged within noise (30.0% -> 31.0%)
    """
    lines = []
    stages = ordered(results)
    for prev, cur in zip(stages, stages[1:], strict=False):
        a, b = results[prev]["summary"]["overall"], results[cur]["summary"]["overall"]
        for m in metrics:
            if m not in a or m not in b:  # a stage evaluated on no prompts
                lines.append(f"{cur} vs {prev}: {LABELS[m]} not measured (n = {a['n']}, {b['n']})")
                continue
            delta = 100 * (b[m] - a[m])
            noise = noise_points(a[m], b[m], a["n"], b["n"])
            what = f"{cur} vs {prev}: {LABELS[m]}"
            if abs(delta) < max(min_points, noise):
                lines.append(f"{what} unchanged within noise ({100 * a[m]:.1f}% -> {100 * b[m]:.1f}%)")
            else:
                word = "improved" if delta > 0 else "REGRESSED"
                lines.append(f"{what} {word} {100 * a[m]:.1f}% -> {100 * b[m]:.1f}% ({delta:+.1f} points)")
    return lines


def judge(rows: Sequence[dict], judge_fn: Callable[[str, str, str], dict[str, float]]) -> dict[str, float]:
    """Mean 1-10 scores from a user-supplied LLM judge ``judge_fn(prompt, completion, gold)``.

    ``judge_fn`` returns e.g. ``{"reasoning": 7, "answer": 6}``; scores outside 1-10 or
    a judge that raises are skipped and counted, never silently averaged in.

    >>> judge([{"prompt": "p", "completion": "c", "gold": "g"}] * 2,
    ...       lambda p, c, g: {"reasoning": 6, "answer": 8})
    {'reasoning': 6.0, 'answer': 8.0, 'judged': 2, 'skipped': 0}
    """
    scores: dict[str, list[float]] = collections.defaultdict(list)
    skipped = 0
    for row in rows:
        try:
            got = judge_fn(row["prompt"], row["completion"], row["gold"])
            if not all(1 <= float(v) <= 10 for v in got.values()):
                raise ValueError(f"score outside 1-10: {got}")
        except Exception:  # noqa: BLE001 - a judge is user code; count and move on
            skipped += 1
            continue
        for key, value in got.items():
            scores[key].append(float(value))
    out = {k: float(np.mean(v)) for k, v in scores.items()}
    return {**out, "judged": len(rows) - skipped, "skipped": skipped}
