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
  does not look at the rows: the caller picks it only for a batch that :func:`grouped`
  says is made of such groups (``reasonkit.train`` checks each rollout's prompts on the
  host and keeps Tunix's prefill for any other batch).

Sampling is untouched: the first token of every row is still drawn from its own logits
with its own key, so each of the G answers is sampled as before. Decoding steps (one
token, ``T = 1``) and calls without a cache (training) run Tunix's ``__call__`` as is.

>>> grouped(np.array([[5, 6], [5, 6], [7, 8], [7, 8]]), 2)
True
>>> grouped(np.array([[5, 6], [5, 6], [7, 8], [7, 9]]), 2)
False
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx


def grouped(rows: np.ndarray, group: int) -> bool:
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
