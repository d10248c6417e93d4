"""Attention for training and full-sequence forwards that skips what Tunix 0.1.7 builds and drops.

Tunix 0.1.7's Gemma 3 and Gemma 2 ``Attention.block`` compute, per layer, logits of shape
[B, T, N, S] (grouped queries reshaped back to all N heads), build a local layer's
sliding-window mask from two full [B, T, S] ones (``triu``/``tril`` of ``ones_like``),
and run ``where`` + softmax over all of it, in the backward as well. Here the same numbers
come from:

- Tunix's own layouts, [B, T, K, G, S] logits against the K key / value heads (with one
  key head, [B, T, G, S]): on XLA:CPU they measured faster than [B, K, G, T, S];
- the sliding window from two iotas (``|i - j| < window`` on indices for Gemma 3, on the
  query's position for Gemma 2, as Tunix does each), and-ed into the [B, T, S] mask the
  model already receives: no full-ones mask per layer;
- with ``impl="chunked"``, queries in blocks of :data:`Q_BLOCK`, each block against only
  the keys it can see: none after its last query (the mask is causal; this is checked
  at run time, with a fallback to all keys) and, in Gemma 3's local layers, none before
  its first query's window. Each block is rematerialised, so a backward holds one
  block's [B, tq, K, G, keys] probabilities at a time, not the whole [B, T, K, G, S].
  Blocks go in at most :data:`KEY_GROUPS` runs of one key width (:func:`key_groups`),
  each run a ``lax.map``: the program holds a few block bodies per layer, not one per
  block. On Gemma 3 1B's SFT step (T = 1024, 16 blocks) that halved XLA:CPU's compile;
  unrolled, the step was still compiling on an H200 after the 181 s in which Tunix's
  attention compiled beside it (docs/performance.md).

Everything around it (projections, query / key norms, RoPE, query scaling, the output
projection, sharding constraints) is Tunix's own code, called as the block calls it.
Masked logits take Tunix's ``K_MASK`` and the same ``where`` + softmax. A query with
nothing to see (a padding query) gets the mean of all values, as Tunix's softmax over
all-masked logits gives it, so logits match everywhere, padding rows included.

The one override, :func:`use`, picked by ``ModelConfig.attention`` (``"chunked"`` in every
preset; :mod:`reasonkit.models` applies it to each model it builds or loads), swaps the
class of each Tunix ``Attention`` module of a model for a subclass whose ``block`` is the
one here. The choice travels with the model
(``nnx.split`` / ``merge``, the trainers' jits), needs no context around tracing, and is
undone with ``use(model, "tunix")``. A call with a KV cache (the sampler's prefill and
decode) or a single query goes to Tunix's ``block`` unchanged, except a cache marked by
:func:`continues`: a training forward that runs a prompt once into a cache and its
answers on from it (GRPO, :func:`reasonkit.tunix_patches._logprobs.shared_prompt_hidden`). Its new keys
land at the cache's ``end_index`` as in Tunix, and its queries take :func:`attend` with
the window on their true slots (query blocks against the keys up to their last query).

>>> import jax.numpy as jnp
>>> window_mask(jnp.arange(5), jnp.arange(5), 2).astype(int)  # [T, S]: |i - j| < 2
Array([[1, 1, 0, 0, 0],
       [1, 1, 1, 0, 0],
       [0, 1, 1, 1, 0],
       [0, 0, 1, 1, 1],
       [0, 0, 0, 1, 1]], dtype=int32)
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
from flax import nnx
from tunix.models.gemma import model as gemma2_model
from tunix.models.gemma3 import model as gemma3_model
from tunix.utils import sharding_utils

from reasonkit.config import ATTENTION_IMPLS as IMPLS  # use()'s choices; "tunix": Tunix's block

__all__ = ["Q_BLOCK", "KEY_GROUPS", "K_MASK", "window_mask", "block_size", "attend", "key_groups",
           "CONTINUES", "continues", "use", "impl_of"]

Q_BLOCK = 64  # queries per block in "chunked" (a divisor of T is used; T itself if none)
KEY_GROUPS = 4  # at most this many key widths, so block bodies, per layer (key_groups)
K_MASK = gemma3_model.K_MASK  # Tunix's masked-logit value (the same in Gemma 2's module)


def window_mask(query_index, key_index, window: int):
    """True where a key is within ``window`` of a query, either side: [T] x [S] -> bool [T, S].

    Tunix keeps ``-window < i - j < window``; the causal part comes from the model's mask.
    ``query_index`` may carry leading batch axes ([B, T] positions, as Gemma 2 uses).
    """
    diff = query_index[..., :, None] - key_index  # [..., T, S]
    return (diff < window) & (diff > -window)


def block_size(t: int, q_block: int | None = None) -> int:
    """Queries per block for ``t`` queries: the largest divisor of ``t`` at most ``q_block``
    (:data:`Q_BLOCK` by default), or ``t`` when only 1 would do.

    >>> block_size(160), block_size(1024), block_size(97)
    (40, 64, 97)
    """
    q_block = Q_BLOCK if q_block is None else q_block
    best = max(d for d in range(1, min(t, q_block) + 1) if t % d == 0)
    return t if best == 1 else best


def attend(q, k, v, attn_mask, *, window: int | None = None, window_on=None,
           soft_cap: float | None = None, q_block: int | None = None):
    """softmax(mask(cap(q k^T))) v without repeating k / v to every query head.

    q [B, T, N, H] (RoPE'd and scaled), k / v [B, S, K, H] with K dividing N, attn_mask
    bool [B, T, S]. ``window``: keep keys whose index is within ``window`` of the query's
    ``window_on`` [B, T] (default: the query's index). ``soft_cap``: Gemma 2's
    ``tanh(x / cap) * cap`` on the logits. ``q_block``: queries per block (None: all at
    once; with blocks, see :func:`_blocked`). Returns [B, T, N, H] in v's dtype.
    """
    b, t, n, h = q.shape
    s, kh = k.shape[1], k.shape[2]
    if n % kh:
        raise ValueError(f"attend: {kh} key heads must divide {n} query heads")
    q = q.reshape(b, t, kh, n // kh, h)
    mask = attn_mask.astype(bool)
    query_at = jnp.broadcast_to(jnp.arange(t), (b, t)) if window_on is None else window_on
    span = functools.partial(_span, window=window, soft_cap=soft_cap)
    tq = t if q_block is None else block_size(t, q_block)
    if tq == t:
        out = span(q, k, v, mask, query_at, jnp.arange(s))
    elif t != s and (t > s or (window is not None and window_on is None)):
        out = _each_block(span, q, k, v, mask, query_at, jnp.arange(s), tq)
    elif t != s:  # a call continuing a cache: its queries are the last t of s slots
        out = _blocked(span, q, k, v, mask, query_at, tq, window=None, offset=s - t)
    else:
        out = _blocked(span, q, k, v, mask, query_at, tq,
                       window=window if window_on is None else None)
    return out.reshape(b, t, n, h)


def _span(q, k, v, mask, query_at, key_index, *, window, soft_cap, v_mean=None):
    """Queries q [B, tq, K, G, H] against keys k / v [B, sk, K, H] at ``key_index`` [sk].

    ``v_mean`` [B, K, H]: what a query that sees none of these keys gets (the mean of all
    values, as Tunix's softmax over all-masked logits gives) when the keys are a part of
    the sequence; None when they are all of it (the softmax then does it by itself).
    """
    # Tunix's layouts (faster on XLA:CPU than [B, K, G, T, S]): [B, T, K, G, S], and with one
    # key head (multi-query) that head squeezed out, so the dot has only B as batch axis.
    mqa = k.shape[2] == 1
    qk, pv = ("BTGH,BSH->BTGS", "BTGS,BSH->BTGH") if mqa else ("BTKGH,BSKH->BTKGS", "BTKGS,BSKH->BTKGH")
    if mqa:
        q, k, v = q[:, :, 0], k[:, :, 0], v[:, :, 0]
    logits = jnp.einsum(qk, q, k)  # [B, tq, (K,) G, sk]
    if soft_cap is not None:
        logits = jnp.tanh(logits / soft_cap) * soft_cap
    if window is not None:
        mask = mask & window_mask(query_at, key_index, window)  # [B, tq, sk]
    keep = mask[:, :, None, :] if mqa else mask[:, :, None, None, :]
    logits = jnp.where(keep, logits, K_MASK)
    probs = jax.nn.softmax(logits, axis=-1).astype(v.dtype)
    out = jnp.einsum(pv, probs, v)  # [B, tq, (K,) G, H]
    if mqa:
        out = out[:, :, None]  # [B, tq, 1, G, H]
    if v_mean is not None:
        sees = jnp.any(mask, axis=-1)[:, :, None, None, None]  # [B, tq, 1, 1, 1]
        out = jnp.where(sees, out, v_mean[:, None, :, None, :].astype(out.dtype))
    return out


def key_groups(t: int, tq: int, window: int | None, groups: int | None = None) -> list[tuple[int, int, int]]:
    """Consecutive query blocks that share one key width: ``(first block, end block, width)``.

    Block ``i`` (queries ``[i tq, (i + 1) tq)``) needs the keys from ``i tq - window + 1``
    (0 without a window) to its last query. The ``t // tq`` blocks are split into at most
    ``groups`` (:data:`KEY_GROUPS`) runs of equal count, neighbours of equal width merged;
    each run takes the largest width any of its blocks needs. A compiled program then holds
    one block body per run, not one per block: fewer shapes to compile, for a little more
    arithmetic on keys the mask drops.

    >>> key_groups(1024, 64, None)  # a global layer: widths 256 ... 1024
    [(0, 4, 256), (4, 8, 512), (8, 12, 768), (12, 16, 1024)]
    >>> key_groups(1024, 64, 512)  # a local layer: from block 8 on, 64 + 511 keys each
    [(0, 4, 256), (4, 8, 512), (8, 16, 575)]
    """
    groups = KEY_GROUPS if groups is None else groups
    nb = t // tq
    need = [(i + 1) * tq - (0 if window is None else max(0, i * tq - window + 1)) for i in range(nb)]
    size = -(-nb // max(1, groups))
    out: list[tuple[int, int, int]] = []
    for first in range(0, nb, size):
        end = min(nb, first + size)
        width = max(need[first:end])
        if out and out[-1][2] == width:
            out[-1] = (out[-1][0], end, width)
        else:
            out.append((first, end, width))
    return out


def _blocked(span, q, k, v, mask, query_at, tq: int, *, window: int | None, offset: int = 0):
    """Query blocks of ``tq``, each against only the keys it can see when the mask is causal.

    ``offset``: the queries are the last ``t`` of ``offset + t`` key slots (a call that
    continues a cache), so block [i0, i1) sits at slots [offset + i0, offset + i1); no window.

    Block [i0, i1) needs keys [lo, i1): nothing after its last query (causal), nothing
    before ``i0 - window + 1`` (``window`` on indices, Gemma 3's local layers). Blocks go
    in runs of one key width (:func:`key_groups`), each run a ``lax.map`` over its blocks
    with the keys ``[i1 - width, i1)`` (from 0 near the start). Whether the mask is causal
    is checked, not assumed: if any query may see a later block's key, a ``lax.cond`` runs
    every block against all keys instead. Each block is rematerialised, so a backward holds
    one block's probabilities at a time.
    """
    b, t = mask.shape[:2]
    nb = t // tq
    key_index = jnp.arange(t + offset)
    block_end = (jnp.arange(t) // tq + 1) * tq  # [T]: first key index past the query's block
    if offset:
        block_end = block_end + offset
    sees_ahead = jnp.any(mask & (key_index[None, None, :] >= block_end[None, :, None]))
    v_mean = jnp.mean(v.astype(jnp.float32), axis=1)  # [B, K, H]
    one = jax.checkpoint(span)

    def blocks(x, first: int = 0, end: int = nb):  # [B, T, ...] -> [end - first, B, tq, ...]
        x = x[:, first * tq:end * tq]
        return jnp.moveaxis(x.reshape(b, end - first, tq, *x.shape[2:]), 1, 0)

    def unblock(out):  # [n, B, tq, ...] -> [B, n tq, ...]
        out = jnp.moveaxis(out, 0, 1)
        return out.reshape(b, -1, *out.shape[3:])

    def causal(q, k, v, mask, query_at):
        outs = []
        for first, end, width in key_groups(t, tq, window):
            width += offset
            seen = None if width == t + offset else v_mean
            if end - first == 1:  # one block: static slices, no loop
                i1 = end * tq  # past the block's last query; its last key slot is offset + i1 - 1
                lo, j1 = max(0, offset + i1 - width), offset + i1
                outs.append(one(q[:, i1 - tq:i1], k[:, lo:j1], v[:, lo:j1], mask[:, i1 - tq:i1, lo:j1],
                                query_at[:, i1 - tq:i1], key_index[lo:j1], v_mean=seen))
                continue
            starts = jnp.asarray([max(0, offset + (i + 1) * tq - width) for i in range(first, end)])

            def body(xs, width=width, seen=seen):
                qb, mb, ab, start = xs
                keys = functools.partial(jax.lax.dynamic_slice_in_dim, start_index=start,
                                         slice_size=width, axis=1)
                return one(qb, keys(k), keys(v), jax.lax.dynamic_slice_in_dim(mb, start, width, axis=2),
                           ab, start + jnp.arange(width), v_mean=seen)

            outs.append(unblock(jax.lax.map(body, (blocks(q, first, end), blocks(mask, first, end),
                                                   blocks(query_at, first, end), starts))))
        return jnp.concatenate(outs, axis=1)

    def full(q, k, v, mask, query_at):
        return _each_block(span, q, k, v, mask, query_at, key_index, tq)

    return jax.lax.cond(sees_ahead, full, causal, q, k, v, mask, query_at)


def _each_block(span, q, k, v, mask, query_at, key_index, tq: int):
    """Query blocks of ``tq`` (a ``lax.map``), each against all keys and rematerialised."""
    b, t = mask.shape[:2]

    def blocks(x):  # [B, T, ...] -> [T / tq, B, tq, ...]
        return jnp.moveaxis(x.reshape(b, t // tq, tq, *x.shape[2:]), 1, 0)

    one = jax.checkpoint(span)
    out = jax.lax.map(lambda xs: one(xs[0], k, v, xs[1], xs[2], key_index),
                      (blocks(q), blocks(mask), blocks(query_at)))
    out = jnp.moveaxis(out, 0, 1)
    return out.reshape(b, -1, *out.shape[3:])


def _q_block(impl: str) -> int | None:
    return Q_BLOCK if impl == "chunked" else None


CONTINUES = "continues"  # a layer cache holding this key: a training forward continuing a prefix


def continues(cache: dict) -> dict:
    """``cache`` (one layer's Tunix KV cache: ``k``, ``v`` [B, S, K, H], ``end_index`` [B])
    marked for a training forward that continues the prefix it holds.

    Tunix 0.1.7 calls with a cache only from its sampler, and its Gemma 3 builds a
    multi-token call's sliding window as if the call started at slot 0. A marked cache
    goes through :func:`attend` instead, windows on the true slots, and the new keys land
    at ``end_index`` as in Tunix (:func:`reasonkit.tunix_patches._logprobs.shared_prompt_hidden` uses it:
    a prompt's keys computed once for its G answers).
    """
    return {**cache, CONTINUES: jnp.zeros((), jnp.int32)}


def _append(cache, key, value):
    """Write ``key`` / ``value`` [B, T, K, H] into ``cache`` at its ``end_index`` as Tunix does.

    Returns (the new cache or None, all keys, all values, the first new slot or None)."""
    if cache is None:
        return None, key, value, None
    start, t = cache["end_index"][0], key.shape[1]
    at = (0, start % cache["v"].shape[1], 0, 0)
    key = jax.lax.dynamic_update_slice(cache["k"], key.astype(cache["k"].dtype), at)
    value = jax.lax.dynamic_update_slice(cache["v"], value.astype(cache["v"].dtype), at)
    return continues({"k": key, "v": value, "end_index": cache["end_index"] + t}), key, value, start


def _gemma3_block(self, x, segment_pos, cache, attn_mask, *, impl: str):
    """Tunix 0.1.7's Gemma 3 ``Attention.block`` with :func:`attend` inside (no cache, or a
    :func:`continues` one)."""
    if x.shape[1] == 1 or not (cache is None or CONTINUES in cache):  # the sampler: Tunix's own
        return gemma3_model.Attention.block(self, x, segment_pos, cache, attn_mask)
    if self.use_qkv_einsum:
        query, key, value = self.qkv_einsum(x)
    else:
        query = self.q_einsum(x)
        key, value = self.kv_einsum(x)
    query = sharding_utils.shard(query, self.shd_config.act_btnh)
    key = sharding_utils.shard(key, self.shd_config.act_btnh)
    value = sharding_utils.shard(value, self.shd_config.act_btnh)
    query, key = self._query_norm(query), self._key_norm(key)
    rope = functools.partial(gemma3_model.apply_rope, positions=segment_pos,
                             head_dim=self.head_dim, base_frequency=self.rope_base_frequency,
                             scale_factor=self.rope_scale_factor)
    query = rope(query) * self.query_pre_attn_scalar  # [B, T, N, H]
    key = rope(key)  # [B, S, K, H]
    cache, key, value, start = _append(cache, key, value)
    # Gemma 3's window is on indices (Tunix's triu / tril): a query's index is its cache slot
    index = None if cache is None else start + jnp.broadcast_to(jnp.arange(x.shape[1]), x.shape[:2])
    local = self.attn_type == gemma3_model.AttentionType.LOCAL_SLIDING
    encoded = attend(query, key, value, attn_mask,
                     window=self.sliding_window_size if local else None, window_on=index,
                     q_block=_q_block(impl))
    out = sharding_utils.shard(self.attn_vec_einsum(encoded), self.shd_config.act_btd)
    return cache, out


def _gemma2_block(self, x, segment_pos, cache, attn_mask, *, impl: str):
    """Tunix 0.1.7's Gemma 2 ``Attention.block`` with :func:`attend` inside (no cache, or a
    :func:`continues` one)."""
    if x.shape[1] == 1 or not (cache is None or CONTINUES in cache):
        return gemma2_model.Attention.block(self, x, segment_pos, cache, attn_mask)
    if self.use_qkv_einsum:
        query, key, value = self.qkv_einsum(x)
    else:
        query = self.q_einsum(x)
        key, value = self.kv_einsum(x)
    query = gemma2_model.shard(query, self.shd_config.act_btnh)
    key = gemma2_model.shard(key, self.shd_config.act_btnh)
    value = gemma2_model.shard(value, self.shd_config.act_btnh)
    query = gemma2_model.apply_rope(query, segment_pos, head_dim=self.head_dim)
    query = query * self.head_dim**-0.5
    key = gemma2_model.apply_rope(key, segment_pos, head_dim=self.head_dim)
    cache, key, value, _ = _append(cache, key, value)
    # Gemma 2's window is on the query's position against the key's index (Tunix's
    # _create_sliding_mask), not index against index as in Gemma 3.
    local = self.attn_type == gemma2_model.AttentionType.LOCAL_SLIDING
    encoded = attend(query, key, value, attn_mask,
                     window=self.sliding_window_size if local else None,
                     window_on=segment_pos, soft_cap=self.attn_logits_soft_cap,
                     q_block=_q_block(impl))
    out = gemma2_model.shard(self.attn_vec_einsum(encoded), self.shd_config.act_btd)
    return cache, out


_BLOCKS: dict[type, Callable] = {gemma3_model.Attention: _gemma3_block,
                                 gemma2_model.Attention: _gemma2_block}


@functools.cache
def _subclass(base: type, impl: str) -> type:
    """``base`` (a Tunix Attention class) with ``block`` replaced by ``impl``'s."""
    inner = _BLOCKS[base]

    def block(self, x, segment_pos, cache, attn_mask):  # a plain function: Tunix's remat
        return inner(self, x, segment_pos, cache, attn_mask, impl=impl)  # takes .__func__

    return type(f"{impl.capitalize()}{base.__name__}", (base,),
                {"block": block, "impl": impl, "__module__": __name__})


def _tunix_base(module) -> type | None:
    """The Tunix Attention class ``module`` is (or was swapped from), or None."""
    for base in _BLOCKS:
        if isinstance(module, base):
            return base
    return None


def use(model: nnx.Module, impl: str = "chunked") -> nnx.Module:
    """Swap every Tunix 0.1.7 Gemma 3 / Gemma 2 ``Attention`` of ``model`` to ``impl``, in place.

    ``impl``: ``"chunked"`` (query blocks of :data:`Q_BLOCK`), ``"dense"`` (one block,
    same layout and masks) or ``"tunix"`` (Tunix's own ``block`` back). Only the score /
    mask / softmax / value part changes; calls with a KV cache keep Tunix's path. Apply
    it before a jit traces the model (a traced program keeps the attention it was traced
    with). Returns ``model``.
    """
    if impl not in IMPLS:
        raise ValueError(f"attention.use: impl={impl!r}; expected one of {IMPLS}")
    found = 0
    for _, module in nnx.iter_graph(model):
        base = _tunix_base(module)
        if base is None:
            continue
        # nnx.Object's __setattr__ guards attributes; the class slot is plain Python's.
        object.__setattr__(module, "__class__", base if impl == "tunix" else _subclass(base, impl))
        found += 1
    if not found:
        raise ValueError(f"attention.use: {type(model).__name__} has no Tunix Gemma 3 / "
                         "Gemma 2 Attention module to swap")
    return model


def impl_of(model: nnx.Module) -> str:
    """Which attention ``model``'s Attention modules run: one of :data:`IMPLS`."""
    impls = set()
    for _, module in nnx.iter_graph(model):
        base = _tunix_base(module)
        if base is not None:
            impls.add(getattr(type(module), "impl", "tunix"))
    if len(impls) != 1:
        raise ValueError(f"attention.impl_of: mixed or no attention implementations {sorted(impls)}")
    return impls.pop()
