"""Token log-probabilities and the SFT loss without full-vocabulary float32 logits.

Tunix computes every loss from ``model(...)``'s logits ``[B, S, V]``: its SFT loss
builds ``one_hot(target, V)`` and a ``log_softmax`` over them, and its DPO / GRPO
log-probabilities upcast the whole tensor to float32 (GRPO also takes a softmax for
the entropy it logs). With Gemma's 262144-piece vocabulary one float32 copy of the
logits of 4 rows of 1024 tokens is 4 GiB, and a training step holds about ten such
buffers (the forward, the upcast, the softmax and their gradients).

Here the model runs without its vocabulary projection (the final hidden states,
``[B, S, D]``), and the projection, log-softmax and target pick happen a chunk of
positions at a time inside ``jax.lax.map``: one chunk's float32 logits live at a time.
Under differentiation each chunk takes its gradient with respect to its hidden states in
the forward (a position's log-probability depends on its own hidden state only), so the
backward does not project onto the vocabulary again (:func:`_chunk_grad_in_forward`;
Gemma 3 1B's SFT step on an H200: 1.13x faster than ``jax.checkpoint``'s recompute).
Only the positions that are scored are projected (GRPO: the completion, not the
prompt). GRPO's rows come in groups of G answers to one prompt:
:func:`shared_prompt_hidden` runs each prompt once for its group.
The numbers are Tunix's: the same logits (``hidden @ embedding.T`` in the model's dtype,
Gemma 2's final soft-cap, the sampling temperature), then log-softmax in float32
(tests/test_logprobs.py compares them with Tunix's own on the tiny model).

On a mesh each device projects every row of a chunk onto its slice of the vocabulary,
so a chunk of ``C`` positions holds ``rows x C x V / devices`` float32 logits per
device; :func:`chunk_positions` picks ``C`` so that is about ``CHUNK_BYTES``:

>>> chunk_positions(rows=32, vocab=262144 // 8, length=1023)  # 32 x 64 x 32768 x 4 B = 256 MiB
64
>>> chunk_positions(rows=16, vocab=512, length=159)  # the tiny model on one device: one chunk
159
"""

from __future__ import annotations

import contextlib
import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from jax.custom_derivatives import SymbolicZero

from reasonkit.tunix_patches import _attention as attention
from reasonkit.tunix_patches._sharding import current_mesh

__all__ = ["CHUNK_BYTES", "GRAD_IN_FORWARD", "gradient_path", "chunk_positions", "hidden_states",
           "output_embedding", "final_softcap", "token_log_probs", "shared_prompt_hidden",
           "model_log_probs", "sft_loss", "dpo_compute_logps", "grpo_compute_per_token_logps",
           "entropy_of_entropy"]

# float32 logits of one chunk, per device, read when a loss is traced: sized for the TPU
# presets' memory; a GPU with memory to spare may set more (docs/performance.md)
CHUNK_BYTES = 256 * 2**20
# Differentiated chunks take their gradient in the forward (_chunk_grad_in_forward); False:
# jax.checkpoint's recompute (benchmarks/speed/mfu.py times both).
GRAD_IN_FORWARD = True


@contextlib.contextmanager
def gradient_path(in_forward: bool):
    """Chunks traced within take their gradient in the forward (``True``, the default) or
    by ``jax.checkpoint``'s recompute (``False``): what benchmarks/speed/mfu.py and the tests compare."""
    global GRAD_IN_FORWARD
    old, GRAD_IN_FORWARD = GRAD_IN_FORWARD, in_forward
    try:
        yield
    finally:
        GRAD_IN_FORWARD = old


def chunk_positions(rows: int, vocab: int, length: int, chunk_bytes: int | None = None) -> int:
    """Positions per chunk: about ``chunk_bytes`` (``CHUNK_BYTES`` as it is when called) of
    float32 logits, a power of two (or all).

    ``rows x vocab`` is what one device computes per position: all rows of the batch over
    its share of the vocabulary (:func:`token_log_probs` splits the vocabulary).
    """
    chunk_bytes = CHUNK_BYTES if chunk_bytes is None else chunk_bytes
    fit = max(1, chunk_bytes // (4 * max(1, rows) * vocab))
    if fit >= length:
        return length
    return 2 ** int(math.log2(fit))


def _vocab_axes(vocab: int) -> tuple[tuple[str, ...], int]:
    """The mesh axes in scope to split the vocabulary over (all of them), and how many ways."""
    mesh = current_mesh()
    if mesh.empty or mesh.size == 1 or vocab % mesh.size:
        return (), 1
    return tuple(mesh.axis_names), mesh.size


def _constrain(x, *spec):
    mesh = current_mesh()
    return jax.lax.with_sharding_constraint(
        x, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(*spec)))


def hidden_states(model: nnx.Module, tokens: jax.Array, positions: jax.Array,
                  attention_mask: jax.Array | None, **kwargs: Any) -> jax.Array:
    """The final-norm outputs ``[B, S, D]``: the model's forward without the vocabulary projection.

    Tunix's Gemma models sow them when asked (``output_hidden_states=True``); the logits
    the call also returns are never used, so XLA drops their computation. LoRA applies as
    in any call (qwix intercepts the model's ``__call__``).
    """
    model(tokens, positions, None, attention_mask, output_hidden_states=True, **kwargs)
    sown = nnx.pop(model, nnx.Intermediate)
    (hidden,) = jax.tree.leaves(sown)
    return hidden


def output_embedding(model: nnx.Module) -> jax.Array:
    """The ``[V, D]`` matrix the model's logits are ``hidden @ E.T`` of (Gemma ties it to the input)."""
    return model.embedder.input_embedding.value


def final_softcap(model: nnx.Module) -> float | None:
    """Gemma 2's ``tanh`` cap on the logits (30.0); None for Gemma 3."""
    return getattr(model, "final_logits_softcap", None)


def _post(raw, softcap, temperature):
    """The projection's ``[B, C, V]`` (model dtype) -> the float32 logits Tunix samples from."""
    logits = raw.astype(jnp.float32)
    if softcap is not None:
        logits = jnp.tanh(logits / softcap) * softcap
    if temperature not in (0.0, 1.0):
        logits = logits / temperature
    return logits


def token_log_probs(hidden: jax.Array, embedding: jax.Array, targets: jax.Array, *,
                    softcap: float | None = None, temperature: float = 1.0,
                    entropy: bool = False, chunk: int | None = None):
    """``log p(targets)`` ``[B, T]`` (float32) from hidden states ``[B, T, D]``, chunk by chunk.

    ``hidden[:, t]`` predicts ``targets[:, t]``. With ``entropy=True`` also returns the
    entropy of each position's distribution ``[B, T]``.

    On a mesh the vocabulary is split over every device (vocabulary-parallel, as in
    Megatron's cross-entropy): each device projects all rows of a chunk onto its slice
    of the embedding and the log-softmax sums across slices, so no device gathers the
    whole ``[V, D]`` matrix (Tunix's decode would, a float32 copy of it on XLA:CPU).
    """
    b, t, d = hidden.shape
    vocab = embedding.shape[0]
    axes, ways = _vocab_axes(vocab)
    if axes:
        embedding = _constrain(embedding, axes, None)  # [V / ways, D] on each device
    if chunk is None:
        chunk = chunk_positions(b, vocab // ways, t)
    n = -(-t // chunk)
    pad = n * chunk - t
    h = jnp.pad(hidden, ((0, 0), (0, pad), (0, 0))).reshape(b, n, chunk, d).swapaxes(0, 1)
    y = jnp.pad(targets, ((0, 0), (0, pad))).reshape(b, n, chunk).swapaxes(0, 1)  # [n, B, C]

    spec = functools.partial(_chunk, softcap=softcap, temperature=temperature, axes=axes,
                             entropy=entropy)
    if GRAD_IN_FORWARD:
        one = lambda args: _chunk_grad_in_forward(*args, embedding, spec)
    else:  # the backward recomputes a chunk's logits instead of keeping them all
        one = jax.checkpoint(lambda args: spec(*args, embedding)[:2])
    logp, ent = jax.lax.map(one, (h, y))  # [n, B, C]
    logp = logp.swapaxes(0, 1).reshape(b, n * chunk)[:, :t]
    if not entropy:
        return logp
    return logp, ent.swapaxes(0, 1).reshape(b, n * chunk)[:, :t]


def _chunk(h_c, y_c, embedding, *, softcap, temperature, axes, entropy, cotangents=()):
    """One chunk: ``(log p(y_c), entropy or None)`` [B, C] from ``h_c`` [B, C, D], and for
    each ``(g_logp, g_entropy)`` of ``cotangents`` ([B, C] arrays or None) the cotangent of
    the projection's output ``[B, C, V]`` (in the model's dtype, as autodiff has it).
    """
    if axes:
        h_c = _constrain(h_c, None)  # every row on every device (a [B, C, D] gather)
    raw = jnp.einsum("bcd,vd->bcv", h_c, embedding)
    logits, post_vjp = jax.vjp(lambda r: _post(r, softcap, temperature), raw)  # [B, C, V] float32
    if axes:
        logits = _constrain(logits, None, None, axes)
    lse = jax.nn.logsumexp(logits, axis=-1)  # [B, C]
    # the target's logit without a gather across vocabulary slices
    hit = jax.lax.broadcasted_iota(jnp.int32, logits.shape, 2) == y_c[..., None]
    logp = jnp.sum(jnp.where(hit, logits, 0.0), axis=-1) - lse
    ent = None
    if entropy:
        p = jax.nn.softmax(logits, axis=-1)
        ent = lse - jnp.sum(p * logits, axis=-1)
    if cotangents:  # the softmax from lse: no second pair of reductions over [B, C, V]
        p = jnp.exp(logits - lse[..., None])
    d_raw = []
    for g_logp, g_ent in cotangents:
        d_logits = jnp.zeros_like(logits)
        if g_logp is not None:  # d log p(y) / d logits = onehot(y) - p
            d_logits += g_logp[..., None] * (hit.astype(p.dtype) - p)
        if g_ent is not None:  # d entropy / d logits = -p (logits - sum(p logits))
            d_logits -= g_ent[..., None] * p * (logits - (lse - ent)[..., None])
        d_raw.append(post_vjp(d_logits)[0])
    return logp, ent, d_raw


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _chunk_grad_in_forward(h_c, y_c, embedding, spec):
    """``spec``'s chunk (:func:`_chunk`) whose backward needs no second pass over the logits.

    Each position's log-probability is a scalar function of that position's hidden state
    alone, so under differentiation the forward also computes ``d log p / d h_c``
    (``[B, C, D]`` float32) and the backward scales it by the incoming cotangent. The
    logits, their softmax and the ``[B, C, V] x [V, D]`` matmul run once, not twice as
    with ``jax.checkpoint``'s recompute, and no ``[B, C, V]`` buffer outlives its chunk.
    Only what is rarely needed recomputes the chunk in the backward: the entropy's
    gradient (GRPO's loss logs the entropy, and differentiates it only with an entropy
    bonus) and the embedding's (LoRA freezes it); XLA drops either when nothing uses it.
    """
    logp, ent, _ = spec(h_c, y_c, embedding)
    return logp, ent


def _jacobian(d_raw, embedding):  # [B, C, V] x [V, D] -> [B, C, D] float32
    return jnp.einsum("bcv,vd->bcd", d_raw, embedding, preferred_element_type=jnp.float32)


def _chunk_fwd(h_c, y_c, embedding, spec):
    h_c, y_c, embedding = h_c.value, y_c.value, embedding.value  # symbolic_zeros' wrappers
    ones = jnp.ones(y_c.shape, jnp.float32)
    logp, ent, (d_raw,) = spec(h_c, y_c, embedding, cotangents=[(ones, None)])
    return (logp, ent), (h_c, y_c, embedding, _jacobian(d_raw, embedding))


def _chunk_bwd(spec, res, g):
    h_c, y_c, embedding, jac = res
    g_logp, g_ent = (None if x is None or isinstance(x, SymbolicZero) else x for x in g)
    if g_logp is None and g_ent is None:
        return None, None, None
    d_h = jnp.zeros_like(jac) if g_logp is None else g_logp[..., None] * jac
    # the rest needs every logit again: the entropy's part only when the loss has it
    _, _, (d_ent, d_all) = spec(h_c, y_c, embedding, cotangents=[(None, g_ent), (g_logp, g_ent)])
    if g_ent is not None:
        d_h += _jacobian(d_ent, embedding)
    d_emb = jnp.einsum("bcv,bcd->vd", d_all, h_c.astype(d_all.dtype))  # dropped when unused
    return d_h.astype(h_c.dtype), None, d_emb.astype(embedding.dtype)


_chunk_grad_in_forward.defvjp(_chunk_fwd, _chunk_bwd, symbolic_zeros=True)



def shared_prompt_hidden(model: nnx.Module, tokens: jax.Array, positions: jax.Array,
                         attention_mask: jax.Array, keep: int, group: int) -> jax.Array:
    """The hidden states that predict the last ``keep`` tokens ``[B, keep, D]``, each prompt
    run once for the ``group`` rows that share it.

    ``tokens`` [B, S] are prompts (the first ``S - keep`` columns) each repeated in ``group``
    consecutive rows, then their answers; the caller knows the rows are such groups. The
    first row of each group runs its prompt into a KV cache; the cache is repeated to every
    row of the group and the answers run on from it (:func:`reasonkit.tunix_patches._attention.continues`),
    so a prompt position costs once per group instead of once per row. The numbers are
    those of one forward over the whole rows: the same keys, values, masks and positions.
    """
    b, s = tokens.shape
    if group < 1 or b % group:
        raise ValueError(f"shared_prompt_hidden: {b} rows are not groups of {group}")
    if attention.impl_of(model) == "tunix":  # its Gemma 3 windows a continued call from slot 0
        raise ValueError("shared_prompt_hidden: needs reasonkit's attention (attention.use(model, "
                         "'chunked')), not Tunix's, to continue a prompt's KV cache")
    p = s - keep
    cfg = model.config
    kv_shape = (cfg.num_kv_heads, cfg.head_dim)
    dtype = output_embedding(model).dtype  # the model's activations, so its keys and values
    lead = slice(None, None, group)
    empty = {f"layer_{i}": attention.continues(
        {"k": jnp.zeros((b // group, p, *kv_shape), dtype), "v": jnp.zeros((b // group, p, *kv_shape), dtype),
         "end_index": jnp.zeros((b // group,), jnp.int32)}) for i in range(cfg.num_layers)}
    _, prompt_cache = model(tokens[lead, :p], positions[lead, :p], empty,
                            attention_mask[lead, :p, :p], output_hidden_states=True)
    (prompt_hidden,) = jax.tree.leaves(nnx.pop(model, nnx.Intermediate))  # [B / G, P, D]
    room = jnp.zeros((b, keep, *kv_shape), dtype)  # the answers' slots
    full = {name: attention.continues(
        {kv: jnp.concatenate([jnp.repeat(layer[kv], group, axis=0), room], axis=1) for kv in ("k", "v")}
        | {"end_index": jnp.full((b,), p, jnp.int32)}) for name, layer in prompt_cache.items()}
    model(tokens[:, p:], positions[:, p:], full, attention_mask[:, p:], output_hidden_states=True)
    (answer_hidden,) = jax.tree.leaves(nnx.pop(model, nnx.Intermediate))  # [B, keep, D]
    last = jnp.repeat(prompt_hidden[:, -1:], group, axis=0)  # predicts each answer's first token
    return jnp.concatenate([last, answer_hidden[:, :-1]], axis=1)


def model_log_probs(model: nnx.Module, tokens: jax.Array, positions: jax.Array,
                    attention_mask: jax.Array | None, keep: int, *, temperature: float = 1.0,
                    entropy: bool = False, group: int = 1, **kwargs: Any):
    """Log-probabilities of the last ``keep`` tokens ``[B, keep]``, as Tunix slices them.

    Position ``t`` is predicted from ``t - 1``: the hidden states of positions
    ``[S - keep - 1, S - 1)`` are projected, nothing before them. ``group`` > 1: the rows
    are groups of that many sharing one prompt, run once (:func:`shared_prompt_hidden`).
    """
    s = tokens.shape[1]
    if group > 1:
        hidden = shared_prompt_hidden(model, tokens, positions, attention_mask, keep, group)
    else:
        hidden = hidden_states(model, tokens, positions, attention_mask, **kwargs)[:, s - keep - 1:s - 1]
    return token_log_probs(hidden, output_embedding(model),
                           tokens[:, s - keep:], softcap=final_softcap(model),
                           temperature=temperature, entropy=entropy)


def sft_loss(model: nnx.Module, input_tokens: jax.Array, input_mask: jax.Array,
             positions: jax.Array, attention_mask: jax.Array, images: Any = None) -> jax.Array:
    """Tunix's default PEFT loss (mean NLL of the tokens ``input_mask[:, 1:]`` marks), chunked.

    Same signature and value as ``tunix.sft.peft_trainer._default_loss_fn``, computed in
    float32 and without its ``one_hot(target, V)``.
    """
    kwargs = {} if images is None else {"images": images}
    hidden = hidden_states(model, input_tokens, positions, attention_mask, **kwargs)
    logp = token_log_probs(hidden[:, :-1], output_embedding(model), input_tokens[:, 1:],
                           softcap=final_softcap(model))  # [B, S - 1]
    mask = input_mask[:, 1:].astype(jnp.float32)
    return -jnp.sum(logp * mask) / (jnp.sum(mask) + 1e-8)


# --- Tunix's signatures -------------------------------------------------------------------
# Drop-in replacements for the functions Tunix's DPO and GRPO call (same arguments, same
# results); reasonkit.train puts them in place while its stages run.


@nnx.jit(static_argnums=(4,))
def dpo_compute_logps(model, input_ids, positions, attention_mask, logits_to_keep,
                      completion_mask, images=None):
    """``tunix.sft.dpo.dpo_trainer.compute_logps``: summed (chosen, rejected) log-probs."""
    kwargs = {} if images is None else {"images": images}
    logp = model_log_probs(model, input_ids, positions, attention_mask, logits_to_keep, **kwargs)
    logp = (logp * completion_mask).sum(axis=-1)
    half = logp.shape[0] // 2
    return logp[:half], logp[half:]


@functools.partial(jax.jit, static_argnames=("pad_id", "eos_id", "stop_gradient",
                                             "return_logits", "temperature", "group"))
def grpo_compute_per_token_logps(graphdef, state, prompt_tokens, completion_tokens, pad_id: int,
                                 eos_id: int, images=None, stop_gradient: bool = True,
                                 return_logits: bool = False, segment_ids=None,
                                 segment_positions=None, temperature: float = 1.0,
                                 group: int = 1):
    """``tunix.rl.common.compute_per_token_logps`` for unpacked batches, chunked.

    With ``return_logits=True`` Tunix returns the completion logits, which its GRPO loss
    uses only for the entropy it logs; this returns that entropy ``[B, T]`` in their
    place (:func:`entropy_of_entropy` is the matching ``compute_entropy_from_logits``).
    """
    from tunix.rl import common

    if segment_ids is not None or segment_positions is not None:
        raise NotImplementedError("packed GRPO batches (segment_ids) are not supported here")
    model = nnx.merge(graphdef, state)
    tokens, positions, attention_mask, _ = common.process_ids(
        prompt_tokens, completion_tokens, pad_id, eos_id)
    kwargs = {} if images is None else {"images": images}
    out = model_log_probs(model, tokens, positions, attention_mask, completion_tokens.shape[1],
                          temperature=temperature, entropy=return_logits,
                          group=group if images is None else 1, **kwargs)
    if stop_gradient:
        out = jax.lax.stop_gradient(out)
    return out


def entropy_of_entropy(entropy: jax.Array) -> jax.Array:
    """``compute_entropy_from_logits`` for what :func:`grpo_compute_per_token_logps` returns."""
    return entropy
