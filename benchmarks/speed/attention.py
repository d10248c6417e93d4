"""Tunix's attention vs reasonkit.tunix_patches._attention's, on the jitted forward + LoRA gradient.

Run from the repository root: ``python -m benchmarks.speed.attention`` (``--widths 128,512``
adds the tiny preset's architecture at width 512; ``--ceiling`` adds the step with no
attention core at all, the most a faster attention could give). Not run in CI. One
process, one random model per width with the tiny preset's LoRA, the same weights and batch for every
implementation; the implementations alternate step by step so that load on a shared
machine falls on all of them alike. Prints the median step time of each and its ratio
to Tunix's; compare ratios within one run, not across runs.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from benchmarks.common import rotated
from reasonkit import masks, models
from reasonkit.presets import get_preset
from reasonkit.tunix_patches import attention


def batch(b: int, s: int, vocab: int, seed: int = 0) -> dict[str, jax.Array]:
    """Random tokens, each row left-padded by a random amount up to a third of ``s``."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(3, vocab, (b, s))
    for row, pad in enumerate(rng.integers(0, s // 3, b)):
        tokens[row, :pad] = 0
    valid = masks.padding_mask(tokens, 0)
    return {"tokens": jnp.asarray(tokens), "positions": jnp.asarray(masks.positions_from_mask(valid)),
            "mask": jnp.asarray(masks.causal_mask(valid)), "valid": jnp.asarray(valid)}


def step_fn(graphdef):
    """jit(LoRA params, rest, batch -> next-token loss, its gradient w.r.t. the LoRA params)."""
    def loss(lora, rest, x):
        model = nnx.merge(graphdef, lora, rest)
        logits, _ = model(x["tokens"], x["positions"], None, x["mask"])  # [B, S, V]
        nll = optax.softmax_cross_entropy_with_integer_labels(logits[:, :-1], x["tokens"][:, 1:])
        w = x["valid"][:, 1:]
        return jnp.sum(nll * w) / jnp.sum(w)
    return jax.jit(jax.value_and_grad(loss))


NONE = "none"  # not an attention: the step with its attention core left out (the ceiling)


def _no_attention(q, k, v, attn_mask, **kw):
    """Stands in for :func:`reasonkit.tunix_patches._attention.attend` in :data:`NONE`: the queries as they
    are, [B, T, N, H], nothing mixed across positions; the projections around it stay."""
    return q.astype(v.dtype)


@contextlib.contextmanager
def tracing_as(impl: str):
    """Within: a model traced for ``impl`` :data:`NONE` gets :func:`_no_attention` as its
    attention core (``reasonkit.tunix_patches._attention`` looks ``attend`` up when it traces); any
    other ``impl`` changes nothing."""
    real = attention.attend
    attention.attend = _no_attention if impl == NONE else real
    try:
        yield
    finally:
        attention.attend = real


def compare(model_cfg, lora_cfg, b: int, s: int, steps: int, impls) -> dict[str, float]:
    """Median seconds per step of each implementation in ``impls``, alternating in
    :func:`rotated` order.

    ``"none"`` (:data:`NONE`) is the chunked model traced with its attention core replaced
    by the queries: what the rest of the step costs, so the most any attention could give.
    """
    model = models.apply_lora(models.new_model(model_cfg, seed=0), lora_cfg, seed=0)
    x = batch(b, s, model_cfg.vocab_size)
    fns, states = {}, None
    for impl in impls:
        graphdef, lora, rest = nnx.split(attention.use(model, "chunked" if impl == NONE else impl),
                                         nnx.LoRAParam, ...)
        states = states or (lora, rest)  # the same arrays for every implementation
        fns[impl] = step_fn(graphdef)
        with tracing_as(impl):
            jax.block_until_ready(fns[impl](*states, x))  # trace and compile
    times = {impl: [] for impl in impls}
    for i in range(steps):
        for impl in rotated(impls, i):
            t0 = time.perf_counter()
            jax.block_until_ready(fns[impl](*states, x))
            times[impl].append(time.perf_counter() - t0)
    return {impl: statistics.median(t) for impl, t in times.items()}


def sft_step_flops(m, batch: int, length: int) -> float:
    """FLOPs of one LoRA SFT step on [batch, length] (LoRA matmuls ignored: rank << dim).

    Forward: 2 x params x tokens for the projections and the tied output layer, plus the
    two attention einsums over all length x length pairs (Tunix computes them whole).
    Backward: the base is frozen, so its weight gradients are never computed: one more
    forward's worth for the projections (activation gradients), two for attention.
    """
    tokens = batch * length
    proj = m.num_layers * (m.embed_dim * m.head_dim * (2 * m.num_heads + 2 * m.num_kv_heads)
                           + 3 * m.embed_dim * m.hidden_dim) + m.vocab_size * m.embed_dim
    attn = 2 * 2 * m.num_layers * m.num_heads * m.head_dim * length * tokens
    return 2 * (2 * proj * tokens) + 3 * attn


def at_width(model_cfg, d: int):
    """The tiny preset's architecture at width ``d``: MLP 4 d, heads of 32 to 64 (d 128: its own)."""
    heads = max(4, d // 64)
    return dataclasses.replace(model_cfg, embed_dim=d, hidden_dim=4 * d, num_heads=heads,
                               head_dim=d // heads)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=160, help="the tiny GRPO step's 96 + 64")
    ap.add_argument("--widths", default="128", help="comma-separated model widths (the tiny "
                    "preset is 128; others scale heads and MLP with it)")
    ap.add_argument("--ceiling", action="store_true", help=f"also time {NONE!r}: the step with "
                    "no attention core (the queries pass through), the most attention could give")
    args = ap.parse_args(argv)
    preset = get_preset("tiny")
    widths = [at_width(preset.model, d) for d in map(int, args.widths.split(","))]
    impls = ("tunix", "dense", "chunked") + ((NONE,) if args.ceiling else ())
    print(f"{jax.devices()[0].platform}, batch {args.batch} x seq {args.seq}, "
          f"{args.steps} alternating steps, median s/step (ratio to tunix)")
    for m in widths:
        t = compare(m, preset.lora, args.batch, args.seq, args.steps, impls)
        cells = "  ".join(f"{i} {t[i]:.4f} ({t['tunix'] / t[i]:.2f}x)" for i in impls)
        print(f"d {m.embed_dim}, {m.num_layers} layers, {m.num_heads} heads / {m.num_kv_heads} kv, "
              f"window {m.sliding_window}: {cells}")


if __name__ == "__main__":
    main()
