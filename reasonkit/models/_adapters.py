"""A trained stage's model: the base, LoRA adapters restored from a run's checkpoint, and freeing it.

:func:`load_policy` loads the preset's base model and tokenizer and puts LoRA adapters on
it, fresh or restored (:func:`restore_lora`) from a stage's Orbax checkpoint under
``runs/<run>/<stage>/checkpoints``; :func:`frozen_reference` is the second, frozen set of
adapters DPO and GRPO compare against; :func:`free` releases the device buffers of models
the caller has let go of. Training (:mod:`reasonkit.train`) and evaluation
(:mod:`reasonkit.evaluate`) load stages the same way, through here.
"""

from __future__ import annotations

import gc

import jax

from reasonkit.config import Preset
from reasonkit.models._checkpoint import load_model, use_optimisations
from reasonkit.models._lora import apply_lora
from reasonkit.models._sources import resolve_source
from reasonkit.models._tokenizer import load_tokenizer
from reasonkit.runtime import NOTEBOOK_OF, RunDir, runs

__all__ = ["restore_lora", "load_policy", "frozen_reference", "free"]


def restore_lora(model, run: RunDir, stage: str) -> int:
    """Load ``stage``'s latest LoRA params into ``model`` (resharded onto its mesh)."""
    from tunix.sft.checkpoint_manager import CheckpointManager

    root = runs.checkpoint_dir(run, stage)
    if (root / "actor").is_dir():
        root = root / "actor"
    manager = CheckpointManager(str(root))
    try:
        step, _ = manager.maybe_restore(model, restore_only_lora_params=True)
    finally:
        manager.close()
    if not step:
        raise FileNotFoundError(
            f"no checkpoint of stage {stage!r} under {root}: run notebooks/{NOTEBOOK_OF[stage]} "
            f"for run {run.name!r} (or set REASONKIT_RUN to the run that has it)")
    return step


def load_policy(preset: Preset, run: RunDir | None, stage: str | None, mesh, *, seed: int = 0):
    """``(base, lora_model, tokenizer, model_dir)`` on ``mesh``; adapters from ``stage`` if given.

    ``stage=None`` gives fresh adapters (lora_b = 0: the model equals the base).
    """
    runs.check_made_by(preset, run, stage)  # another preset's adapters: refused before loading
    use_optimisations(preset.optimisations)
    model_dir = resolve_source(preset.model)
    base = load_model(model_dir, preset.model, mesh=mesh)
    tok = load_tokenizer(model_dir / "tokenizer.model", vocab_size=preset.model.vocab_size)
    policy = apply_lora(base, preset.lora, mesh=mesh, seed=seed)
    if stage is not None:
        restore_lora(policy, run, stage)
    return base, policy, tok, model_dir


def frozen_reference(base, preset: Preset, run: RunDir | None, started: str | None, mesh,
                     seed: int = 0):
    """The policy a stage starts from, frozen: the reference for DPO's ratios and GRPO's KL.

    Not the raw base: after SFT the base is far from the policy, and a KL penalty towards
    it would pull the model back out of the format. A second set of adapters on the same
    backbone costs no second base in memory; it is never given to an optimizer.
    """
    use_optimisations(preset.optimisations)
    reference = apply_lora(base, preset.lora, mesh=mesh, seed=seed)
    if started is not None and run is not None:
        restore_lora(reference, run, started)
    return reference


def free() -> None:
    """Release device buffers of trainers and models the caller has already deleted."""
    gc.collect()
    jax.clear_caches()
