"""SFT learning rates on Google's pretrained Gemma 3 270M (CPU): held-out loss after a fixed number of steps.

Run from the repository root, by hand (about 20 minutes on 2 cores):

    REASONKIT_REAL=1 bash scripts/setup.sh
    .venv/bin/python -m benchmarks.real_270m.real_270m_lr

For each rate, a fresh LoRA (the preset ``gemma3-270m-cpu``'s rank, batch and lengths)
takes ``--steps`` SFT steps on the synthetic tasks' training records, then the mean
per-token loss of the answers of ``--held-out`` records it never saw is measured (the
same records for every rate), with the base model's as the first row. Writes
``benchmarks/results/real_270m_lr.json``; docs/presets.md says what was chosen from it.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import numpy as np
from flax import nnx

from benchmarks.common import result_path, write_json
from reasonkit import collate, models, tasks, train
from reasonkit.presets import get_preset
from reasonkit.tunix_patches import logprobs

OUT = result_path("real_270m_lr.json")
RATES = (2e-5, 2e-4, 1e-3)  # the TPU presets' SFT rate, the LoRA anchors' range


def held_out_loss(policy, examples, preset, tok) -> float:
    """Mean per-token loss of the completions of ``examples`` (batches of the preset's size)."""
    loss = nnx.jit(logprobs.sft_loss)
    collator = train.sft_collator(preset, tok)
    fn = train.gen_model_input_fn(tok.pad_id())
    total = tokens = 0.0
    for batch in collate.batches(examples, preset.sft.batch_size, collator):
        inputs = fn(batch)
        n = float(np.asarray(inputs["input_mask"])[:, 1:].sum())
        total += float(loss(policy, **inputs)) * n
        tokens += n
    return total / tokens


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--held-out", type=int, default=48)
    parser.add_argument("--rates", type=float, nargs="*", default=RATES)
    parser.add_argument("--out", type=pathlib.Path, default=OUT)
    args = parser.parse_args(argv)
    base = get_preset("gemma3-270m-cpu")
    train_records = tasks.generate_all(40, seed=0)
    held = tasks.generate_all(args.held_out // 6 + 1, seed=1)[: args.held_out]
    rows = []
    for rate in (None, *args.rates):
        preset = base.replace(**{"sft.max_steps": args.steps,
                                 "sft.learning_rate": rate or base.sft.learning_rate})
        t0 = time.perf_counter()
        stage = train.build_stage(preset, "sft")
        tok = stage.tokenizer
        if rate is not None:
            stream, _ = train.sft_batches(train.sft_examples(train_records, tok), preset, tok)
            with stage.mesh:
                stage.trainer.train(stream)
        value = held_out_loss(stage.policy, train.sft_examples(held, tok), preset, tok)
        rows.append({"learning_rate": rate, "steps": 0 if rate is None else args.steps,
                     "held_out_loss": round(value, 4), "seconds": round(time.perf_counter() - t0, 1)})
        print(rows[-1], flush=True)
        del stage
        models.free()
    write_json(args.out, {
        "preset": "gemma3-270m-cpu", "stage": "sft", "lora_rank": base.lora.rank,
        "batch_size": base.sft.batch_size, "warmup_ratio": base.sft.warmup_ratio,
        "held_out_records": len(held), "rows": rows})
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
