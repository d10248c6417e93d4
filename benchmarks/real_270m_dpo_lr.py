"""DPO learning rates on Google's pretrained Gemma 3 270M (CPU), from the real series' SFT adapters.

Run from the repository root, by hand (about 15 minutes on 2 cores), after
``benchmarks/real_270m_cpu.py`` has trained SFT under ``--root``:

    .venv/bin/python benchmarks/real_270m_dpo_lr.py --root runs/real_270m_cpu

For each rate, DPO of the preset ``gemma3-270m-cpu`` (its batch, beta, lengths, warm-up
and schedule) takes ``--steps`` steps from that run's SFT adapters, on the run's DPO pairs
less the last ``--held-out``. Tunix's own evaluation then measures those held-out pairs
before the first step and after the last: the DPO loss and the share of pairs whose
implicit reward ranks the chosen answer above the rejected one (``rewards/accuracy``).
Beside it, the mean per-token loss of the gold answers of ``--held-out`` evaluation records
(:func:`real_270m_lr.held_out_loss`) says whether a rate damages what SFT taught. Each rate
trains in a run branched from ``--root``'s (``dpo-lr-<rate>``), never in the run itself.
Writes ``benchmarks/real_270m_dpo_lr.json``; docs/presets.md says what was chosen from it.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import pathlib
import shutil
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from reasonkit import collate, data, models  # noqa: E402
from reasonkit.presets import get_preset  # noqa: E402
from reasonkit.runtime import mesh as mesh_lib  # noqa: E402
from reasonkit.runtime import runs  # noqa: E402
from reasonkit.train import batches as train_batches  # noqa: E402
from reasonkit.train import build as train_build  # noqa: E402
from reasonkit.train import policies  # noqa: E402
from reasonkit.train.optim import make_optimizer  # noqa: E402

_spec = importlib.util.spec_from_file_location("real_270m_lr", ROOT / "benchmarks" / "real_270m_lr.py")
real_270m_lr = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(real_270m_lr)

OUT = ROOT / "benchmarks" / "real_270m_dpo_lr.json"
PRESET = "gemma3-270m-cpu"
RATES = (5e-6, 5e-5, 5e-4)  # [U]'s DPO rate, the CPU preset's, ten times more
EVAL_METRICS = ("loss", "rewards/accuracy", "rewards/margin")


def train_and_measure(preset, run: runs.RunDir, train_pairs, held_pairs, held_sft, steps: int) -> dict:
    """DPO for ``steps`` from ``run``'s SFT adapters: Tunix's held-out DPO metrics at step 0
    and at the last step, and the gold answers' loss after."""
    import tunix

    p = preset.replace(**{"dpo.max_steps": steps})
    mesh = mesh_lib.stage_mesh(p, "dpo")
    with mesh:
        _, policy, reference, tok, _ = policies.build_models(p, mesh, "checkpoint", run=run,
                                                             started="sft", reference=True)
        # the notebooks' DPOTrainer (build.dpo_trainer), evaluating at step 0 and at the last
        config = dataclasses.replace(train_build.dpo_training_config(p), eval_every_n_steps=steps)
        trainer = train_build.patch_dpo_trainer(tunix.DPOTrainer(
            model=policy, ref_model=reference, optimizer=make_optimizer(p.dpo),
            training_config=config))
        stream, _ = train_batches.dpo_batches(train_batches.dpo_examples(train_pairs, tok), p, tok)
        held = list(collate.batches(train_batches.dpo_examples(held_pairs, tok), p.dpo.batch_size,
                                    train_batches.dpo_collator(p, tok)))
        t0 = time.perf_counter()
        trainer.train(stream, held)
        seconds = time.perf_counter() - t0
        logged = {m: trainer.metrics_logger.get_metric_history("", m, "eval").tolist()
                  for m in EVAL_METRICS}
        gold = real_270m_lr.held_out_loss(trainer.model, train_batches.sft_examples(held_sft, tok), p, tok)
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
                        help="real_270m_cpu.py's --root: its run's SFT adapters and splits")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--held-out", type=int, default=48)
    parser.add_argument("--rates", type=float, nargs="*", default=RATES)
    parser.add_argument("--out", type=pathlib.Path, default=OUT)
    args = parser.parse_args(argv)
    source = runs.RunDir(args.root / "runs" / "e2e")  # where e2e_real.pipeline puts it
    if not (source.is_finished("data") and source.is_finished("sft")):
        raise SystemExit(f"{source.path} holds no finished data and SFT stages: run "
                         f"benchmarks/real_270m_cpu.py --root {args.root} first")
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
    args.out.write_text(json.dumps({
        "preset": PRESET, "stage": "dpo", "started_from": "the run's SFT adapters",
        "sft_steps": source.finished_info("sft").get("steps"), "batch_size": preset.dpo.batch_size,
        "beta": preset.dpo.beta, "warmup_ratio": preset.dpo.warmup_ratio,
        "held_out_pairs": len(held_pairs), "held_out_records": len(held_sft), "rows": rows},
        indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
