"""GRPO's prompts at the edge of the policy's competence.

A GRPO group whose answers are all right, or all wrong, has no right/wrong contrast: its
correctness advantages are all zero and it teaches nothing about correctness. With
``grpo.keep_contrast``, one sampling pass before training asks the starting policy for
G answers per prompt of GRPO's set, sampled as the rollouts are, and keeps the prompts
it gets right 1 to G-1 times (:func:`rewards.is_correct`). The kept prompts go to
``grpo/prompts.jsonl`` and a summary to ``grpo/contrast.json``; a resumed stage reads
them back instead of sampling again, so it trains on the same prompts.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections import Counter
from typing import TYPE_CHECKING, Any, Sequence

from reasonkit import models, rewards, template
from reasonkit.data import read_jsonl, write_jsonl
from reasonkit.runtime import is_writer, runs
from reasonkit.train import _generation as generation

if TYPE_CHECKING:
    from reasonkit.config import EvalConfig, Preset
    from reasonkit.data import Splits
    from reasonkit.runtime import RunDir

__all__ = ["PROMPTS_FILE", "SUMMARY_FILE", "as_rollouts", "sampled", "rights", "keep_contrast",
           "check_difficulty", "grpo_prompts"]

PROMPTS_FILE, SUMMARY_FILE = runs.CONTRAST_FILES  # runs.begin_stage clears both on a retrain


def as_rollouts(preset: Preset) -> EvalConfig:
    """The evaluation settings that sample as GRPO's rollouts do: GRPO's lengths,
    temperature, top-p and top-k, evaluation's batch.

    >>> from reasonkit.presets import get_preset
    >>> preset = get_preset("tiny")
    >>> cfg = as_rollouts(preset)
    >>> cfg.temperature, preset.eval.temperature, cfg.top_k == preset.grpo.top_k
    (0.9, 0.7, True)
    """
    g = preset.grpo
    return dataclasses.replace(preset.eval, max_prompt_length=g.max_prompt_length,
                               max_generation_length=g.max_generation_length,
                               temperature=g.temperature, top_p=g.top_p, top_k=g.top_k)


def sampled(policy, tokenizer, records: Sequence[dict], cfg: EvalConfig, model_cfg, k: int, *,
            seed: int, desc: str) -> list[list[str]]:
    """Per record: ``k`` answers sampled with ``cfg``'s settings (:func:`as_rollouts`), the
    i-th of each with sampling seed ``seed + i``; one sampler, its programs compiled once."""
    sampler = generation.make_sampler(policy, tokenizer, model_cfg, cfg)
    prompts = [template.format_prompt(r["prompt"]) for r in records]
    stops = models.stop_token_ids(tokenizer)
    rounds = [generation.generate(sampler, prompts, cfg, stops, sample=True, seed=seed + i,
                                  desc=f"{desc}: answer {i + 1}/{k}") for i in range(k)]
    return [list(texts) for texts in zip(*rounds, strict=True)] if rounds else [[] for _ in records]


def rights(policy, tokenizer, records: Sequence[dict], preset: Preset) -> list[int]:
    """Per record: how many of G answers sampled as GRPO's rollouts are right."""
    g = preset.grpo
    texts = sampled(policy, tokenizer, records, as_rollouts(preset), preset.model, g.num_generations,
                    seed=g.seed, desc="GRPO prompts")
    return [sum(rewards.is_correct(t, r["answer"], r.get("domain")) for t in answers)
            for r, answers in zip(records, texts, strict=True)]


def keep_contrast(records: Sequence[dict], counts: Sequence[int], num_generations: int
                  ) -> tuple[list[dict], dict[str, Any]]:
    """The records right 1 to G-1 times out of G, and a summary of the pass.

    >>> recs = [{"id": i, "domain": "math"} for i in range(4)]
    >>> kept, info = keep_contrast(recs, [0, 3, 4, 1], 4)
    >>> [r["id"] for r in kept], info["all_wrong"], info["all_right"], info["kept"]
    ([1, 3], 1, 1, 2)
    """
    kept = [r for r, c in zip(records, counts, strict=True) if 0 < c < num_generations]
    return kept, {
        "screened": len(records), "kept": len(kept), "num_generations": num_generations,
        "all_wrong": sum(c == 0 for c in counts),
        "all_right": sum(c == num_generations for c in counts),
        "rights": dict(sorted(Counter(int(c) for c in counts).items())),
        "kept_by_domain": dict(sorted(Counter(r["domain"] for r in kept).items()))}


def check_difficulty(preset: Preset, splits: Splits) -> None:
    """Refuse splits whose GRPO prompts are not at ``grpo.difficulty`` (the data stage ran
    under another one), naming what to do."""
    want = preset.grpo.difficulty if preset.grpo.difficulty > preset.data.difficulty else None
    have = {r["id"].rsplit("-", 2)[-2] for r in splits.grpo
            if str(r.get("id", "")).startswith("tasks-")} if splits.eval_hard else set()
    if (want is None and splits.eval_hard) or (want is not None and have != {f"d{want}"}):
        drawn = ", ".join(sorted(have)) or "the data's"
        raise ValueError(f"grpo.difficulty={preset.grpo.difficulty}, but the data stage drew "
                         f"GRPO's prompts at difficulty {drawn}: run the data stage (02) again "
                         "with this preset, or set grpo.difficulty back")


def grpo_prompts(preset: Preset, run: RunDir, policy, tokenizer, splits: Splits) -> list[dict]:
    """GRPO's training records: the split's, or with ``grpo.keep_contrast`` those the
    starting ``policy`` gets right 1 to G-1 times out of G (sampled once, then read back
    from the stage's directory)."""
    check_difficulty(preset, splits)
    records = splits.grpo
    if not preset.grpo.keep_contrast:
        return list(records)
    path = run.stage("grpo") / PROMPTS_FILE
    if path.is_file():
        return read_jsonl(path)
    kept, info = keep_contrast(records, rights(policy, tokenizer, records, preset),
                               preset.grpo.num_generations)
    print(f"GRPO prompts: kept {info['kept']} of {info['screened']}, right 1 to "
          f"{info['num_generations'] - 1} times of {info['num_generations']} "
          f"({info['all_wrong']} all wrong, {info['all_right']} all right)")
    if not kept:
        raise ValueError(f"grpo.keep_contrast: the starting policy gets none of GRPO's "
                         f"{len(records)} prompts right 1 to {preset.grpo.num_generations - 1} "
                         f"times of {preset.grpo.num_generations} ({info['all_wrong']} all wrong, "
                         f"{info['all_right']} all right): nothing to train on; set "
                         "grpo.keep_contrast=false, or change grpo.difficulty")
    if is_writer():
        partial = path.with_name(f".{PROMPTS_FILE}.partial")
        write_jsonl(kept, partial)
        (run.stage("grpo") / SUMMARY_FILE).write_text(json.dumps(info, indent=1) + "\n")
        os.replace(partial, path)  # last: its presence says the pass finished
    return kept
