"""DPO on the policy's own answers: on-policy preference pairs, and the held-out pair figures.

With ``dpo.pairs = "on-policy"``, one sampling pass at the DPO stage's start asks the policy
DPO starts from (SFT's) for ``dpo.onpolicy_samples`` (k) answers to each of
``dpo.onpolicy_prompts`` fresh prompts, drawn apart from every split, sampled as GRPO's
rollouts sample (:func:`reasonkit.train._contrast.sampled`). The checker judges each answer
(:func:`reasonkit.rewards.is_correct`, evaluation's verdict) and a verified right answer is
paired against a wrong answer of exact format; where all k are wrong, the gold trace is
chosen against the model's own wrong answer (:func:`reasonkit.data._pairs.onpolicy_pair`).

The pairs go to ``dpo/pairs.jsonl`` and the pass's counts to ``dpo/pairs.json`` (prompts
screened, right answers per prompt, pairs made, pairs with the gold chosen); a resumed
stage reads them back instead of sampling again. The first ``dpo.held_out_pairs`` pairs
(in turn by domain) are kept apart, not trained on: :class:`PairCheck` measures on them,
before the first step, every ``dpo.eval_every`` steps and at the end,

- ``held_out/pair_accuracy``: the share whose implicit reward margin
  ``beta * ((logp_c - ref_c) - (logp_r - ref_r))`` favours the chosen answer;
- ``held_out/chosen_logp_per_token``: the chosen answers' mean log-probability per token,
  which should not fall (DPO can lower the chosen answer's likelihood while it widens
  the margin: Smaug/DPOP, arXiv 2402.13228).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Sequence

import numpy as np

from reasonkit import collate, rewards, tasks, template
from reasonkit.config import DOMAINS, check_weights
from reasonkit.data import onpolicy_pair, read_jsonl, write_jsonl
from reasonkit.runtime import is_writer
from reasonkit.train import _contrast as contrast
from reasonkit.train import _seam
from reasonkit.train._batches import dpo_collator, dpo_examples
from reasonkit.train._held_out import held_out_block

if TYPE_CHECKING:
    from reasonkit.config import EvalConfig, Preset
    from reasonkit.data import Splits
    from reasonkit.runtime import RunDir

__all__ = ["PAIRS_FILE", "SUMMARY_FILE", "FRESH_SEED", "sampling", "fresh_prompts", "make_pairs",
           "dpo_pairs", "clear", "PairCheck", "checked"]

PAIRS_FILE, SUMMARY_FILE = "pairs.jsonl", "pairs.json"  # in the DPO stage's directory
# Task seeds of the fresh prompts, from here on (+ 100 * data.seed): apart from the data
# pool's, data.HARD_SEED's (20_000) and the benchmarks' fresh sets (50_000-70_000).
FRESH_SEED = 80_000


def sampling(preset: Preset) -> EvalConfig:
    """GRPO's sampling settings (:func:`~reasonkit.train._contrast.as_rollouts`), each answer
    cut to fit DPO's responses (one token left for the end of turn that closes it).

    >>> from reasonkit.presets import get_preset
    >>> cfg = sampling(get_preset("tiny", **{"dpo.max_response_length": 40}))
    >>> cfg.temperature, cfg.max_generation_length
    (0.9, 39)
    """
    import dataclasses

    cfg = contrast.as_rollouts(preset)
    return dataclasses.replace(cfg, max_generation_length=min(
        cfg.max_generation_length, preset.dpo.max_response_length - 1))


def fresh_prompts(preset: Preset, splits: Splits, tok) -> list[dict]:
    """``dpo.onpolicy_prompts`` synthetic task records, in turn by domain (the data mix's
    domains), none of whose prompts is in any split; each prompt fits DPO's and the
    sampler's prompt lengths and each gold trace DPO's responses."""
    data, dpo = preset.data, preset.dpo
    if "tasks" not in data.sources:
        raise ValueError(f"dpo.pairs='on-policy' draws its fresh prompts from the synthetic tasks, "
                         f"but data.sources={list(data.sources)} has no 'tasks': add it, or set "
                         "dpo.pairs='synthetic'")
    weights = check_weights(data.domain_weights)
    domains = [d for d in DOMAINS if weights.get(d, 0) > 0]
    seen = {template.normalize_prompt(r["prompt"])
            for name in ("eval", "sft", "dpo", "grpo", "eval_hard") for r in getattr(splits, name)}
    room = min(dpo.max_prompt_length, sampling(preset).max_prompt_length)

    def fits(r: dict) -> bool:  # BOS + prompt; the gold trace as a response
        return (1 + len(tok.EncodeAsIds(template.format_prompt(r["prompt"]))) <= room and len(
            tok.EncodeAsIds(template.format_completion(r["reasoning"], r["answer"])))
                <= dpo.max_response_length)

    per_domain = -(-dpo.onpolicy_prompts // max(len(domains), 1))
    records = tasks.fresh_records(per_domain, first_seed=FRESH_SEED + 100 * data.seed,
                                  difficulty=data.difficulty, seen=seen, keep=fits, domains=domains)
    return held_out_block(records, dpo.onpolicy_prompts)


def make_pairs(records: Sequence[dict], answers: Sequence[Sequence[str]], held_out: int
               ) -> tuple[list[dict], dict[str, Any]]:
    """The pairs of a sampling pass (``answers[i]``: the k answers to ``records[i]``), the
    first ``held_out`` of them (in turn by domain) marked ``held_out``, and its counts.

    >>> rec = {"id": "1", "domain": "math", "source": "x", "prompt": "3 * 4?",
    ...        "reasoning": "3 * 4 = 12.", "answer": "12"}
    >>> right, wrong = ("<reasoning>3 * 4 = 12.</reasoning>\\n<answer>12</answer>",
    ...                 "<reasoning>3 * 4 = 13.</reasoning>\\n<answer>13</answer>")
    >>> pairs, info = make_pairs([rec, rec, rec], [[right, wrong], [wrong, wrong], [right, right]], 1)
    >>> [p["chosen_from"] for p in pairs], [p["held_out"] for p in pairs]
    (['policy', 'gold'], [True, False])
    >>> info["rights"], info["pairs"], info["gold_chosen"], info["no_pair"]
    ({0: 1, 1: 1, 2: 1}, 2, 1, 1)
    """
    pairs, counts = [], []
    for r, texts in zip(records, answers, strict=True):
        right = [rewards.is_correct(t, r["answer"], r["domain"]) for t in texts]
        verified = [ok and rewards.is_verified(t, r["answer"], r["domain"])
                    for t, ok in zip(texts, right, strict=True)]
        counts.append(sum(right))
        pair = onpolicy_pair(r, texts, right, verified)
        if pair is not None:
            pairs.append(pair)
    held = {id(p) for p in held_out_block(pairs, held_out)}
    pairs = [{**p, "held_out": id(p) in held} for p in pairs]
    k = len(answers[0]) if answers else 0
    return pairs, {
        "screened": len(records), "samples": k,
        "rights": dict(sorted(Counter(int(c) for c in counts).items())),
        "pairs": len(pairs), "gold_chosen": sum(p["chosen_from"] == "gold" for p in pairs),
        "no_pair": len(records) - len(pairs), "held_out": len(held),
        "trained": len(pairs) - len(held),
        "pairs_by_domain": dict(sorted(Counter(p["domain"] for p in pairs).items()))}


def clear(run: RunDir) -> None:
    """Remove a DPO stage's pairs and their counts (a retrain samples them again)."""
    if is_writer():
        for name in (PAIRS_FILE, SUMMARY_FILE):
            (run.stage("dpo") / name).unlink(missing_ok=True)


def dpo_pairs(preset: Preset, run: RunDir, policy, tok, splits: Splits, *, step: int = 0
              ) -> tuple[list[dict], list[dict]]:
    """``(pairs to train on, held-out pairs)``: the split's synthetic pairs and none, or with
    ``dpo.pairs = "on-policy"`` those of one sampling pass of ``policy`` (the policy DPO
    starts from), made once and read back from ``dpo/pairs.jsonl`` after. ``step``: the
    step the trainer resumes from (a pass made after step 0 would not be from its start)."""
    cfg = preset.dpo
    if cfg.pairs == "synthetic":
        return list(splits.dpo), []
    path = run.stage("dpo") / PAIRS_FILE
    if path.is_file():
        pairs = read_jsonl(path)
    else:
        if step:
            raise FileNotFoundError(f"{path} is missing, but DPO resumes at step {step}: its pairs "
                                    "were sampled from the policy it started from. Train DPO again "
                                    "(retrain=True)")
        records = fresh_prompts(preset, splits, tok)
        answers = contrast.sampled(policy, tok, records, sampling(preset), preset.model,
                                   cfg.onpolicy_samples, seed=1_000 + cfg.seed, desc="DPO pairs")
        pairs, info = make_pairs(records, answers, cfg.held_out_pairs)
        print(f"DPO pairs: {info['pairs']} from {info['screened']} fresh prompts, {info['samples']} "
              f"answers each (right per prompt: {info['rights']}); {info['gold_chosen']} with the "
              f"gold chosen; {info['held_out']} held out")
        if is_writer():
            partial = path.with_name(f".{PAIRS_FILE}.partial")
            write_jsonl(pairs, partial)
            (run.stage("dpo") / SUMMARY_FILE).write_text(json.dumps(info, indent=1) + "\n")
            os.replace(partial, path)  # last: its presence says the pass finished
    train = [p for p in pairs if not p.get("held_out")]
    if not train:
        raise ValueError(f"dpo.pairs='on-policy': {len(pairs)} pairs from "
                         f"{cfg.onpolicy_prompts} fresh prompts, none left to train on (right "
                         f"answers per prompt: see {run.stage('dpo') / SUMMARY_FILE}). Raise "
                         "dpo.onpolicy_prompts or dpo.onpolicy_samples, lower dpo.held_out_pairs, "
                         "or set dpo.pairs='synthetic'")
    return train, [p for p in pairs if p.get("held_out")]


class PairCheck:
    """The held-out pair figures of a DPO trainer's policy, logged to the stage's metrics.

    ``pairs``: the held-out block, collated as DPO's batches are (rows of padding fill the
    last batch and are left out). Calling it with a step measures and logs
    ``held_out/pair_accuracy``, ``held_out/chosen_logp_per_token`` and
    ``held_out/pair_margin`` (the mean margin) at that step; ``readings`` holds this session's.
    """

    def __init__(self, trainer, pairs: Sequence[dict], preset: Preset, tok, run: RunDir,
                 mesh=None):
        from reasonkit.runtime import mesh as mesh_lib

        cfg = preset.dpo
        self.trainer, self.run, self.beta = trainer, run, cfg.beta
        stream = collate.batches(dpo_examples(pairs, tok), cfg.batch_size, dpo_collator(preset, tok),
                                 remainder="pad")
        self.batches = list(stream if mesh is None else mesh_lib.global_batches(stream, mesh))
        self.readings: list[dict[str, float]] = []

    def __call__(self, step: int) -> dict[str, float]:
        """Measure the policy as it is after ``step`` steps, and log it."""
        parts = [_seam.dpo_pair_log_probs(self.trainer, b) for b in self.batches]
        got = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]} if parts else {}
        tokens = got.get("chosen_tokens", np.zeros(0))
        keep = tokens > 0  # the padding rows have no chosen answer
        margin = self.beta * ((got["chosen"] - got["ref_chosen"])
                              - (got["rejected"] - got["ref_rejected"]))[keep] if parts else tokens
        n = int(keep.sum())
        reading = {"step": step, "n": n,
                   "pair_accuracy": float(np.mean(margin > 0)) if n else 0.0,
                   "pair_margin": float(np.mean(margin)) if n else 0.0,
                   "chosen_logp_per_token": float(np.mean(got["chosen"][keep] / tokens[keep]))
                   if n else 0.0}
        self.readings.append(reading)
        for name in ("pair_accuracy", "chosen_logp_per_token", "pair_margin"):
            self.run.append_metrics("dpo", {"event": f"held_out/{name}", "step": step,
                                            "value": reading[name]})
        if is_writer():
            print(f"DPO held-out pairs, step {step}: {reading['pair_accuracy']:.1%} of {n} ranked "
                  f"right (mean margin {reading['pair_margin']:+.3f}); chosen answers "
                  f"{reading['chosen_logp_per_token']:.3f} log-prob per token")
        return reading


def checked(stream: Iterable[Any], check: PairCheck | None, every: int, *,
            start: int = 0) -> Iterator[Any]:
    """``stream``, with ``check(step)`` before the first step this session trains (``start``,
    the step a resumed trainer restored; the items before it are discarded) and before
    each step after a multiple of ``every`` (0: none). The end is the caller's to check.

    >>> log = []
    >>> list(checked("abcde", log.append, 2)), log
    (['a', 'b', 'c', 'd', 'e'], [0, 2, 4])
    >>> log = []
    >>> list(checked("abcde", log.append, 0, start=3)), log
    (['a', 'b', 'c', 'd', 'e'], [3])
    """
    for i, item in enumerate(stream):
        if check is not None and (i == start or (every and i > start and i % every == 0)):
            check(i)
        yield item
