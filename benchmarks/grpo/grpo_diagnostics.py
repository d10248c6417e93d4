"""What GRPO can still teach a run's policy: greedy, pass@k and maj@k per domain, at difficulty 1 and 2.

Run from the repository root, on a run whose stages finished (sampling only, nothing trains):

    python -m benchmarks.grpo.grpo_diagnostics --run demo [--root runs] [--per-domain 50] [--k 8]

For each finished stage of ``--stages`` (default: sft and grpo) it loads the stage's
adapters and answers fresh prompts, ``--per-domain`` per domain at each difficulty
(1: the training data's; 2: one more step or item), drawn from the task generators at
seeds no split, no data pool and no pretraining document uses, and only those whose
prompt fits ``eval.max_prompt_length``. Each prompt gets one greedy answer and ``k``
answers sampled as GRPO samples its rollouts (``grpo.temperature``, top-p, top-k). Per
stage, difficulty and domain it reports

- ``greedy``: the greedy answer is right (format and value, :func:`reasonkit.rewards.is_correct`);
- ``pass_at_k``: one of the k samples is right; ``maj_at_k``: their most common answer is;
- ``zero_std``: the k samples are all right or all wrong: a GRPO group with no
  right/wrong contrast, which teaches nothing about correctness;
- ``dropped``: fresh prompts left out for their length.

pass@k minus greedy is what GRPO could turn into greedy accuracy; a large zero_std says
most prompts are too easy or too hard for it. Each has a *verified* twin
(``greedy_verified``, ``pass_at_k_verified``, ``maj_at_k_verified``, ``zero_std_verified``):
the answer is right and its reasoning supports it (:func:`reasonkit.rewards.is_verified`:
the conclusion names it, the checkable steps hold); maj@k verified votes among the
samples whose reasoning supports their own answer, which needs no gold. Prompts and
answers get ``--prompt-length`` and ``--gen-length`` tokens (difficulty 2 needs more than
the tiny preset's evaluation gives).
Writes ``--out`` (default ``benchmarks/results/grpo_diagnostics.json``) and prints a table.
``--quick`` takes 4 prompts per domain and k = 2, for a smoke run.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import pathlib
import time
from typing import Any

import numpy as np

from benchmarks.common import result_path, write_json
from reasonkit import answers, data, evaluate, models, rewards, tasks, template
from reasonkit.models import tiny
from reasonkit.presets import get_preset
from reasonkit.runtime import runs

FRESH_SEED = 70_000  # task seeds from here on: apart from the data pool's and grpo/seeds.py's
DIFFICULTIES = (1, 2)


def fresh_prompts(preset, run: runs.RunDir, count, per_domain: int, difficulty: int
                  ) -> tuple[list[dict], dict[str, int]]:
    """``per_domain`` fresh records per domain at ``difficulty`` that fit the eval prompt
    budget, none seen by the run's splits or pretraining; and how many each domain dropped."""
    splits, _ = data.read_splits(run.require("data"))
    seen = {template.normalize_prompt(r["prompt"])
            for split in (splits.eval, splits.sft, splits.dpo, splits.grpo) for r in split}
    seen |= {template.normalize_prompt(r["prompt"]) for r in tiny.pretraining_records()[0]}
    budget = preset.eval.max_prompt_length
    too_long: dict[str, set[str]] = {d: set() for d in tasks.DOMAINS}

    def fits(r: dict) -> bool:
        if count(template.format_prompt(r["prompt"])) + 1 <= budget:  # BOS included
            return True
        too_long[r["domain"]].add(template.normalize_prompt(r["prompt"]))
        return False

    out = tasks.fresh_records(per_domain, first_seed=FRESH_SEED, difficulty=difficulty, seen=seen,
                              keep=fits)
    dropped = {d: len(too_long[d]) for d in tasks.DOMAINS
               if difficulty <= tasks.MAX_DIFFICULTY.get(d, difficulty)}
    return out, dropped


def verdicts(records: list[dict], texts: list[list[str]], verdict) -> np.ndarray:
    """``verdict(text, gold, domain)`` per prompt and answer: [prompts, answers]."""
    return np.array([[verdict(t, r["answer"], r["domain"]) for t in group]
                     for r, group in zip(records, texts, strict=True)], dtype=bool)


def self_consistent_vote(records: list[dict], samples: list[list[str]]) -> np.ndarray:
    """Per prompt: the most common answer among the samples whose reasoning supports their
    own answer (no gold needed) is right."""
    out = []
    for r, group in zip(records, samples, strict=True):
        votes = collections.Counter()
        for text in group:
            found = template.extract_answer(text)
            if found.ok and answers.supports(template.reasoning_of(text), found.answer):
                votes[answers.normalize_text(found.answer)] += 1
        out.append(bool(votes) and answers.check_answer(r["domain"], votes.most_common(1)[0][0],
                                                        r["answer"]))
    return np.array(out, dtype=bool)


def diagnose(preset, run: runs.RunDir, stage: str, sets: dict[int, list[dict]], k: int) -> dict:
    """Greedy, pass@k, maj@k and the zero-std fraction of ``stage`` per difficulty and
    domain, plain and verified."""
    g = preset.grpo
    cfg = dataclasses.replace(preset.eval, num_samples=k, temperature=g.temperature, top_p=g.top_p,
                              top_k=g.top_k)  # lengths: main() sets them on preset.eval
    _, policy, tok, _ = models.load_policy(preset, run, stage, None)
    sampler = evaluate.make_sampler(policy, tok, preset.model, cfg)
    stops = models.stop_token_ids(tok)
    out = {}
    for difficulty, records in sets.items():
        prompts = [template.format_prompt(r["prompt"]) for r in records]
        greedy = evaluate.generate(sampler, prompts, cfg, stops, desc=f"{stage} d{difficulty}: greedy")
        rounds = [evaluate.generate(sampler, prompts, cfg, stops, sample=True, seed=cfg.seed + i,
                                    desc=f"{stage} d{difficulty}: sample {i + 1}/{k}") for i in range(k)]
        samples = [list(group) for group in zip(*rounds, strict=True)]
        rows = evaluate.score_stage(records, greedy, samples)
        verified = verdicts(records, samples, rewards.is_verified)
        greedy_verified = verdicts(records, [[t] for t in greedy], rewards.is_verified)[:, 0]
        columns = {"greedy": np.array([row["correct"] for row in rows]),
                   "pass_at_k": np.array([row["pass_at_k"] for row in rows]),
                   "maj_at_k": np.array([row["maj_at_k"] for row in rows]),
                   "greedy_verified": greedy_verified,
                   "pass_at_k_verified": verified.any(axis=1),
                   "maj_at_k_verified": self_consistent_vote(records, samples)}
        flat = {"zero_std": np.array([row["samples_right"] in (0, row["samples"]) for row in rows]),
                "zero_std_verified": np.all(verified == verified[:, :1], axis=1)}
        by_domain: dict[str, Any] = {}
        for domain in sorted({r["domain"] for r in records}):
            pick = [i for i, r in enumerate(records) if r["domain"] == domain]
            by_domain[domain] = {"n": len(pick),
                                 **{key: round(100 * float(np.mean(col[pick])), 2)
                                    for key, col in columns.items()},
                                 **{key: round(float(np.mean(col[pick])), 3) for key, col in flat.items()}}
        out[str(difficulty)] = by_domain
    del policy, sampler
    models.free()
    return out


def table(results: dict[str, dict], k: int) -> str:
    """Markdown: plain / verified in each cell."""
    lines = [f"| stage | difficulty | domain | n | greedy | pass@{k} | maj@{k} | zero-std |",
             "|---|---|---|---|---|---|---|---|"]
    for stage, by_difficulty in results.items():
        for difficulty, by_domain in by_difficulty.items():
            for domain, r in by_domain.items():
                cells = [f"{r[c]:.1f} / {r[c + '_verified']:.1f}"
                         for c in ("greedy", "pass_at_k", "maj_at_k")]
                lines.append(f"| {stage} | {difficulty} | {domain} | {r['n']} | {' | '.join(cells)} | "
                             f"{r['zero_std']:.2f} / {r['zero_std_verified']:.2f} |")
    return "\n".join(lines)


def main(argv=None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--run", required=True, help="the run's name (its stages must have finished)")
    ap.add_argument("--root", default=None, help="the runs directory (default: the session's)")
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--stages", nargs="+", default=["sft", "grpo"])
    ap.add_argument("--per-domain", type=int, default=50)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--prompt-length", type=int, default=128, help="prompt tokens, BOS included")
    ap.add_argument("--gen-length", type=int, default=112, help="tokens sampled per answer")
    ap.add_argument("--quick", action="store_true", help="4 prompts per domain, k = 2")
    ap.add_argument("--out", default=str(result_path("grpo_diagnostics.json")))
    args = ap.parse_args(argv)
    per_domain, k = (4, 2) if args.quick else (args.per_domain, args.k)
    if per_domain < 1 or k < 2:
        ap.error(f"--per-domain={per_domain} must be >= 1 and --k={k} >= 2")
    preset = get_preset(args.preset, **{"eval.max_prompt_length": args.prompt_length,
                                        "eval.max_generation_length": args.gen_length})
    run = runs.RunDir.create(args.run, root=args.root and pathlib.Path(args.root).resolve())
    tok = models.load_tokenizer(models.resolve_source(preset.model) / "tokenizer.model",
                                vocab_size=preset.model.vocab_size)
    count = lambda text: len(tok.EncodeAsIds(text))  # noqa: E731
    sets, dropped = {}, {}
    for difficulty in DIFFICULTIES:
        sets[difficulty], dropped[str(difficulty)] = fresh_prompts(preset, run, count, per_domain,
                                                                   difficulty)
    stages = [s for s in args.stages if run.is_finished(s)]
    if not stages:
        ap.error(f"none of {args.stages} finished in run {run.name!r}: train them first")
    t0 = time.time()
    results = {stage: diagnose(preset, run, stage, sets, k) for stage in stages}
    print(table(results, k))
    report = {"run": run.name, "preset": preset.name, "k": k, "per_domain": per_domain,
              "prompt_length": args.prompt_length, "gen_length": args.gen_length,
              "temperature": preset.grpo.temperature, "dropped_too_long": dropped,
              "seconds": round(time.time() - t0, 1), "results": results}
    write_json(args.out, report)
    return report


if __name__ == "__main__":
    main()
