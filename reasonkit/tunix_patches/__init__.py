"""Every replacement reasonkit makes of Tunix's, qwix's, JAX's and glibc's internals.

Nothing outside this package touches a private attribute or function of Tunix, qwix,
Flax, JAX or Orbax (``tests/test_tunix_patches.py`` reads the tree to check it). Each patch
is one module, written for the versions requirements.txt pins (google-tunix 0.1.7,
qwix 0.1.8, JAX 0.10.2), applied once and explicitly by the code that builds what it
patches, and listed in :data:`PATCHES` with the test that checks it against the library's
own result.

Most patches are optimisations: the same numbers (or the same distribution of samples) at
a lower cost. One preset field switches them: ``Preset.optimisations`` lists those in
force, and ``()`` runs Tunix and qwix as they ship. The patches a stage needs to run at
all are always applied (``optimisation=False`` below). :func:`in_force` is the one test.

>>> sorted(p.name for p in PATCHES if not p.optimisation)  # doctest: +NORMALIZE_WHITESPACE
['abstract models', 'metrics listeners', 'recent progress', 'reseeded rollouts', 'rpo loss',
 'sampler graph', 'tpu sharding']
>>> in_force((), "chunked log-probs"), in_force((), "reseeded rollouts")
(False, True)
"""

from __future__ import annotations

import dataclasses

# Each patch's module, as a namespace (``tunix_patches.attention.use``): the seams that apply them.
from reasonkit.tunix_patches import _attention as attention
from reasonkit.tunix_patches import _cpu_memory as cpu_memory
from reasonkit.tunix_patches import _grpo as grpo
from reasonkit.tunix_patches import _logprobs as logprobs
from reasonkit.tunix_patches import _lora_delta as lora_delta
from reasonkit.tunix_patches import _loss_swap as loss_swap
from reasonkit.tunix_patches import _private as private
from reasonkit.tunix_patches import _progress as progress
from reasonkit.tunix_patches import _rl_cluster as rl_cluster
from reasonkit.tunix_patches import _sampling as sampling
from reasonkit.tunix_patches import _sharding as sharding
from reasonkit.tunix_patches import _trainers as trainers

__all__ = ["Patch", "PATCHES", "in_force", "by_name", "attention",
           "cpu_memory", "grpo", "logprobs", "lora_delta", "loss_swap", "private", "progress",
           "rl_cluster", "sampling", "sharding", "trainers"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Patch:
    """One replacement of another library's internals."""

    name: str
    module: str  # reasonkit/tunix_patches/_<module>.py
    replaces: str  # what of the library's it replaces or reads
    why: str
    written_for: str  # the library version it was written against
    optimisation: bool  # True: a preset without it in its optimisations runs without it
    test: str  # the test that checks it against the library's own result
    remove_when: str  # when the patch can go: what the library must do first
    upstream: str = "not filed"  # the library's issue or pull request about it


TUNIX = "google-tunix 0.1.7"
PATCHES = (
    Patch(name="attention", module="attention", written_for=TUNIX, optimisation=True,
          replaces="the class of each Gemma 2 / Gemma 3 Attention module (its block method)",
          why="no [B, T, N, S] logits and full masks per layer; query blocks with remat",
          remove_when="Tunix's Gemma attends a block of queries at a time (0.1.7 builds every logit)",
          test="tests/test_attention.py::test_logits_match_tunix"),
    Patch(name="chunked log-probs", module="loss_swap", written_for=TUNIX, optimisation=True,
          replaces="tunix.sft.dpo.dpo_trainer.compute_logps, tunix.rl.common."
                   "compute_per_token_logps, tunix.rl.algo_core.compute_entropy_from_logits "
                   "(while our losses trace); DPOTrainer._prepare_inputs; the SFT loss",
          why="no [B, S, V] float32 logits: Gemma's 262144-piece vocabulary does not fit",
          remove_when="Tunix computes token log-probabilities without [B, S, V] float32 logits",
          test="tests/test_logprobs.py::test_grpo_log_probs_and_entropy_equal_tunix"),
    Patch(name="shared prompts", module="loss_swap", written_for=TUNIX, optimisation=True,
          replaces="GRPO's update and reference forward over G copies of each prompt",
          why="each prompt's positions run once for its G answers",
          remove_when="Tunix's GRPO runs a prompt once for its G answers",
          test="tests/test_logprobs.py::test_grpo_log_probs_with_each_prompt_run_once_equal_every_row"),
    Patch(name="rpo loss", module="loss_swap", written_for=TUNIX, optimisation=False,
          replaces="DPOTrainer's loss (tunix.sft.dpo.dpo_trainer.dpo_loss_fn, its compute_logps "
                   "read as it returns) and its _aux_metrics_to_log, when dpo.rpo_alpha > 0",
          why="Tunix's DPO has no NLL term on the chosen answer (RPO, Pang et al. 2024); applied "
              "only with dpo.rpo_alpha > 0 and 'chunked log-probs', a preset without it refuses",
          remove_when="Tunix's DPOTrainingConfig has an NLL weight on the chosen answer (rpo_alpha)",
          test="tests/test_train.py::test_rpo_loss_is_tunixs_dpo_loss_plus_alpha_times_the_chosen_nll"),
    Patch(name="sampler graph", module="sampling", written_for=TUNIX, optimisation=False,
          replaces="Sampler._transformer_graphdef, _supports_decode_only_last_token",
          why="a remat model cannot decode in Tunix's sampler; the prefill's output layer "
              "at the last position only",
          remove_when="Tunix's Sampler decodes a remat model and prefills only the last "
                      "position's output layer",
          test="tests/test_sampling.py::test_output_layer_at_the_last_position_matches_every_position"),
    Patch(name="shared prefill", module="sampling", written_for=TUNIX, optimisation=True,
          replaces="Sampler._compiled_prefill_fn",
          why="GRPO's G copies of a prompt prefilled once",
          remove_when="Tunix's Sampler prefills a repeated prompt once",
          test="tests/test_sampling.py::test_shared_prefill_samples_what_every_row_prefilled_does"),
    Patch(name="length buckets", module="grpo", written_for=TUNIX, optimisation=True,
          replaces="GRPOLearner._generate_and_compute_advantage, rollout.generate, "
                   "RLCluster.get_ref/old_per_token_logps",
          why="each GRPO step at the smallest (prompt, answer) padding that holds it",
          remove_when="Tunix's GRPOLearner pads each step to its own lengths",
          test="tests/test_train.py::test_grpo_length_buckets_train_on_the_numbers_of_the_step_"
               "padded_to_the_max"),
    Patch(name="reseeded rollouts", module="grpo", written_for=TUNIX, optimisation=False,
          replaces="rollout.generate's RolloutConfig.seed",
          why="unset, Tunix samples every step with PRNGKey(0)",
          remove_when="Tunix draws a new sampling key per step when RolloutConfig.seed is unset",
          test="tests/test_tunix_patches.py::test_rollouts_get_a_fresh_key_per_step_and_call_and_the_"
               "same_after_resume"),
    Patch(name="flat LoRA delta", module="lora_delta", written_for="qwix 0.1.8", optimisation=True,
          replaces="qwix._src.providers.lora._compute_lora_delta (process-wide)",
          why="B's gradient without a transposed copy of its cotangent on one CPU device",
          remove_when="XLA:CPU lays out qwix's two-axis dot without a transposed copy",
          test="tests/test_models.py::test_flat_lora_delta_equals_qwixs_and_takes_bs_gradient_"
               "without_copying_the_cotangent"),
    Patch(name="cpu step memory", module="cpu_memory", written_for="JAX 0.10.2, glibc",
          optimisation=True,
          replaces="jax_cpu_enable_async_dispatch, glibc's M_MMAP_MAX and M_TRIM_THRESHOLD "
                   "(process-wide); reads jax._src.xla_bridge",
          why="each CPU step reuses its temporaries instead of faulting them in",
          remove_when="JAX's CPU client reuses a step's buffers by itself",
          test="tests/test_cpu_memory.py::test_kept_step_memory_ends_the_page_faults_of_each_call_"
               "and_changes_no_number"),
    Patch(name="abstract models", module="rl_cluster", written_for=TUNIX, optimisation=False,
          replaces="tunix.rl.utils.put_params_on_memory_kind (while a cluster is built)",
          why="an RLCluster on ShapeDtypeStructs, for the real-shape compile checks",
          remove_when="RLCluster accepts ShapeDtypeStruct models",
          test="tests/test_shapes.py::test_gemma3_1b_sft_compiles_on_eight_devices_and_fits"),
    Patch(name="metrics listeners", module="trainers", written_for=TUNIX, optimisation=False,
          replaces="reads MetricsLogger._backends, RLCluster._rl_metrics_logger",
          why="Tunix leaves a stage's listeners registered: later metrics leak into its file",
          remove_when="Tunix unregisters its jax.monitoring listeners when training ends",
          test="tests/test_train.py::test_an_interrupted_stage_stops_listening_for_metrics"),
    Patch(name="recent progress", module="progress", written_for=TUNIX, optimisation=False,
          replaces="a trainer's ProgressBar (its private _pbar, set before training): "
                   "ProgressBar._update_metric and update",
          why="Tunix shows each metric's mean over the whole run rounded to 3 decimals: GRPO's "
              "loss and learning rate read 0 throughout; display only, no number changes",
          remove_when="Tunix's progress bar shows recent values to a few significant digits",
          test="tests/test_tunix_patches.py::test_the_progress_bar_shows_recent_values_to_3_"
               "significant_digits"),
    Patch(name="tpu sharding", module="sharding", written_for=TUNIX, optimisation=False,
          replaces="tunix.utils.sharding_utils.shard, tunix.models.gemma.model.shard "
                   "(while a check compiles)",
          why="Tunix skips its activation constraints on a CPU: a check would compile "
              "another program than a TPU runs",
          remove_when="Tunix applies its sharding constraints on every platform",
          test="tests/test_tunix_patches.py::test_tpu_sharding_constraints_are_scoped"),
)
def by_name(name: str) -> Patch:
    """The patch called ``name`` in :data:`PATCHES`."""
    for patch in PATCHES:
        if patch.name == name:
            return patch
    raise KeyError(f"no patch {name!r}; patches: {', '.join(p.name for p in PATCHES)}")


def in_force(optimisations, name: str) -> bool:
    """Whether the patch called ``name`` applies under ``optimisations`` (a preset's field).

    A patch a stage needs (``optimisation=False``) always applies.
    """
    patch = by_name(name)
    return not patch.optimisation or name in optimisations
