"""The model a Tunix 0.1.7 sampler traces: the output layer at the last position, one prefill per group.

Tunix's sampler prefills a batch of prompts, then decodes one token at a time. Two things
it does are work thrown away, and the model class it traces can avoid both:

- **The prefill's logits.** Gemma 2 and Gemma 3 in Tunix 0.1.7 compute the output layer
  at every prompt position, ``[B, P, V]``, and the sampler keeps only the last one (with
  Gemma's 262144-piece vocabulary, 8 GiB in float32 for 32 prompts of 256 tokens). The
  sampler asks for the last position alone when the model's ``__call__`` takes
  ``decode_only_last_token`` (Tunix's Gemma 4 does): the class here takes it, and runs
  Tunix's own ``__call__`` with the output layer applied to ``x[:, -1:]``.
- **The repeated prompts.** GRPO's learner repeats each prompt G times
  (``np.repeat``: rows ``[a, a, b, b]`` for G = 2) before the sampler sees them, so a
  prefill computes each prompt's keys and values G times. A class made with ``group=G``
  prefills the first row of each group and repeats its cache and logits G times. It
  does not look at the rows: the caller picks it only for a batch that :func:`is_grouped`
  says is made of such groups (``reasonkit.train`` checks each rollout's prompts on the
  host and keeps Tunix's prefill for any other batch, :class:`SharedPrefill`).

Sampling is untouched: the first token of every row is still drawn from its own logits
with its own key, so each of the G answers is sampled as before. Decoding steps (one
token, ``T = 1``) and calls without a cache (training) run Tunix's ``__call__`` as is.

>>> is_grouped(np.array([[5, 6], [5, 6], [7, 8], [7, 8]]), 2)
True
>>> is_grouped(np.array([[5, 6], [5, 6], [7, 8], [7, 9]]), 2)
False
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from reasonkit.tunix_patches._private import set_tunix_private, tunix_private

__all__ = ["is_grouped", "sampling_class", "sampling_graphdef", "without_remat", "SharedPrefill",
           "trace_for_sampling", "sampler_of", "sampler_programs"]


def is_grouped(rows: np.ndarray, group: int) -> bool:
    """Whether ``rows`` [B, ...] come in consecutive runs of ``group`` equal rows.

    False for an array this process cannot read whole (several hosts): not known to be.
    """
    if isinstance(rows, jax.Array) and not rows.is_fully_addressable:
        return False
    rows = np.asarray(rows)
    if group < 1 or rows.shape[0] % group:
        return False
    runs = rows.reshape(rows.shape[0] // group, group, *rows.shape[1:])  # [B / G, G, ...]
    return bool(np.all(runs == runs[:, :1]))


@contextlib.contextmanager
def _output_layer_at_last_position(embedder: nnx.Module) -> Iterator[None]:
    """While active, ``embedder.decode(x)`` computes the output layer for ``x[:, -1:]`` only."""
    decode = embedder.decode  # the bound method of the embedder's class
    # nnx.Module guards its attributes; an instance attribute shadowing the method is
    # plain Python's, set and removed within one trace.
    object.__setattr__(embedder, "decode", lambda x: decode(x[:, -1:]))
    try:
        yield
    finally:
        object.__delattr__(embedder, "decode")


class _Sampling:
    """Mixed into a Tunix Gemma class by :func:`sampling_class`; ``group`` is set there."""

    group = 1

    def __call__(self, last_tokens, positions=None, cache=None, attention_mask=None,
                 output_hidden_states=False, *, decode_only_last_token: bool = False, **kwargs):
        call = functools.partial(super().__call__, output_hidden_states=output_hidden_states,
                                 **kwargs)

        def run(tokens, positions, cache, mask):
            if not decode_only_last_token:
                return call(tokens, positions, cache, mask)
            with _output_layer_at_last_position(self.embedder):
                return call(tokens, positions, cache, mask)

        g = self.group
        if g == 1 or cache is None or last_tokens.shape[1] == 1:  # decoding, training, no group
            return run(last_tokens, positions, cache, attention_mask)
        if last_tokens.shape[0] % g:
            raise ValueError(f"{type(self).__name__}: {last_tokens.shape[0]} rows are not "
                             f"groups of {g}")
        first = jax.tree.map(lambda x: x[::g], (last_tokens, positions, cache, attention_mask))
        return jax.tree.map(lambda x: jnp.repeat(x, g, axis=0), run(*first))  # [B, ...]


@functools.cache
def sampling_class(base: type, group: int = 1) -> type:
    """``base`` (Tunix's Gemma3 or Gemma) taking ``decode_only_last_token``, sharing a
    prefill over ``group`` identical rows (1: none)."""
    if not isinstance(group, int) or isinstance(group, bool) or group < 1:
        raise ValueError(f"sampling_class: group={group!r} must be an int >= 1")
    if issubclass(base, _Sampling):
        base = base.__mro__[2]  # already one: the Tunix class it was made from
    return type(f"Sampling{base.__name__}", (_Sampling, base),
                {"group": group, "__module__": __name__})


class SharedPrefill:
    """A Tunix sampler's prefill that runs once per group of ``group`` equal prompts.

    GRPO's learner repeats each prompt G times before the sampler sees them. When a
    batch's token and position rows are such groups (checked on the host, where the
    sampler keeps them), the prefill traces :func:`sampling_graphdef`
    with ``group`` : each prompt once, its cache and logits
    repeated, every row's first token sampled with its own key as before. Any other
    batch goes to Tunix's own compiled prefill. Two programs, each compiled once.
    """

    def __init__(self, sampler, policy, group: int):
        self.group = group
        self.every_row = tunix_private(sampler, "_compiled_prefill_fn")
        prefill, graphdef = tunix_private(sampler, "_prefill_fn"), sampling_graphdef(policy, group)

        def grouped_prefill(params, state, images=None, echo=False):
            # runs when traced only: Tunix's prefill, reading the grouped model's graphdef.
            # A function of its own, so jit's cache never hands one program to the other.
            every_row = tunix_private(sampler, "_transformer_graphdef")
            set_tunix_private(sampler, "_transformer_graphdef", graphdef)
            try:
                return prefill(params, state, images, echo=echo)
            finally:
                set_tunix_private(sampler, "_transformer_graphdef", every_row)

        # jitted as Tunix 0.1.7 jits its own: the sampling state (the KV cache) donated
        self.shared = jax.jit(grouped_prefill, donate_argnums=(1,), static_argnames=("echo",))

    def __call__(self, params, state, images=None, echo: bool = False):
        if images is None and (is_grouped(state.token_buffer, self.group)
                               and is_grouped(state.positions, self.group)):
            return self.shared(params, state, images, echo=echo)
        return self.every_row(params, state, images, echo=echo)


def sampling_graphdef(model: nnx.Module, group: int = 1):
    """``model``'s graphdef as a Tunix sampler should trace it: remat off, the prefill's
    output layer at the last position only, one prefill per ``group`` identical prompts.

    Tunix 0.1.7's Gemma 2 and 3 wrap each attention and MLP block in ``nnx.remat`` when
    their config asks (``model.remat``, on in every Gemma preset); inside the sampler's
    decoding loop that raises flax's ``TraceContextError`` ("Cannot mutate Param from a
    different trace level"). Without a backward pass remat saves nothing. The model's
    class becomes :func:`sampling_class`'s (``group``: GRPO's G). The
    graphdef merges with the model's own state (the same arrays); ``model`` is left as it was.
    """
    changed: list[tuple[Any, str, Any]] = []
    configs: dict[int, Any] = {}
    base = type(model)
    object.__setattr__(model, "__class__", sampling_class(base, group))  # plain Python's slot
    try:
        for _, module in nnx.iter_graph(model):
            if not isinstance(module, nnx.Module):
                continue
            remat = getattr(module, "remat_config", None)
            if remat is not None and remat != type(remat).NONE:
                changed.append((module, "remat_config", remat))
                module.remat_config = type(remat).NONE
            config = getattr(module, "config", None)
            remat = getattr(config, "remat_config", None)
            if remat is not None and remat != type(remat).NONE:
                if id(config) not in configs:
                    configs[id(config)] = dataclasses.replace(config, remat_config=type(remat).NONE)
                changed.append((module, "config", config))
                module.config = configs[id(config)]
        return nnx.graphdef(model)
    finally:
        for module, name, value in reversed(changed):
            setattr(module, name, value)
        object.__setattr__(model, "__class__", base)


def without_remat(model: nnx.Module) -> nnx.Module:
    """``model`` for sampling (:func:`sampling_graphdef`): the same arrays, remat off."""
    return nnx.merge(sampling_graphdef(model), nnx.state(model))


def trace_for_sampling(sampler, policy, group: int = 1) -> None:
    """Make a Tunix 0.1.7 ``Sampler`` trace :func:`sampling_graphdef`: remat off, the
    prefill's output layer at the last position, and with ``group`` > 1 a
    :class:`SharedPrefill` for batches of groups of ``group`` equal prompts."""
    set_tunix_private(sampler, "_transformer_graphdef", sampling_graphdef(policy))
    set_tunix_private(sampler, "_supports_decode_only_last_token", True)
    if group > 1:
        set_tunix_private(sampler, "_compiled_prefill_fn", SharedPrefill(sampler, policy, group))


def sampler_of(rollout):
    """The Tunix ``Sampler`` a vanilla rollout (``RLCluster.rollout``) generates with."""
    return tunix_private(rollout, "_sampler")


def sampler_programs(sampler) -> tuple[Any, Any, Any]:
    """``(params, prefill, decode)``: a sampler's state and its two jitted programs, to lower.

    ``prefill`` is a :class:`SharedPrefill` where :func:`trace_for_sampling` gave it one.
    """
    return (tunix_private(sampler, "_flattened_transformer_state"),
            tunix_private(sampler, "_compiled_prefill_fn"),
            tunix_private(sampler, "_compiled_decode_fn"))
