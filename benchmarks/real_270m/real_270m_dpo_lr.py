"""DPO learning rates on Google's pretrained Gemma 3 270M (CPU), from the real series' SFT adapters.

Run from the repository root, by hand (about 15 minutes on 2 cores), after
``python -m benchmarks.real_270m.real_270m_cpu`` has trained SFT under ``--root``:

    .venv/bin/python -m benchmarks.real_270m.real_270m_dpo_lr --root runs/real_270m_cpu

For each rate, DPO of the preset ``gemma3-270m-cpu`` (its batch, beta, lengths, warm-up
and schedule) takes ``--steps`` steps from that run's SFT adapters, on the run's DPO pairs
less the last ``--held-out``. Tunix's own evaluation then measures those held-out pairs
before the first step and after the last: the DPO loss and the share of pairs whose
implicit reward ranks the chosen answer above the rejected one (``rewards/accuracy``).
Beside it, the mean per-token loss of the gold answers of ``--held-out`` evaluation records
(:func:`benchmarks.real_270m.real_270m_lr.held_out_loss`) says whether a rate damages what
SFT taught. Each rate trains in a run branched from ``--root``'s (``dpo-lr-<rate>``), never
in the run itself.
Writes ``benchmarks/results/real_270m_dpo_lr.json``; docs/presets.md says what was chosen from it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import shutil
import sys
import time

from benchmarks.common import result_path, write_json
from benchmarks.real_270m import real_270m_lr
from reasonkit import collate, data, models, train
from reasonkit.presets import get_preset
from reasonkit.runtime import mesh as mesh_lib
from reasonkit.runtime import runs

OUT = result_path("real_270m_dpo_lr.json")
PRESET = "gemma3-270m-cpu"
RATES = (5e-6, 5e-5, 5e-4)  # [U]'s DPO rate, the CPU preset's, ten times more
EVAL_METRICS = ("loss", "rewards/accuracy", "rewards/margin")


def train_and_measure(preset, run: runs.RunDir, train_pairs, held_pairs, held_sft, steps: int) -> dict:
    """DPO for ``steps`` from ``run``'s SFT adapters: Tunix's held-out DPO metrics at step 0
    and at the last step, and the gold answers' loss after."""
    p = preset.replace(**{"dpo.max_steps": steps})
    mesh = mesh_lib.stage_mesh(p, "dpo")
    with mesh:
        _, policy, reference, tok, _ = train.build_models(p, mesh, "checkpoint", run=run,
                                                          started="sft", reference=True)
        # the stage's recipe (train.dpo_trainer), evaluating at step 0 and at the last
        config = dataclasses.replace(train.dpo_training_config(p), eval_every_n_steps=steps)
        trainer = train.dpo_trainer(p, policy, reference, training_config=config)
        stream, _ = train.dpo_batches(train.dpo_examples(train_pairs, tok), p, tok)
        held = list(collate.batches(train.dpo_examples(held_pairs, tok), p.dpo.batch_size,
                                    train.dpo_collator(p, tok)))
        t0 = time.perf_counter()
        trainer.train(stream, held)
        seconds = time.perf_counter() - t0
        logged = {m: trainer.metrics_logger.get_metric_history("", m, "eval").tolist()
                  for m in EVAL_METRICS}
        gold = real_270m_lr.held_out_loss(trainer.model, train.sft_examples(held_sft, tok), p, tok)
        trainer.close()
    del policy, reference, trainer
    models.free()
    if any(len(v) != 2 for v in logged.values()):
        raise RuntimeError(f"expected Tunix's evaluation at step 0 and step {steps}, got {logged}")
    return {"before": {m: round(float(v[0]), 4) for m, v in logged.items()},
            "after": {m: round(float(v[1]), 4) for m, v in logged.items()},
            "gold_answer_loss_after": round(gold, 4), "train_seconds": round(seconds, 1)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=pathlib.Path, required=True,
                        help="real_270m_cpu's --root: its run's SFT adapters and splits")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--held-out", type=int, default=48)
    parser.add_argument("--rates", type=float, nargs="*", default=RATES)
    parser.add_argument("--out", type=pathlib.Path, default=OUT)
    args = parser.parse_args(argv)
    source = runs.RunDir(args.root / "runs" / "e2e")  # where e2e_real.pipeline puts it
    if not (source.is_finished("data") and source.is_finished("sft")):
        raise SystemExit(f"{source.path} holds no finished data and SFT stages: run "
                         f"python -m benchmarks.real_270m.real_270m_cpu --root {args.root} first")
    splits, _ = data.read_splits(source.require("data"))
    if len(splits.dpo) <= args.held_out or len(splits.eval) < args.held_out:
        raise SystemExit(f"{source.path}: {len(splits.dpo)} DPO pairs and {len(splits.eval)} "
                         f"evaluation records, too few to hold out {args.held_out}")
    train_pairs, held_pairs = splits.dpo[:-args.held_out], splits.dpo[-args.held_out:]
    held_sft = splits.eval[:args.held_out]
    preset = get_preset(PRESET)
    rows = []
    for rate in args.rates:
        name = f"dpo-lr-{rate:g}"
        shutil.rmtree(source.path.parent / name, ignore_errors=True)  # a fresh branch each time
        run = runs.branch(source, name, ("data", "sft"))
        row = {"learning_rate": rate, "steps": args.steps} | train_and_measure(
            preset.replace(**{"dpo.learning_rate": rate}), run, train_pairs, held_pairs, held_sft,
            args.steps)
        rows.append(row)
        print(json.dumps(row), flush=True)
    write_json(args.out, {
        "preset": PRESET, "stage": "dpo", "started_from": "the run's SFT adapters",
        "sft_steps": source.finished_info("sft").get("steps"), "batch_size": preset.dpo.batch_size,
        "beta": preset.dpo.beta, "warmup_ratio": preset.dpo.warmup_ratio,
        "held_out_pairs": len(held_pairs), "held_out_records": len(held_sft), "rows": rows})
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
