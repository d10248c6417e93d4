"""Masks and positions from a 2-D padding mask: causal, [B, 1, 1, S], completion, packed.

Every function takes numpy arrays (the main case: collators build batches on the host)
or jax arrays (inside a jitted model input function) and returns the same kind; nested
Python lists are taken as numpy arrays.

Shapes: B = batch, S = sequence (keys), T = queries (T = S here), N = heads.
A padding mask is ``True`` on real tokens and ``False`` on padding.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["padding_mask", "expand_padding_mask", "causal_mask", "positions_from_mask",
           "completion_mask", "segment_causal_mask", "segment_positions"]


def _xp(*arrays):
    """jax.numpy if any input is a jax array (tracers included), else numpy."""
    return jnp if any(isinstance(a, jax.Array) for a in arrays) else np


def _row_lengths(rows) -> str:
    """The lengths of ``rows`` for an error message (``?`` for a row without one)."""
    lengths = [len(r) if hasattr(r, "__len__") else "?" for r in rows]
    return str(lengths[:8])[:-1] + ", ...]" if len(lengths) > 8 else str(lengths)


def _as_2d(x, name: str, fn: str):
    """``x`` as a numeric [B, S] array (nested lists become numpy), or a clear error.

    ``fn`` and ``name`` say which function and argument the error is about.
    """
    if not isinstance(x, (jax.Array, np.ndarray)):
        try:
            x = np.asarray(x)
        except ValueError:  # numpy refuses rows of different lengths
            raise ValueError(f"{fn}: {name} is ragged (row lengths {_row_lengths(x)}); "
                             "expected a 2-D [B, S] array or a list of equal-length rows") from None
    if x.ndim != 2:
        raise ValueError(f"{fn}: {name} must be 2-D [B, S], got shape {tuple(x.shape)}")
    if x.dtype.kind not in "biuf":
        raise TypeError(f"{fn}: {name} has dtype {x.dtype}; expected a numeric [B, S] array "
                        "(bool or int)")
    return x


def padding_mask(tokens, pad_id: int):
    """True where a token is real, False where it is ``pad_id``: [B, S] -> bool [B, S].

    >>> tokens = np.array([[5, 6, 7, 0, 0],
    ...                    [0, 0, 5, 6, 7]])
    >>> padding_mask(tokens, pad_id=0).astype(int)
    array([[1, 1, 1, 0, 0],
           [0, 0, 1, 1, 1]])
    """
    tokens = _as_2d(tokens, "tokens", "padding_mask")
    return tokens != pad_id  # [B, S]


def expand_padding_mask(mask):
    """Padding mask [B, S] -> [B, 1, 1, S], which broadcasts over queries and heads.

    Attention logits are [B, T, N, S] (or [B, N, T, S]); a bare [B, S] mask does not
    broadcast against them, and the einsum fails on a shape mismatch. With two
    singleton axes the same mask works for either layout.

    >>> mask = np.array([[1, 1, 1, 0, 0],
    ...                  [0, 1, 1, 1, 1]], dtype=bool)
    >>> m = expand_padding_mask(mask)
    >>> m.shape
    (2, 1, 1, 5)
    >>> m[1, 0, 0].astype(int)
    array([0, 1, 1, 1, 1])
    >>> (np.zeros((2, 3, 4, 5)) + m).shape  # [B, T, N, S] logits
    (2, 3, 4, 5)
    """
    mask = _as_2d(mask, "mask", "expand_padding_mask")
    return mask.astype(bool)[:, None, None, :]  # [B, 1, 1, S]


def causal_mask(mask):
    """Padding mask [B, S] -> attention mask [B, S, S]: query i sees key j iff j <= i and j is real.

    This is the ``attention_mask`` Tunix's Gemma ``__call__`` takes. Rows of padding
    queries may still see earlier real keys; their outputs are never used.

    >>> mask = np.array([[0, 0, 1, 1, 1]], dtype=bool)  # left padded
    >>> causal_mask(mask)[0].astype(int)  # rows: queries, columns: keys
    array([[0, 0, 0, 0, 0],
           [0, 0, 0, 0, 0],
           [0, 0, 1, 0, 0],
           [0, 0, 1, 1, 0],
           [0, 0, 1, 1, 1]])
    """
    mask = _as_2d(mask, "mask", "causal_mask")
    xp = _xp(mask)
    s = mask.shape[-1]
    lower = xp.tril(xp.ones((s, s), dtype=bool))  # [S, S]
    return lower[None, :, :] & mask.astype(bool)[:, None, :]  # [B, S, S]


def positions_from_mask(mask):
    """Position of each real token, counting only real tokens: [B, S] -> int32 [B, S].

    Left padding does not shift positions (the first real token is position 0);
    padding before it gets 0 and padding after the last real token repeats the last
    position. Same numbers as Tunix's ``build_positions_from_mask``.

    >>> mask = np.array([[1, 1, 1, 0, 0],
    ...                  [0, 0, 1, 1, 1]], dtype=bool)
    >>> positions_from_mask(mask)
    array([[0, 1, 2, 2, 2],
           [0, 0, 0, 1, 2]], dtype=int32)
    """
    mask = _as_2d(mask, "mask", "positions_from_mask")
    xp = _xp(mask)
    counts = xp.cumsum(mask.astype(xp.int32), axis=-1)  # [B, S]
    return xp.maximum(counts - 1, 0).astype(xp.int32)


def _prompt_lengths(prompt_lengths, b: int, s: int, xp):
    """``prompt_lengths`` as a [B] int array with every value in [0, S], or a clear error.

    Shape and dtype are checked always; values only when they are known (not under jit).
    """
    where = "completion_mask: prompt_lengths"
    try:
        lengths = xp.asarray(prompt_lengths)
    except (TypeError, ValueError):
        raise ValueError(f"{where}={prompt_lengths!r}: expected a [B] array of ints") from None
    if lengths.shape != (b,):
        raise ValueError(f"{where} must have shape [B]=({b},), got {tuple(lengths.shape)}")
    traced = isinstance(lengths, jax.core.Tracer)  # values unknown until the jitted call runs
    values = None if traced else np.asarray(lengths)
    if b and lengths.dtype.kind not in "iu":  # [] has a float dtype; nothing to check in it
        shown = " (traced)" if traced else f"={values.tolist()!r:.80}"
        raise TypeError(f"{where}{shown} has dtype {lengths.dtype}; expected ints "
                        "(token counts)")
    if traced:
        return lengths
    bad = np.flatnonzero((values < 0) | (values > s))
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"{where}[{i}]={int(values[i])} (row {i}): each must be >= 0 and "
                         f"<= S={s}, the row length")
    return lengths


def completion_mask(mask, prompt_lengths):
    """Loss mask: real tokens at or after the end of each row's prompt: bool [B, S].

    ``prompt_lengths`` [B] counts real tokens from the row's first real token, so the
    same call works for right padding (prompt starts at index 0) and left padding.

    >>> mask = np.array([[1, 1, 1, 1, 1, 0],    # right padded
    ...                  [0, 1, 1, 1, 1, 1]],   # left padded
    ...                 dtype=bool)
    >>> completion_mask(mask, prompt_lengths=[2, 3]).astype(int)
    array([[0, 0, 1, 1, 1, 0],
           [0, 0, 0, 0, 1, 1]])
    """
    mask = _as_2d(mask, "mask", "completion_mask")
    xp = _xp(mask, prompt_lengths)
    lengths = _prompt_lengths(prompt_lengths, *mask.shape, xp)
    real = mask.astype(bool)
    counts = xp.cumsum(real.astype(xp.int32), axis=-1)  # [B, S], 1-based rank of real tokens
    return real & (counts > lengths[:, None])  # [B, S]


def _segment_starts(segment_ids):
    """True where a new run of equal segment ids begins (index 0 always starts one)."""
    xp = _xp(segment_ids)
    first = xp.ones_like(segment_ids[:, :1], dtype=bool)  # [B, 1]
    return xp.concatenate([first, segment_ids[:, 1:] != segment_ids[:, :-1]], axis=-1)


def segment_causal_mask(segment_ids):
    """Block-causal mask for packed rows: [B, S] segment ids -> bool [B, S, S].

    Segment id 0 is padding. A segment is a run of equal non-zero ids; a token sees
    only earlier-or-same-position tokens of its own run.

    >>> segment_ids = np.array([[1, 1, 2, 2, 2, 0]])
    >>> segment_causal_mask(segment_ids)[0].astype(int)
    array([[1, 0, 0, 0, 0, 0],
           [1, 1, 0, 0, 0, 0],
           [0, 0, 1, 0, 0, 0],
           [0, 0, 1, 1, 0, 0],
           [0, 0, 1, 1, 1, 0],
           [0, 0, 0, 0, 0, 0]])
    """
    segment_ids = _as_2d(segment_ids, "segment_ids", "segment_causal_mask")
    xp = _xp(segment_ids)
    run = xp.cumsum(_segment_starts(segment_ids).astype(xp.int32), axis=-1)  # [B, S]
    same = run[:, :, None] == run[:, None, :]  # [B, S, S]
    real = (segment_ids != 0)[:, None, :]  # [B, 1, S]
    s = segment_ids.shape[-1]
    lower = xp.tril(xp.ones((s, s), dtype=bool))[None]  # [1, S, S]
    return same & real & lower


def segment_positions(segment_ids):
    """Positions that restart at 0 in each segment (0 on padding): [B, S] -> int32 [B, S].

    >>> segment_ids = np.array([[1, 1, 1, 2, 2, 0],
    ...                         [3, 3, 4, 4, 4, 4]])
    >>> segment_positions(segment_ids)
    array([[0, 1, 2, 0, 1, 0],
           [0, 1, 0, 1, 2, 3]], dtype=int32)
    """
    segment_ids = _as_2d(segment_ids, "segment_ids", "segment_positions")
    xp = _xp(segment_ids)
    index = xp.broadcast_to(xp.arange(segment_ids.shape[-1]), segment_ids.shape)  # [B, S]
    starts = xp.where(_segment_starts(segment_ids), index, 0)  # [B, S]
    if xp is np:
        start_of_run = np.maximum.accumulate(starts, axis=-1)
    else:
        start_of_run = jax.lax.cummax(starts, axis=1)
    return xp.where(segment_ids != 0, index - start_of_run, 0).astype(xp.int32)
