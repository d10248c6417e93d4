"""Build and run Tunix SFT / DPO / GRPO from a preset: LoRA, resume, hand-off, deadline, export.

This package is the public face; its modules, each importing only those before it:
:mod:`~reasonkit.train._optim` (AdamW and its warm-up + cosine schedule),
:mod:`~reasonkit.train._metrics` (metrics.jsonl, TensorBoard, compile counts, GRPO's own
metrics), :mod:`~reasonkit.train._clock` (the deadline: stop in time, say when a stage
ends), :mod:`~reasonkit.train._batches` (deterministic batch streams per stage),
:mod:`~reasonkit.train._policies` (base, policy and reference with real, random or abstract
weights), :mod:`~reasonkit.train._build` (the parts Tunix's constructors take, one call
each, and a stage built from them and not run: the Tunix trainer or GRPO learner) and
:mod:`~reasonkit.train._generation` (Tunix's sampler, batched greedy or sampled),
:mod:`~reasonkit.train._held_out` (GRPO's held-out checks as it trains, and its best
adapters), :mod:`~reasonkit.train._onpolicy` (DPO's on-policy pairs and its held-out pair
figures) and :mod:`~reasonkit.train._stages` (train, resume, load or export a stage;
:func:`~reasonkit.train._stages.stage_run` leaves Tunix's call to the notebook cell).
Loading a trained stage's model for use outside training is :func:`reasonkit.models.load_policy`.
"""

# Modules used as namespaces (``train.held_out.load_best``), then the names, by name.
from reasonkit.train import _clock as clock
from reasonkit.train import _contrast as contrast
from reasonkit.train import _generation as generation
from reasonkit.train import _held_out as held_out
from reasonkit.train import _onpolicy as onpolicy
from reasonkit.train._batches import (
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
from reasonkit.train._build import (
    TRAIN_STAGES,
    Stage,
    build_stage,
    cluster_config,
    dpo_trainer,
    dpo_training_config,
    gen_model_input_fn,
    grpo_algorithm,
    grpo_learner,
    grpo_metric_fns,
    grpo_reward_fns,
    grpo_training_config,
    rollout_config,
    run_options,
    sft_trainer,
    sft_training_config,
    stage_has_reference,
    stage_models,
)
from reasonkit.train._generation import generate, make_sampler, prompt_lengths
from reasonkit.train._metrics import read_metrics
from reasonkit.train._optim import make_optimizer, schedule
from reasonkit.train._policies import build_models
from reasonkit.train._seam import (
    SharedPrefill,
    attention_block_size,
    logprob_chunk_positions,
    sampler_of,
    sampler_programs,
    tpu_sharding_constraints,
    without_remat,
)
from reasonkit.train._stages import (
    StageResult,
    StageRun,
    export,
    export_once,
    exported,
    stage_run,
    train_dpo,
    train_grpo,
    train_or_load,
    train_sft,
    train_with_recipe,
)

__all__ = ["clock", "contrast", "generation", "held_out", "onpolicy", "generate", "make_sampler",
           "prompt_lengths", "schedule", "make_optimizer", "read_metrics", "take", "sft_examples",
           "dpo_examples", "grpo_records", "sft_collator", "dpo_collator", "sft_batches", "dpo_batches",
           "grpo_batches", "build_models", "TRAIN_STAGES", "gen_model_input_fn", "sft_training_config",
           "dpo_training_config", "grpo_training_config", "rollout_config", "cluster_config",
           "grpo_algorithm", "grpo_reward_fns", "grpo_metric_fns", "run_options", "stage_models",
           "sft_trainer", "dpo_trainer", "grpo_learner", "stage_has_reference", "Stage", "build_stage",
           "StageResult", "StageRun", "stage_run", "train_sft", "train_dpo", "train_grpo",
           "train_with_recipe", "export", "exported", "export_once", "train_or_load",
           # what the memory model and the real-shape checks read of the patched programs
           "attention_block_size", "logprob_chunk_positions", "sampler_of", "sampler_programs",
           "SharedPrefill", "tpu_sharding_constraints",
           # the model Tunix's sampler can decode with (remat off): the evaluation's sampler
           "without_remat"]
