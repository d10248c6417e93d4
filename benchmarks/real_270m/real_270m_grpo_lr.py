"""GRPO learning rates on Google's pretrained Gemma 3 270M (CPU), from the real series' DPO adapters.

Run from the repository root, by hand (about 35 minutes on 2 cores), after
``python -m benchmarks.real_270m.real_270m_cpu`` has trained DPO under ``--root``:

    .venv/bin/python -m benchmarks.real_270m.real_270m_grpo_lr --root runs/real_270m_cpu

For each rate, GRPO of the preset ``gemma3-270m-cpu`` (its batch, group size, rewards,
beta, lengths, warm-up and schedule) takes ``--steps`` steps from that run's DPO adapters
on the run's GRPO prompts, in a run branched from ``--root``'s (``grpo-lr-<rate>``), never
in the run itself. Then, as for the starting adapters: greedy format pass and accuracy on
``--per-domain`` fresh task prompts of each domain, in none of the run's splits, and the
mean per-token loss of their gold answers (:func:`real_270m_lr.held_out_loss`), which says
whether a rate damages what SFT taught. Beside them, from GRPO's own log: the mean
correctness reward of the sampled answers over the first and the last ``--window`` steps,
and the KL to the reference at the end. Writes ``benchmarks/results/real_270m_grpo_lr.json``;
docs/presets.md says what was chosen from it.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shutil
import sys
import time

import numpy as np

from benchmarks.common import result_path, write_json
from benchmarks.real_270m import real_270m_lr
from reasonkit import data, evaluate, models, tasks, template, train
from reasonkit.presets import get_preset
from reasonkit.runtime import runs

OUT = result_path("real_270m_grpo_lr.json")
PRESET = "gemma3-270m-cpu"
RATES = (5e-6, 5e-5, 5e-4)  # the CPU preset's (chosen here), its rate before, ten times that
CORRECT, KL = "rewards/train/answer_correct", "actor/train/kl"
FIRST_SEED = 7_000  # the fresh held-out prompts' task seeds start here


def fresh_held_out(splits: data.Splits, per_domain: int) -> list[dict]:
    """``per_domain`` task records of each domain whose prompts are in none of ``splits``
    (not the evaluation split either: a rate is not chosen on the set the series reports)."""
    seen = {template.normalize_prompt(r["prompt"])
            for part in (splits.sft, splits.dpo, splits.grpo, splits.eval) for r in part}
    return tasks.fresh_records(per_domain, first_seed=FIRST_SEED, seen=seen)


def window_means(run: runs.RunDir, window: int) -> dict:
    """GRPO's logged correctness reward, mean of the first and the last ``window`` steps, and
    its last KL."""
    logged = train.read_metrics(run, "grpo")
    correct, kl = logged[CORRECT][1], logged[KL][1]
    return {"correct_reward_first": round(float(np.mean(correct[:window])), 4),
            "correct_reward_last": round(float(np.mean(correct[-window:])), 4),
            "kl_last": round(float(kl[-1]), 5)}


def measure(preset, run: runs.RunDir, stage: str, held: list[dict]) -> dict:
    """Greedy format pass and accuracy of ``stage``'s adapters on ``held``, and the gold answers'
    mean per-token loss."""
    _, policy, tok, _ = models.load_policy(preset, run, stage, None)
    sampler = evaluate.make_sampler(policy, tok, preset.model, preset.eval)
    texts = evaluate.generate(sampler, [template.format_prompt(r["prompt"]) for r in held],
                              preset.eval, models.stop_token_ids(tok), desc=f"{stage}: greedy")
    overall = evaluate.summarize(evaluate.score_stage(held, texts, [[] for _ in held]))["overall"]
    gold = real_270m_lr.held_out_loss(policy, train.sft_examples(held, tok), preset, tok)
    del policy, sampler
    models.free()
    return {"format_rate": round(overall["format_rate"], 4), "accuracy": round(overall["accuracy"], 4),
            "gold_answer_loss": round(gold, 4)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=pathlib.Path, required=True,
                        help="real_270m_cpu's --root: its run's DPO adapters and splits")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--per-domain", type=int, default=21, help="fresh held-out prompts per domain")
    parser.add_argument("--window", type=int, default=3)
    parser.add_argument("--rates", type=float, nargs="*", default=RATES)
    parser.add_argument("--out", type=pathlib.Path, default=OUT)
    args = parser.parse_args(argv)
    source = runs.RunDir(args.root / "runs" / "e2e")  # where e2e_real.pipeline puts it
    if not all(source.is_finished(s) for s in ("data", "sft", "dpo")):
        raise SystemExit(f"{source.path} holds no finished data, SFT and DPO stages: run "
                         f"python -m benchmarks.real_270m.real_270m_cpu --root {args.root} first")
    if not 0 < args.window <= args.steps:
        raise SystemExit(f"--window {args.window}: must be 1 to --steps ({args.steps})")
    splits, _ = data.read_splits(source.require("data"))
    held = fresh_held_out(splits, args.per_domain)
    preset = get_preset(PRESET, **{"grpo.max_steps": args.steps})
    rows = [{"learning_rate": None, "steps": 0} | measure(preset, source, "dpo", held)]
    print(json.dumps(rows[0]), flush=True)
    for rate in args.rates:
        name = f"grpo-lr-{rate:g}"
        shutil.rmtree(source.path.parent / name, ignore_errors=True)  # a fresh branch each time
        run = runs.branch(source, name, ("data", "sft", "dpo"))
        p = preset.replace(**{"grpo.learning_rate": rate})
        t0 = time.perf_counter()
        train.train_grpo(p, run)
        seconds = time.perf_counter() - t0
        models.free()
        row = ({"learning_rate": rate, "steps": args.steps} | measure(p, run, "grpo", held)
               | window_means(run, args.window) | {"train_seconds": round(seconds, 1)})
        rows.append(row)
        print(json.dumps(row), flush=True)
    write_json(args.out, {
        "preset": PRESET, "stage": "grpo", "started_from": "the run's DPO adapters",
        "sft_steps": source.finished_info("sft").get("steps"),
        "dpo_steps": source.finished_info("dpo").get("steps"),
        "batch_size": preset.grpo.batch_size, "num_generations": preset.grpo.num_generations,
        "beta": preset.grpo.beta, "warmup_ratio": preset.grpo.warmup_ratio,
        "held_out_records": len(held), "window": args.window, "rows": rows})
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
