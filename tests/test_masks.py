import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from reasonkit import masks

# A right-padded and a left-padded row, as in the docstrings.
MASK = np.array([[1, 1, 1, 0, 0],
                 [0, 0, 1, 1, 1]], dtype=bool)


# ----------------------------------------------------------------- brute-force references

def causal_reference(mask):
    b, s = mask.shape
    out = np.zeros((b, s, s), dtype=bool)
    for r in range(b):
        for i in range(s):
            for j in range(s):
                out[r, i, j] = j <= i and mask[r, j]
    return out


def segment_mask_reference(seg):
    """Query i sees key j iff j <= i, both in the same uninterrupted non-zero run."""
    b, s = seg.shape
    out = np.zeros((b, s, s), dtype=bool)
    for r in range(b):
        for i in range(s):
            for j in range(i + 1):
                out[r, i, j] = seg[r, i] != 0 and all(seg[r, k] == seg[r, i]
                                                      for k in range(j, i + 1))
    return out


def segment_positions_reference(seg):
    b, s = seg.shape
    out = np.zeros((b, s), dtype=np.int32)
    for r in range(b):
        for i in range(s):
            if seg[r, i] != 0:
                out[r, i] = out[r, i - 1] + 1 if i and seg[r, i - 1] == seg[r, i] else 0
    return out


masks_2d = st.integers(1, 4).flatmap(lambda b: st.integers(1, 9).flatmap(
    lambda s: st.lists(st.lists(st.booleans(), min_size=s, max_size=s),
                       min_size=b, max_size=b))).map(lambda rows: np.array(rows, dtype=bool))


@st.composite
def packed_rows(draw):
    """Segment ids as packing writes them: runs 1, 2, 3, ... then padding zeros."""
    s = draw(st.integers(1, 10))
    rows = []
    for _ in range(draw(st.integers(1, 3))):
        row, seg = [], 1
        while len(row) < s:
            if draw(st.booleans()) and row:  # end the row with padding
                row += [0] * (s - len(row))
                break
            row += [seg] * min(draw(st.integers(1, 4)), s - len(row))
            seg += 1
        rows.append(row)
    return np.array(rows, dtype=np.int32)


# ----------------------------------------------------------------- worked examples

def test_padding_mask_example():
    tokens = np.array([[5, 6, 7, 0, 0],
                       [0, 0, 5, 6, 7]])
    np.testing.assert_array_equal(masks.padding_mask(tokens, 0), MASK)
    assert masks.padding_mask(tokens, 0).dtype == bool


def test_expand_padding_mask_broadcasts_against_both_logit_layouts():
    m = masks.expand_padding_mask(MASK)
    assert m.shape == (2, 1, 1, 5)
    for logits in (np.zeros((2, 3, 4, 5)), np.zeros((2, 4, 3, 5))):  # [B,T,N,S], [B,N,T,S]
        masked = np.where(m, logits, -1e9)
        assert masked.shape == logits.shape
        # Keys on padding are masked for every query and head; real keys are kept.
        assert (masked[0, ..., 3:] == -1e9).all() and (masked[0, ..., :3] == 0).all()
        assert (masked[1, ..., :2] == -1e9).all() and (masked[1, ..., 2:] == 0).all()


def test_causal_mask_example_left_padded():
    expected = np.array([[0, 0, 0, 0, 0],
                         [0, 0, 0, 0, 0],
                         [0, 0, 1, 0, 0],
                         [0, 0, 1, 1, 0],
                         [0, 0, 1, 1, 1]], dtype=bool)
    got = masks.causal_mask(MASK)
    assert got.shape == (2, 5, 5) and got.dtype == bool
    np.testing.assert_array_equal(got[1], expected)


def test_positions_example_ignore_left_padding():
    np.testing.assert_array_equal(masks.positions_from_mask(MASK),
                                  [[0, 1, 2, 2, 2],
                                   [0, 0, 0, 1, 2]])
    assert masks.positions_from_mask(MASK).dtype == np.int32


def test_completion_mask_example_right_and_left_padding():
    mask = np.array([[1, 1, 1, 1, 1, 0],
                     [0, 1, 1, 1, 1, 1]], dtype=bool)
    np.testing.assert_array_equal(masks.completion_mask(mask, [2, 3]),
                                  [[0, 0, 1, 1, 1, 0],
                                   [0, 0, 0, 0, 1, 1]])


def test_segment_examples():
    seg = np.array([[1, 1, 2, 2, 2, 0]])
    np.testing.assert_array_equal(masks.segment_causal_mask(seg)[0],
                                  [[1, 0, 0, 0, 0, 0],
                                   [1, 1, 0, 0, 0, 0],
                                   [0, 0, 1, 0, 0, 0],
                                   [0, 0, 1, 1, 0, 0],
                                   [0, 0, 1, 1, 1, 0],
                                   [0, 0, 0, 0, 0, 0]])
    seg = np.array([[1, 1, 1, 2, 2, 0],
                    [3, 3, 4, 4, 4, 4]])
    np.testing.assert_array_equal(masks.segment_positions(seg),
                                  [[0, 1, 2, 0, 1, 0],
                                   [0, 1, 0, 1, 2, 3]])


# ----------------------------------------------------------------- properties

@settings(max_examples=60, deadline=None)
@given(masks_2d)
def test_causal_mask_matches_brute_force(mask):
    np.testing.assert_array_equal(masks.causal_mask(mask), causal_reference(mask))


@settings(max_examples=60, deadline=None)
@given(packed_rows())
def test_segment_mask_and_positions_match_brute_force(seg):
    np.testing.assert_array_equal(masks.segment_causal_mask(seg), segment_mask_reference(seg))
    np.testing.assert_array_equal(masks.segment_positions(seg), segment_positions_reference(seg))


def test_segment_mask_never_joins_separate_runs_with_the_same_id():
    seg = np.array([[1, 1, 2, 1, 1]])  # id 1 used twice: two segments, not one
    got = masks.segment_causal_mask(seg)[0]
    assert not got[3, :2].any() and not got[4, :2].any()
    np.testing.assert_array_equal(masks.segment_positions(seg)[0], [0, 1, 0, 0, 1])


def test_single_segment_equals_causal_padding_mask():
    seg = np.array([[1, 1, 1, 1, 0, 0]])
    np.testing.assert_array_equal(masks.segment_causal_mask(seg)[:, :4],
                                  masks.causal_mask(seg != 0)[:, :4])
    np.testing.assert_array_equal(masks.segment_positions(seg)[0, :4],
                                  masks.positions_from_mask(seg != 0)[0, :4])


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.integers(0, 5), st.integers(0, 6))
def test_left_padding_only_shifts_positions_and_completion(n_real, n_pad, prompt_len):
    """The same tokens padded left or right get the same positions and loss mask."""
    assume(prompt_len <= n_real + n_pad)  # a prompt longer than the row is refused
    right = np.array([[1] * n_real + [0] * n_pad], dtype=bool)
    left = np.array([[0] * n_pad + [1] * n_real], dtype=bool)
    pos_r, pos_l = masks.positions_from_mask(right), masks.positions_from_mask(left)
    np.testing.assert_array_equal(pos_r[right], np.arange(n_real))
    np.testing.assert_array_equal(pos_l[left], np.arange(n_real))
    comp_r = masks.completion_mask(right, [prompt_len])
    comp_l = masks.completion_mask(left, [prompt_len])
    np.testing.assert_array_equal(comp_r[right], comp_l[left])
    assert comp_r[right].sum() == max(n_real - prompt_len, 0)
    assert not comp_r[~right].any() and not comp_l[~left].any()


# ----------------------------------------------------------------- jax inputs and Tunix

@pytest.mark.slow
def test_jnp_inputs_give_jax_arrays_with_numpy_values():
    seg = np.array([[1, 1, 2, 2, 0], [3, 4, 4, 4, 4]], dtype=np.int32)
    cases = [
        (masks.padding_mask, (np.array([[5, 0, 7]]), 0)),
        (masks.expand_padding_mask, (MASK,)),
        (masks.causal_mask, (MASK,)),
        (masks.positions_from_mask, (MASK,)),
        (masks.completion_mask, (MASK, np.array([1, 2]))),
        (masks.segment_causal_mask, (seg,)),
        (masks.segment_positions, (seg,)),
    ]
    for fn, args in cases:
        expected = fn(*args)
        got = fn(*(jnp.asarray(a) if isinstance(a, np.ndarray) else a for a in args))
        assert isinstance(got, jax.Array), fn.__name__
        assert got.dtype == expected.dtype, fn.__name__
        np.testing.assert_array_equal(np.asarray(got), expected, err_msg=fn.__name__)


def test_masks_work_under_jit():
    @jax.jit
    def model_inputs(mask, seg):
        return (masks.causal_mask(mask), masks.positions_from_mask(mask),
                masks.segment_positions(seg))

    seg = np.array([[1, 1, 2, 0, 0], [1, 2, 2, 2, 3]], dtype=np.int32)
    causal, positions, seg_pos = model_inputs(jnp.asarray(MASK), jnp.asarray(seg))
    np.testing.assert_array_equal(causal, causal_reference(MASK))
    np.testing.assert_array_equal(positions, masks.positions_from_mask(MASK))
    np.testing.assert_array_equal(seg_pos, segment_positions_reference(seg))


def test_agrees_with_tunix_helpers():
    from tunix.sft import utils as tunix_utils

    mask = np.array([[1, 1, 1, 0, 0, 0],
                     [0, 0, 1, 1, 1, 1],
                     [0, 0, 0, 0, 0, 0]], dtype=bool)
    np.testing.assert_array_equal(masks.causal_mask(mask),
                                  tunix_utils.make_causal_attn_mask(jnp.asarray(mask)))
    np.testing.assert_array_equal(masks.positions_from_mask(mask),
                                  tunix_utils.build_positions_from_mask(jnp.asarray(mask)))


# ----------------------------------------------------------------- errors

@pytest.mark.parametrize("fn", [masks.expand_padding_mask, masks.causal_mask,
                                masks.positions_from_mask, masks.segment_causal_mask,
                                masks.segment_positions])
def test_non_2d_input_is_refused(fn):
    with pytest.raises(ValueError, match=fn.__name__ + r": \w+ must be 2-D \[B, S\].*\(5,\)"):
        fn(np.ones(5, dtype=bool))


ALL_2D = [(masks.padding_mask, "tokens", (0,)), (masks.expand_padding_mask, "mask", ()),
          (masks.causal_mask, "mask", ()), (masks.positions_from_mask, "mask", ()),
          (masks.completion_mask, "mask", ([1, 1],)),
          (masks.segment_causal_mask, "segment_ids", ()),
          (masks.segment_positions, "segment_ids", ())]


@pytest.mark.parametrize("fn, name, rest", ALL_2D)
def test_nested_lists_are_taken_as_arrays(fn, name, rest):
    rows = [[5, 5, 0], [0, 7, 7]]
    np.testing.assert_array_equal(fn(rows, *rest), fn(np.array(rows), *rest))


@pytest.mark.parametrize("fn, name, rest", ALL_2D)
def test_ragged_and_non_numeric_lists_are_refused(fn, name, rest):
    with pytest.raises(ValueError, match=rf"{fn.__name__}: {name} is ragged "
                                         r"\(row lengths \[3, 2\]\).*equal-length rows"):
        fn([[5, 5, 0], [7, 7]], *rest)
    with pytest.raises(TypeError, match=rf"{fn.__name__}: {name} has dtype <U1"):
        fn([["a", "b"], ["c", "d"]], *rest)


def test_completion_mask_rejects_bad_prompt_lengths():
    with pytest.raises(ValueError, match=r"prompt_lengths\[1\]=-1 \(row 1\): each must be >= 0"):
        masks.completion_mask(MASK, [1, -1])
    with pytest.raises(ValueError, match=r"completion_mask: prompt_lengths must have shape \[B\]"):
        masks.completion_mask(MASK, [1, 2, 3])


@pytest.mark.parametrize("to_array", [np.asarray, jnp.asarray])
def test_completion_mask_refuses_prompt_lengths_past_the_row(to_array):
    """S=5 here: a length of 6 would silently mask the whole row out of the loss."""
    with pytest.raises(ValueError, match=r"completion_mask: prompt_lengths\[0\]=6 \(row 0\): "
                                         r"each must be >= 0 and <= S=5"):
        masks.completion_mask(to_array(MASK), to_array([6, 2]))
    np.testing.assert_array_equal(masks.completion_mask(to_array(MASK), to_array([5, 0])),
                                  [[0, 0, 0, 0, 0], [0, 0, 1, 1, 1]])  # 5 = S is allowed


def test_completion_mask_refuses_negative_jax_prompt_lengths():
    with pytest.raises(ValueError, match=r"prompt_lengths\[1\]=-1 \(row 1\)"):
        masks.completion_mask(jnp.asarray(MASK), jnp.asarray([1, -1]))


@pytest.mark.parametrize("lengths", [[1.0, 2.0], np.array([1.5, 2.0]), [True, False]])
def test_completion_mask_refuses_non_integer_prompt_lengths(lengths):
    with pytest.raises(TypeError, match=r"completion_mask: prompt_lengths=\[.*\] has dtype "
                                        r"(float|bool).*expected ints"):
        masks.completion_mask(MASK, lengths)


def test_completion_mask_checks_prompt_length_dtype_under_jit():
    fn = jax.jit(masks.completion_mask)
    np.testing.assert_array_equal(fn(jnp.asarray(MASK), jnp.asarray([1, 2])),
                                  masks.completion_mask(MASK, [1, 2]))
    with pytest.raises(TypeError, match=r"prompt_lengths \(traced\) has dtype float32"):
        fn(jnp.asarray(MASK), jnp.asarray([1.0, 2.0]))
