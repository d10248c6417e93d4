"""Text from a model with Tunix's sampler: greedy or sampled, in fixed-size batches.

Evaluation (:mod:`reasonkit.evaluate`) and GRPO's held-out check
(:mod:`reasonkit.train._held_out`) generate the same way, through here: one sampler per
model (:func:`make_sampler`, its programs compiled once), every call at one batch shape
(:func:`generate`).
"""

from __future__ import annotations

from typing import Sequence

from reasonkit import collate
from reasonkit.config import EvalConfig, ModelConfig
from reasonkit.train import _seam

__all__ = ["make_sampler", "prompt_lengths", "generate"]


def make_sampler(model, tokenizer, model_cfg: ModelConfig, cfg: EvalConfig):
    """A Tunix sampler whose KV cache covers prompt + generation (remat off: it cannot decode)."""
    import tunix

    cache = tunix.CacheConfig(cache_size=cfg.max_prompt_length + cfg.max_generation_length,
                              num_layers=model_cfg.num_layers, num_kv_heads=model_cfg.num_kv_heads,
                              head_dim=model_cfg.head_dim)
    return tunix.Sampler(transformer=_seam.without_remat(model), tokenizer=tokenizer, cache_config=cache)


def prompt_lengths(sampler, prompts: Sequence[str]) -> list[int]:
    """Each prompt's tokens as the sampler counts them, BOS included."""
    return [len(sampler.tokenizer.encode(p)) + 1 for p in prompts]


def generate(sampler, prompts: Sequence[str], cfg: EvalConfig, stop_ids: Sequence[int], *,
             sample: bool = False, seed: int = 0, desc: str = "generate") -> list[str]:
    """Completions for ``prompts``, greedy or sampled, in fixed-size batches.

    The last batch is topped up with copies of its last prompt (and the extra outputs
    dropped) so every call has the same shape and XLA compiles once.

    With ``cfg.buckets > 1`` prompts are sorted by length and each batch is padded to
    the smallest of ``cfg.buckets`` prompt lengths that holds it (one compilation per
    bucket); completions come back in the order of ``prompts``.
    """
    from tqdm.auto import tqdm

    # top_p must be set for Tunix to sample: top_k alone silently decodes greedily.
    kw = dict(temperature=cfg.temperature, top_p=cfg.top_p, top_k=cfg.top_k) if sample else {}
    order = list(range(len(prompts)))
    sizes = prompt_lengths(sampler, prompts)
    too_long = [j for j, n in enumerate(sizes) if n > cfg.max_prompt_length]
    if too_long:
        j = too_long[0]
        raise ValueError(
            f"{len(too_long)} of {len(prompts)} prompts are longer than "
            f"eval.max_prompt_length={cfg.max_prompt_length} tokens (BOS included); the "
            f"first, prompt {j}, has {sizes[j]} and ends {prompts[j][-80:]!r}. Drop them (the data "
            "splits do, see data.stage_limits) or raise max_prompt_length")
    if cfg.buckets > 1:
        order.sort(key=lambda j: sizes[j])
        buckets = collate.bucket_lengths(cfg.max_prompt_length, cfg.buckets)
    out: list[str] = [""] * len(prompts)
    starts = range(0, len(prompts), cfg.batch_size)
    for i, start in enumerate(tqdm(starts, desc=desc, leave=False)):
        index = order[start:start + cfg.batch_size]
        batch = [prompts[j] for j in index]
        n = len(batch)
        batch += [batch[-1]] * (cfg.batch_size - n)
        length = cfg.max_prompt_length
        if cfg.buckets > 1:
            longest = max(sizes[j] for j in index)
            length = next((b for b in buckets if b >= longest), cfg.max_prompt_length)
        result = sampler(batch, max_generation_steps=cfg.max_generation_length,
                         max_prompt_length=length, eos_tokens=list(stop_ids),
                         seed=seed * 100_003 + i if sample else None, **kw)
        for j, text in zip(index, result.text[:n], strict=True):
            out[j] = text
    return out
