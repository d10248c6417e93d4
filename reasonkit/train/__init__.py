"""Build and run Tunix SFT / DPO / GRPO from a preset: LoRA, resume, hand-off, deadline, export.

This package is the public face; its modules, each importing only those before it:
:mod:`~reasonkit.train.optim` (AdamW and its warm-up + cosine schedule),
:mod:`~reasonkit.train.metrics` (metrics.jsonl, TensorBoard, compile counts, GRPO's own
metrics), :mod:`~reasonkit.train.clock` (the deadline: stop in time, say when a stage
ends), :mod:`~reasonkit.train.batches` (deterministic batch streams per stage),
:mod:`~reasonkit.train.policies` (base, policy and reference with real, random or abstract
weights), :mod:`~reasonkit.train.build` (a stage built and not run: the Tunix trainer or
GRPO learner) and :mod:`~reasonkit.train.stages` (train, resume, load or export a stage).
Loading a trained stage's model for use outside training is :func:`reasonkit.models.load_policy`.
"""

from reasonkit.train.batches import (
    dpo_batches,
    dpo_collator,
    dpo_examples,
    grpo_batches,
    grpo_records,
    sft_batches,
    sft_collator,
    sft_examples,
    take,
)
from reasonkit.train.build import TRAIN_STAGES, Stage, build_stage, gen_model_input_fn
from reasonkit.train.metrics import read_metrics
from reasonkit.train.optim import make_optimizer, schedule
from reasonkit.train.policies import build_models
from reasonkit.train.stages import (
    StageResult,
    export,
    export_once,
    exported,
    train_dpo,
    train_grpo,
    train_or_load,
    train_sft,
)

__all__ = ["schedule", "make_optimizer", "read_metrics", "take", "sft_examples", "dpo_examples",
           "grpo_records", "sft_collator", "dpo_collator", "sft_batches", "dpo_batches", "grpo_batches",
           "build_models", "TRAIN_STAGES", "gen_model_input_fn", "Stage", "build_stage", "StageResult",
           "train_sft", "train_dpo", "train_grpo", "export", "exported", "export_once", "train_or_load"]
