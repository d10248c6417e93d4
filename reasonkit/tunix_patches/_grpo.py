"""One GRPO step of Tunix 0.1.7, patched once: its rollouts reseeded, its lengths bucketed,
its prompt groups checked.

:func:`patch_grpo_step` wraps two things of a built ``RLCluster`` / ``GRPOLearner``, each
once: ``cluster.rollout.generate`` and the learner's private
``_generate_and_compute_advantage`` (where a step's rollouts are made, padded and scored).

- **Reseeding** (always). Tunix 0.1.7's sampler falls back to ``PRNGKey(0)`` when
  ``RolloutConfig.seed`` is unset, so every step would draw the same noise for row ``i``
  at decoding step ``t``: each group would explore the same few deviations forever. Each
  rollout gets its own key, a function of ``(seed, step, call)``; the step is the
  learner's global step, which Tunix restores on resume, so a resumed run samples what an
  uninterrupted one would.
- **Length buckets** (``buckets``). Tunix's sampler left-pads prompts to the
  ``max_prompt_length`` it is given, and its learner right-pads every answer to
  ``max_tokens_to_generate`` before the reference forward and the update. Here the sampler
  gets the step's prompt bucket as ``max_prompt_length`` (positions and attention come from
  the padding mask, so the model computes the same numbers; not the same draws, since the
  sampler folds the absolute decoding position into each key). Answers are sampled to the
  max, then cut to the smallest answer bucket that holds the longest answer, for the
  reference's and the old policy's forwards and in the ``TrainExample``. Every column cut
  is padding in every row, masked out of each loss Tunix aggregates except
  "sequence-mean-token-scale" (dr-grpo's), which keeps its answers at the max.
- **Prompt groups** (``group`` > 1). The update's shared-prompt forward is compiled to run
  each prompt once per ``group`` rows, as Tunix 0.1.7's learner makes them (``np.repeat``
  of each prompt G times). Each example is checked on the host, and a run whose rows are
  ever made otherwise stops with a clear error before any update.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from reasonkit.tunix_patches._private import set_tunix_private, tunix_private
from reasonkit.tunix_patches._sampling import is_grouped

__all__ = ["patch_grpo_step", "fit_bucket", "used_width", "cut_columns", "cuts_answers"]


def fit_bucket(length: int, buckets: Sequence[int], maximum: int) -> int:
    """The smallest of ``buckets`` that holds ``length``, or ``maximum`` when none below it does.

    ``maximum`` is always the last bucket: buckets at or above it are never used, and a
    ``length`` past it gets ``maximum`` (what happens without buckets).

    >>> [fit_bucket(n, (48, 80), 96) for n in (10, 48, 49, 80, 81, 96, 200)]
    [48, 48, 80, 80, 96, 96, 96]
    >>> fit_bucket(30, (), 64), fit_bucket(30, (64, 128), 64)
    (64, 64)
    """
    return min((b for b in buckets if length <= b < maximum), default=maximum)


def used_width(ids: Any, pad_id: int) -> int:
    """Columns of right-padded ``ids`` [B, C] up to the last non-pad token of any row.

    >>> used_width(np.array([[5, 6, 0, 0, 0],
    ...                      [7, 0, 0, 0, 0]]), pad_id=0)
    2
    """
    real = np.flatnonzero((np.asarray(ids) != pad_id).any(axis=0))  # columns with a token
    return int(real[-1]) + 1 if real.size else 0


def cut_columns(x: Any, width: int) -> Any:
    """``x[:, :width]`` through numpy: no XLA program to compile for each width."""
    return None if x is None else jnp.asarray(np.asarray(x)[:, :width])


def cuts_answers(algo_config) -> bool:
    """Whether a GRPO variant's loss is the same with its answers cut to fewer padded columns.

    Each of Tunix's loss aggregations masks the padding out, except
    "sequence-mean-token-scale" (dr-grpo's), which divides by the padded width.
    """
    return algo_config.loss_agg_mode != "sequence-mean-token-scale"


def patch_grpo_step(cluster, learner, *, seed: int, max_prompt: int, max_answer: int,
                    buckets: tuple[Sequence[int], Sequence[int]] | None = None, group: int = 1,
                    on_shape: Callable[[tuple], None] | None = None) -> None:
    """Reseed every rollout, run each step at its length buckets, check its prompt groups.

    ``buckets``: ``(prompt buckets, answer buckets)``, or None to keep Tunix's full lengths;
    ``group``: GRPO's G when the update shares prompts (1: no check); ``on_shape`` is told
    each bucketed step's ``("grpo", prompt, answer)`` shape (the compile counters).
    """
    rollout = cluster.rollout
    generate, calls = rollout.generate, {}
    step: dict[str, int] = {}  # the shape of the step being made: set only inside it

    def patched_generate(prompts, rollout_config, **kwargs):
        at = cluster.global_steps
        calls[at] = calls.get(at, -1) + 1
        key = jax.random.fold_in(jax.random.fold_in(jax.random.PRNGKey(seed), at), calls[at])
        rollout_config = dataclasses.replace(rollout_config, seed=key)
        if "prompt" in step:
            rollout_config = dataclasses.replace(rollout_config, max_prompt_length=step["prompt"])
        return generate(prompts, rollout_config, **kwargs)

    rollout.generate = patched_generate
    if buckets is None and group == 1:
        return
    prompt_buckets, answer_buckets = buckets or ((), ())
    cut_answers = buckets is not None and cuts_answers(learner.algo_config)
    pad = rollout.pad_id() if cut_answers else None

    def answer_width(ids) -> int:
        if not cut_answers:
            return max_answer
        return fit_bucket(used_width(ids, pad), answer_buckets, max_answer)

    if buckets is not None:
        def on_cut_answers(forward: Callable) -> Callable:
            @functools.wraps(forward)
            def cut(*, completion_tokens, **kwargs):
                if "prompt" in step:  # [B, C] -> [B, width]: log-probs come back [B, width]
                    completion_tokens = cut_columns(completion_tokens, answer_width(completion_tokens))
                return forward(completion_tokens=completion_tokens, **kwargs)
            return cut

        cluster.get_ref_per_token_logps = on_cut_answers(cluster.get_ref_per_token_logps)
        cluster.get_old_per_token_logps = on_cut_answers(cluster.get_old_per_token_logps)
    make_example = tunix_private(learner, "_generate_and_compute_advantage")

    def bucketed(training_input, *args, **kwargs):
        tokenize = tunix_private(rollout, "_sampler").tokenize  # as the sampler counts
        longest = max(len(tokenize(str(p))) for p in training_input["prompts"])
        step["prompt"] = fit_bucket(longest, prompt_buckets, max_prompt)
        try:
            example = make_example(training_input, *args, **kwargs)
        finally:
            prompt = step.pop("prompt")
        width = answer_width(example.completion_ids)
        example = example.replace(completion_ids=cut_columns(example.completion_ids, width),
                                  completion_mask=cut_columns(example.completion_mask, width))
        for name in ("ref_per_token_logps", "old_per_token_logps"):
            logps = getattr(example, name)
            if logps is not None and logps.shape[-1] != width:
                raise RuntimeError(f"GRPO length buckets: {name} has {logps.shape[-1]} columns, "
                                   f"the answers {width}: Tunix no longer computes it through "
                                   "RLCluster.get_ref/old_per_token_logps as 0.1.7 does")
        if on_shape is not None:
            on_shape(("grpo", prompt, width))
        return example

    def make_checked_example(*args, **kwargs):
        example = (bucketed if buckets is not None else make_example)(*args, **kwargs)
        ids = example.prompt_ids
        if group == 1 or (isinstance(ids, jax.Array) and not ids.is_fully_addressable):
            return example  # several hosts: no one host reads them all (Tunix's repeat holds)
        if not is_grouped(ids, group):
            raise RuntimeError(
                f"GRPO: the example's {ids.shape[0]} prompt rows are not groups of "
                f"{group} equal prompts, which the update's shared-prompt forward is compiled for "
                "(Tunix 0.1.7 repeats each prompt num_generations times); set "
                "grpo.share_prompts to false to train without sharing prompts")
        return example

    set_tunix_private(learner, "_generate_and_compute_advantage", make_checked_example)
