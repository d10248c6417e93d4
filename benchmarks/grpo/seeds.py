"""Accuracy per stage across seeds on the tiny preset: the numbers behind the seed tables of docs/results.md.

Run from the repository root: ``python -m benchmarks.grpo.seeds`` (seeds 0 to 6, about 10
minutes a seed on a 2-core CPU; ``--quick`` for a smoke run of a few minutes). For each
seed it trains SFT -> DPO -> GRPO with the tiny preset's settings and that seed in all
three stages, on the one data split notebook 02 builds (the data seed stays fixed), and
scores every stage greedily on two held-out sets that no split and no pretraining
document holds:

  leftover  the run's eval split, then every unused prompt of the tiny data pool that
            fits the eval prompt budget (1036 prompts)
  fresh     ``--fresh`` new prompts per domain (fewer where a domain runs out) from the
            task generators at seeds no split and no pretraining document uses
  hard      with ``--hard N``: N new prompts per domain at difficulty 2, likewise apart
            from every split (GRPO's harder prompts and eval_hard block included)

Stages are trained with ``train.train_or_load``: a finished stage is loaded, an
interrupted one resumes, and each stage's scores are kept in the run's ``eval/seeds.json``
(keyed by the stage's ``finished.json`` and the prompts), so the script can be stopped
and run again, or run for more seeds, without redoing what it did. ``REASONKIT_OVERRIDES``
applies, to measure a variant (give it a ``--root`` of its own). Runs go to
``<runs root>/seeds/seed<N>`` (``--root``). One seed's accuracy moves by about a point on
a thousand prompts, with nothing but the seed changed: compare stages by their mean and
spread over seeds, on the larger set. Prints the table and writes ``benchmarks/results/seeds.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pathlib
import time
from typing import Any

import numpy as np

from benchmarks.common import result_path, write_json
from reasonkit import data, evaluate, models, tasks, template, train
from reasonkit.config import TRAIN_STAGES
from reasonkit.models import tiny
from reasonkit.presets import env_overrides, get_preset
from reasonkit.runtime import runs, session

STAGES = TRAIN_STAGES  # the base scores 0%: it never writes the tags
FRESH_SEED = 50_000  # task seeds from here on: apart from the pool's and pretraining's
HARD_SEED = 60_000  # the hard set's; data.HARD_SEED (20_000) draws GRPO's harder prompts
HARD_DIFFICULTY = 2


def seed_preset(seed: int, quick: bool = False):
    """The tiny preset with ``seed`` in all three stages, after ``$REASONKIT_OVERRIDES``."""
    overrides = env_overrides()  # a variant to measure (give it a --root of its own)
    if quick:
        overrides |= {"sft.max_steps": 4, "dpo.max_steps": 2, "grpo.max_steps": 2}
    return get_preset("tiny", **overrides | {f"{st}.seed": seed for st in STAGES})


def token_counter(preset):
    model_dir = models.resolve_source(preset.model)
    tok = models.load_tokenizer(model_dir / "tokenizer.model", vocab_size=preset.model.vocab_size)
    return lambda text: len(tok.EncodeAsIds(text))


def build_data(preset, run: runs.RunDir, count) -> data.Splits:
    """The run's splits, built as notebook 02 builds them (once; read back after)."""
    return runs.build_data(run, preset, count)[0]


def _fits(record: dict, count, limits: data.Limits) -> bool:
    return data.gold_problem(record) is None and data.too_long(record, count, limits) is None


def heldout_sets(preset, splits: data.Splits, count, n_fresh: int, n_hard: int = 0
                 ) -> dict[str, list[dict]]:
    """``leftover``, ``fresh`` and (``n_hard`` > 0) ``hard`` (see the module docstring); no
    prompt in two of them."""
    limits = data.stage_limits(preset)["eval"]
    cfg = preset.data
    seen = {template.normalize_prompt(r["prompt"])
            for split in (splits.eval, splits.sft, splits.dpo, splits.grpo, splits.eval_hard)
            for r in split}
    leftover = list(splits.eval)
    pool = tasks.generate_all(cfg.num_records, seed=cfg.seed, difficulty=cfg.difficulty)
    for r in pool:
        key = template.normalize_prompt(r["prompt"])
        if key not in seen and _fits(r, count, limits):
            seen.add(key)
            leftover.append(r)
    seen |= {template.normalize_prompt(r["prompt"]) for r in pool}
    seen |= {template.normalize_prompt(r["prompt"]) for r in tiny.pretraining_records()[0]}
    fits = lambda r: _fits(r, count, limits)  # noqa: E731
    sets = {"leftover": leftover,
            "fresh": tasks.fresh_records(n_fresh, first_seed=FRESH_SEED, difficulty=cfg.difficulty,
                                         seen=seen, keep=fits)}
    if n_hard:
        sets["hard"] = tasks.fresh_records(n_hard, first_seed=HARD_SEED, difficulty=HARD_DIFFICULTY,
                                           seen=seen, keep=fits)
    return sets


def greedy_accuracy(preset, run: runs.RunDir, stage: str, records: list[dict]) -> np.ndarray:
    """Per prompt: is the greedy answer right (format and value)?"""
    _, policy, tok, _ = models.load_policy(preset, run, stage, None)
    sampler = evaluate.make_sampler(policy, tok, preset.model, preset.eval)
    prompts = [template.format_prompt(r["prompt"]) for r in records]
    out = evaluate.generate(sampler, prompts, preset.eval, models.stop_token_ids(tok),
                            desc=f"{stage}: greedy")
    del policy, sampler
    models.free()
    return np.array([evaluate.score(r, t)["correct"] for r, t in zip(records, out, strict=True)])


def scores(preset, run: runs.RunDir, stage: str, sets: dict[str, list[dict]]) -> dict[str, dict]:
    """Accuracy (%) of ``stage`` on each set, overall and per domain, reusing what an
    earlier call kept."""
    kept_path = run.stage("eval") / "seeds.json"
    kept = json.loads(kept_path.read_text()) if kept_path.is_file() else {}
    trained = (run.stage(stage) / "finished.json").read_text()
    for name, records in sets.items():
        key = hashlib.sha1(json.dumps([trained, [r["prompt"] for r in records]]).encode()).hexdigest()
        if kept.get(f"{stage}/{name}", {}).get("key") != key:
            right = greedy_accuracy(preset, run, stage, records)
            domains = np.array([r["domain"] for r in records])
            kept[f"{stage}/{name}"] = {
                "key": key, "n": len(records), "accuracy": 100 * float(right.mean()),
                "by_domain": {d: 100 * float(right[domains == d].mean())
                              for d in sorted(set(domains))}}
            kept_path.write_text(json.dumps(kept, indent=1) + "\n")
    return {name: {k: kept[f"{stage}/{name}"][k] for k in ("accuracy", "by_domain")}
            for name in sets}


def _sd(values) -> float:
    return float(np.std(values, ddof=1)) if len(values) > 1 else float("nan")


def summarize(results: dict[int, dict[str, dict[str, float]]], sets) -> dict[str, Any]:
    """Mean and spread (sample sd) per stage and set, and GRPO - SFT per seed."""
    out: dict[str, Any] = {}
    for name in sets:
        per_stage = {st: [results[s][st][name] for s in results] for st in STAGES}
        diff = [results[s]["grpo"][name] - results[s]["sft"][name] for s in results]
        out[name] = {st: {"mean": float(np.mean(v)), "sd": _sd(v)} for st, v in per_stage.items()}
        out[name]["grpo_minus_sft"] = {"per_seed": diff, "mean": float(np.mean(diff)), "sd": _sd(diff)}
    return out


def domain_gains(by_domain, sets) -> dict[str, dict[str, float]]:
    """Per set and domain: GRPO - SFT, the mean over seeds."""
    return {name: {d: float(np.mean([by_domain[s]["grpo"][name][d] - by_domain[s]["sft"][name][d]
                                     for s in by_domain]))
                   for d in next(iter(by_domain.values()))["sft"][name]}
            for name in sets}


def table(results, summary, sizes, gains=None) -> str:
    lines = []
    for name, n in sizes.items():
        seeds = list(results)
        lines += [f"\n{name} ({n} prompts), greedy accuracy %, seeds {seeds}",
                  "| stage | " + " | ".join(f"seed {s}" for s in seeds) + " | mean ± sd |",
                  "|---" * (len(seeds) + 2) + "|"]
        for st in STAGES:
            m = summary[name][st]
            lines.append(f"| {st} | " + " | ".join(f"{results[s][st][name]:.2f}" for s in seeds)
                         + f" | {m['mean']:.2f} ± {m['sd']:.2f} |")
        d = summary[name]["grpo_minus_sft"]
        lines.append("| grpo - sft | " + " | ".join(f"{x:+.2f}" for x in d["per_seed"])
                     + f" | {d['mean']:+.2f} ± {d['sd']:.2f} |")
        if gains:
            lines.append("grpo - sft by domain, mean over seeds: " + ", ".join(
                f"{dom} {g:+.2f}" for dom, g in gains[name].items()))
    return "\n".join(lines)


def main(argv=None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=list(range(7)))
    ap.add_argument("--fresh", type=int, default=1000, help="fresh prompts per domain")
    ap.add_argument("--hard", type=int, default=0,
                    help="fresh difficulty-2 prompts per domain (0: no hard set)")
    ap.add_argument("--sets", nargs="+", default=None,
                    help="score only these sets (default: all: leftover, fresh, hard)")
    ap.add_argument("--root", default=None, help="runs root (default: reasonkit's runs root)/seeds")
    ap.add_argument("--out", default=None,
                    help="default: benchmarks/results/seeds.json; <root>/seeds-quick.json with --quick")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 2 seeds, a few steps a stage, 4 fresh prompts a domain")
    args = ap.parse_args(argv)
    if args.quick:
        args.seeds, args.fresh = args.seeds[:2], 4
    root = pathlib.Path(args.root) if args.root else session.default_root() / "seeds"
    out = pathlib.Path(args.out or (root / "seeds-quick.json" if args.quick
                                    else result_path("seeds.json")))
    results: dict[int, dict[str, dict[str, float]]] = {}
    by_domain: dict[int, dict[str, dict[str, dict[str, float]]]] = {}
    sizes: dict[str, int] = {}
    for seed in args.seeds:
        preset = seed_preset(seed, args.quick)
        run = runs.RunDir.create(f"seed{seed}" + ("-quick" if args.quick else ""), root=root)
        count = token_counter(preset)
        sets = heldout_sets(preset, build_data(preset, run, count), count, args.fresh,
                            4 if args.quick and args.hard else args.hard)
        if args.quick:
            sets["leftover"] = sets["leftover"][:24]
        sets = {k: v for k, v in sets.items() if args.sets is None or k in args.sets}
        sizes = {k: len(v) for k, v in sets.items()}
        results[seed], by_domain[seed] = {}, {}
        for stage in STAGES:
            t = time.time()
            train.train_or_load(preset, run, stage)
            models.free()
            got = scores(preset, run, stage, sets)
            results[seed][stage] = {k: v["accuracy"] for k, v in got.items()}
            by_domain[seed][stage] = {k: v["by_domain"] for k, v in got.items()}
            print(f"seed {seed} {stage}: " + ", ".join(f"{k} {a:.2f}%" for k, a in
                                                     results[seed][stage].items())
                  + f" ({time.time() - t:.0f} s)", flush=True)
    summary, gains = summarize(results, sizes), domain_gains(by_domain, sizes)
    print(table(results, summary, sizes, gains))
    report = {"sizes": sizes, "results": {str(s): r for s, r in results.items()},
              "summary": summary, "grpo_minus_sft_by_domain": gains,
              "by_domain": {str(s): r for s, r in by_domain.items()}, "quick": args.quick,
              "overrides": env_overrides()}
    write_json(out, report)
    print(f"wrote {out}")
    return report


if __name__ == "__main__":
    main()
