"""SFT packing (numerically the same loss as unpacked), length buckets, the compile counter."""

import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from reasonkit import collate, masks, models, train
from reasonkit.collate import (
    BucketLayout,
    DPOCollator,
    PackedLayout,
    SFTCollator,
    StaticLayout,
    batches,
)
from reasonkit.presets import get_preset
from reasonkit.runtime import compiles

PAD, BOS = 0, 2


def random_pairs(n, seed=0, vocab=(3, 500), prompt=(2, 40), completion=(1, 60)):
    rng = np.random.default_rng(seed)
    return [(rng.integers(*vocab, size=rng.integers(*prompt)).tolist(),
             rng.integers(*vocab, size=rng.integers(*completion)).tolist()) for _ in range(n)]


def segments(batch):
    """(tokens, loss mask) of each segment of each packed row, in row order."""
    out = []
    for tokens, seg, loss in zip(batch["input_tokens"], batch["segment_ids"],
                                 batch["input_mask"], strict=True):
        for k in range(1, seg.max() + 1):
            at = np.flatnonzero(seg == k)
            assert (np.diff(at) == 1).all(), "a segment must be contiguous"
            out.append((tokens[at].tolist(), loss[at].tolist()))
    return out


# --- packing --------------------------------------------------------------------------


def test_packing_never_splits_and_keeps_every_example():
    pairs = random_pairs(300)
    packed = SFTCollator(layout=PackedLayout(max_length=128, window=64), pad_id=PAD, bos_id=BOS)
    out = list(batches(pairs, 4, packed, remainder="pad"))
    assert all(b["input_tokens"].shape == (4, 128) for b in out)
    got = collections.Counter(tuple(t) for b in out for t, _ in segments(b))
    want = collections.Counter(tuple([BOS] + p + c) for p, c in pairs)
    assert got == want  # each example exactly once, whole
    assert packed.stats.kept == 300 and packed.stats.dropped_remainder == 0


def test_packed_loss_mask_is_each_examples_completion_mask():
    pairs = random_pairs(60, seed=1)
    static = SFTCollator(layout=StaticLayout(max_length=128), pad_id=PAD, bos_id=BOS)
    packed = SFTCollator(layout=PackedLayout(max_length=128), pad_id=PAD, bos_id=BOS)
    want = {}
    for p, c in pairs:
        b = static([(p, c)])
        n = len(p) + len(c) + 1
        want[tuple(b["input_tokens"][0, :n])] = b["input_mask"][0, :n].tolist()
    for b in batches(pairs, 2, packed, remainder="pad"):
        for tokens, loss in segments(b):
            assert loss == want[tuple(tokens)]


def test_segment_start_is_never_a_target_even_without_prompt():
    c = SFTCollator(layout=PackedLayout(max_length=8), pad_id=PAD, min_prompt_tokens=0)
    batch = c([([], [5, 6, 1]), ([], [7, 1])])
    np.testing.assert_array_equal(batch["segment_ids"], [[1, 1, 1, 2, 2, 0, 0, 0]])
    # position 3 (token 7) would be "predicted" from token 1 of the previous example
    np.testing.assert_array_equal(batch["input_mask"].astype(int), [[0, 1, 1, 0, 1, 0, 0, 0]])


def test_model_inputs_of_a_packed_batch():
    c = SFTCollator(layout=PackedLayout(max_length=8), pad_id=PAD, bos_id=BOS)
    batch = c([([5], [6, 1]), ([7, 8], [1])])
    x = train.gen_model_input_fn(PAD)(batch)
    np.testing.assert_array_equal(x["positions"], [[0, 1, 2, 3, 0, 1, 2, 3]])
    # block-diagonal: the first query of the second example sees only itself
    assert x["attention_mask"][0, 4].astype(int).tolist() == [0, 0, 0, 0, 1, 0, 0, 0]
    unpacked = train.gen_model_input_fn(PAD)({k: v for k, v in batch.items() if k != "segment_ids"})
    assert unpacked["attention_mask"][0, 4].sum() == 5  # without segments: sees the first one


def test_packing_efficiency_on_gsm8k_like_lengths():
    rng = np.random.default_rng(0)
    lengths = np.clip(rng.lognormal(np.log(60), 0.4, 2000), 8, 200).astype(int), \
        np.clip(rng.lognormal(np.log(120), 0.5, 2000), 8, 300).astype(int)
    pairs = [([3] * p, [4] * c) for p, c in zip(*lengths, strict=True)]
    static = SFTCollator(layout=StaticLayout(max_length=512), pad_id=PAD)
    packed = SFTCollator(layout=PackedLayout(max_length=512), pad_id=PAD)
    for c in (static, packed):
        for _ in batches(pairs, 8, c):
            pass
    assert static.stats.padding_efficiency < 0.45
    assert packed.stats.padding_efficiency >= 0.95


def test_packed_layout_is_sft_only_and_packs_deterministically():
    with pytest.raises(ValueError, match="PackedLayout is for SFT only"):
        DPOCollator(prompt_layout=PackedLayout(max_length=8),
                    response_layout=StaticLayout(max_length=8), pad_id=PAD)
    with pytest.raises(ValueError, match="PackedLayout.window"):
        PackedLayout(max_length=8, window=0)
    layout = PackedLayout(max_length=10)
    assert layout.pack([4, 6, 5, 5, 3]) == layout.pack([4, 6, 5, 5, 3]) == [[1, 0], [2, 3], [4]]
    with pytest.raises(ValueError, match="exceeds max_length"):
        layout.pack([11])


@pytest.fixture(scope="module")
def tiny_lora():
    preset = get_preset("tiny")
    base = models.load_model(models.resolve_source(preset.model), preset.model)
    model = models.apply_lora(base, preset.lora, seed=0)
    # non-zero adapters (lora_b starts at 0), so the LoRA path is part of what is compared
    from flax import nnx

    state = nnx.state(model, nnx.LoRAParam)
    leaves, treedef = jax.tree.flatten(state)
    keys = jax.random.split(jax.random.key(0), len(leaves))
    nnx.update(model, jax.tree.unflatten(treedef, [
        a + 0.05 * jax.random.normal(k, a.shape, a.dtype) for a, k in zip(leaves, keys, strict=True)]))
    return model


@pytest.mark.slow
def test_packed_loss_equals_the_token_mean_of_unpacked_examples(tiny_lora):
    from tunix.sft.peft_trainer import _default_loss_fn

    pairs = random_pairs(12, seed=2, vocab=(3, 500), prompt=(2, 30), completion=(1, 40))
    fn = train.gen_model_input_fn(PAD)
    total = count = 0.0
    for pair in pairs:  # one example per batch, statically padded
        b = SFTCollator(layout=StaticLayout(max_length=80), pad_id=PAD, bos_id=BOS)([pair])
        n = float(b["input_mask"][:, 1:].sum())
        total += float(_default_loss_fn(tiny_lora, **fn(b))) * n
        count += n
    packer = SFTCollator(layout=PackedLayout(max_length=160), pad_id=PAD, bos_id=BOS)
    packed = packer(pairs, batch_size=4)
    assert packer.stats.kept == 12 and packed["segment_ids"].max() >= 2  # really packed
    loss = float(_default_loss_fn(tiny_lora, **fn(packed)))
    np.testing.assert_allclose(loss, total / count, rtol=2e-5)
    # and without the segment masks it would not be the same
    leaky = {k: v for k, v in packed.items() if k != "segment_ids"}
    assert abs(float(_default_loss_fn(tiny_lora, **fn(leaky))) - total / count) > 1e-3


# --- buckets --------------------------------------------------------------------------


def test_dpo_buckets_give_a_small_fixed_set_of_shapes():
    rng = np.random.default_rng(0)
    triples = [(rng.integers(3, 9, rng.integers(1, 96)).tolist(),
                rng.integers(3, 9, rng.integers(1, 64)).tolist(),
                rng.integers(3, 9, rng.integers(1, 64)).tolist()) for _ in range(400)]
    c = DPOCollator(prompt_layout=collate.layout_for(96, 3),
                    response_layout=collate.layout_for(64, 3), pad_id=PAD)
    sorted_ = collate.length_sorted(triples, 64, lambda t: (len(t[0]), max(len(t[1]), len(t[2]))))
    shapes = {(b["prompt_ids"].shape, b["chosen_ids"].shape) for b in batches(sorted_, 8, c)}
    assert {p[1] for p, _ in shapes} <= {24, 48, 96} and {r[1] for _, r in shapes} <= {16, 32, 64}
    assert len(shapes) <= 9
    static = DPOCollator(prompt_layout=StaticLayout(max_length=96),
                         response_layout=StaticLayout(max_length=64), pad_id=PAD)
    for _ in batches(triples, 8, static):
        pass
    assert c.stats.padding_efficiency > static.stats.padding_efficiency
    assert isinstance(collate.layout_for(96, 3), BucketLayout)


def test_dpo_batches_use_buckets_from_the_config():
    preset = get_preset("tiny", **{"dpo.buckets": 2, "dpo.max_steps": 20, "dpo.batch_size": 2})

    class Tok:
        def pad_id(self):
            return PAD

    triples = [([3] * (5 + 7 * i % 90), [4] * (1 + 5 * i % 60), [5] * 3) for i in range(64)]
    stream, _ = train.dpo_batches(triples, preset, Tok())
    shapes = {(b["prompt_ids"].shape[1], b["chosen_ids"].shape[1]) for b in stream}
    assert shapes <= {(p, r) for p in (48, 96) for r in (32, 64)} and len(shapes) > 1


# --- the compile counter ---------------------------------------------------------------


def test_compile_counter_counts_new_shapes_only():
    @jax.jit
    def f(x):
        return jnp.tanh(x) * 3

    xs = [jnp.ones((2, 5)), jnp.ones((2, 5)) * 2, jnp.ones((2, 7))]
    with compiles.CompileCounter() as counter:
        f(xs[0]).block_until_ready()
        f(xs[1]).block_until_ready()
        assert counter.count == 1
        f(xs[2]).block_until_ready()
    assert counter.count == 2 and counter.names == ["jit(f)"] * 2
    f(jnp.ones((3, 3)))  # closed: not counted
    assert counter.count == 2


def test_watch_counts_only_after_the_warmup():
    @jax.jit
    def step(x):
        return (x * x).sum()

    stream = [np.ones((4, 8)), np.ones((4, 8)), np.ones((4, 8)), np.ones((4, 9))]
    with compiles.CompileCounter() as counter:
        for x in counter.watch(stream):
            step(x).block_until_ready()
    # the (4, 9) batch compiles again; as a new shape (a bucket) it is warm-up, not a recompile
    assert counter.count == 2 and counter.shapes == 2 and counter.after_warmup == 0
    with compiles.CompileCounter() as counter:
        for x in counter.watch(stream[:3], skip=1):
            step(x).block_until_ready()
    assert counter.after_warmup == 0


def test_watch_allows_one_compile_per_bucket_and_survives_cleared_listeners():
    @jax.jit
    def step(x):
        return (x + 1).sum()

    stream = [np.ones((2, 8)), np.ones((2, 16)), np.ones((2, 8)), np.ones((2, 16))]
    with compiles.CompileCounter() as counter:
        for i, x in enumerate(counter.watch(stream)):
            if i == 2:
                jax.monitoring.clear_event_listeners()  # what Tunix's MetricsLogger.close does
            step(x).block_until_ready()
            if i == 3:
                jnp.zeros((5, 7)).block_until_ready()  # a compile in a repeated-shape step
    assert counter.shapes == 2 and counter.count >= 3
    assert counter.after_warmup >= 1 and "jit(step)" not in counter.names_after_warmup


def test_masks_of_packed_rows_match_unpacked_ones():
    seg = np.array([[1, 1, 1, 2, 2, 0]])
    pos, att = masks.segment_positions(seg), masks.segment_causal_mask(seg)
    one = masks.causal_mask(np.array([[1, 1, 1]], dtype=bool))[0]
    np.testing.assert_array_equal(att[0, :3, :3], one)
    np.testing.assert_array_equal(att[0, 3:5, 3:5], one[:2, :2])
    assert not att[0, 3:, :3].any() and pos.tolist() == [[0, 1, 2, 0, 1, 0]]
