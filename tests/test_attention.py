"""reasonkit.tunix_patches._attention against Tunix 0.1.7's own attention, on small random float32 models."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from reasonkit import masks, models
from reasonkit.config import LoraConfig, ModelConfig
from reasonkit.models import _checkpoint as models_checkpoint
from reasonkit.tunix_patches import attention

S = 64  # sequence; the window (16) is smaller, so local layers mask something
TOL = 1e-5  # relative error: max |new - tunix| / max |tunix|


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    """Query blocks of 32 in 64 positions: "chunked" skips keys (causal; window 16 in the second)."""
    monkeypatch.setattr(attention, "Q_BLOCK", 32)


def config(family: str, num_kv_heads: int, impl: str = "tunix") -> ModelConfig:
    # Gemma 3 hard-codes 5 local : 1 global layers, so 6 layers cover both kinds;
    # Gemma 2 alternates local / global, so 2 do. Tunix's attention by default: the reference.
    return ModelConfig(family=family, source="tiny", num_layers=6 if family == "gemma3" else 2,
                       vocab_size=64, embed_dim=32, hidden_dim=64, num_heads=4, head_dim=16,
                       num_kv_heads=num_kv_heads, sliding_window=16, dtype="float32",
                       attention=impl)


def batch(seed: int = 0):
    """Model inputs and real-token mask for five rows of S tokens.

    Rows 0-2 are padded (left, right, none) with Tunix's causal mask and positions; rows
    3-4 are packed (segments of 20 + 30 + padding, and 40 + 24) with a block-causal mask
    and positions restarting per segment.
    """
    tokens = np.random.default_rng(seed).integers(3, 64, (5, S))
    tokens[0, :10] = 0
    tokens[1, 40:] = 0
    valid = masks.padding_mask(tokens[:3], 0)
    segments = np.zeros((2, S), np.int32)
    segments[0, :20], segments[0, 20:50] = 1, 2
    segments[1, :40], segments[1, 40:] = 1, 2
    tokens[3:][segments == 0] = 0
    positions = np.concatenate([masks.positions_from_mask(valid), masks.segment_positions(segments)])
    mask = np.concatenate([masks.causal_mask(valid), masks.segment_causal_mask(segments)])
    return (tokens, positions, mask), tokens != 0


def logits(model, inputs):
    tokens, positions, mask = map(jnp.asarray, inputs)
    return model(tokens, positions, None, mask)[0]  # [B, S, V]


def rel_err(new, ref) -> float:
    return float(jnp.max(jnp.abs(new - ref)) / jnp.max(jnp.abs(ref)))


@pytest.mark.slow
@pytest.mark.parametrize("family,num_kv_heads,impl", [
    ("gemma3", 1, "chunked"), ("gemma3", 2, "dense"),  # multi-query, grouped-query
    ("gemma2", 2, "chunked"), ("gemma2", 4, "chunked"),  # grouped, all heads (qkv_einsum)
])
def test_logits_match_tunix(family, num_kv_heads, impl):
    model = models.new_model(config(family, num_kv_heads), seed=0)
    inputs, _ = batch()
    ref = logits(model, inputs)
    new = logits(attention.use(model, impl), inputs)
    assert rel_err(new, ref) <= TOL  # padding rows too
    assert jnp.array_equal(logits(attention.use(model, "tunix"), inputs), ref)


def lora_loss_and_grads(model, inputs, valid):
    """Next-token loss over real tokens and its gradient w.r.t. the LoRA params."""
    graphdef, lora, rest = nnx.split(model, nnx.LoRAParam, ...)

    def loss(lora):
        out = logits(nnx.merge(graphdef, lora, rest), inputs)
        nll = optax.softmax_cross_entropy_with_integer_labels(out[:, :-1], jnp.asarray(inputs[0])[:, 1:])
        w = jnp.asarray(valid)[:, 1:]
        return jnp.sum(nll * w) / jnp.sum(w)

    value, grads = jax.jit(jax.value_and_grad(loss))(lora)
    return value, jax.tree.leaves(grads)


@pytest.mark.slow
@pytest.mark.parametrize("family", ["gemma3", "gemma2"])
def test_lora_gradients_match_tunix(family):
    lora = LoraConfig(rank=4, alpha=8.0)
    model = models.apply_lora(models.new_model(config(family, 2), seed=0), lora, seed=0)
    # qwix starts b at zero: give the adapters random values so every gradient is non-trivial.
    state = nnx.state(model, nnx.LoRAParam)
    keys = iter(jax.random.split(jax.random.key(1), len(jax.tree.leaves(state))))
    nnx.update(model, jax.tree.map(lambda p: 0.1 * jax.random.normal(next(keys), p.shape), state))
    inputs, valid = batch()
    ref_loss, ref = lora_loss_and_grads(model, inputs, valid)
    new_loss, new = lora_loss_and_grads(attention.use(model, "chunked"), inputs, valid)
    assert abs(float(new_loss - ref_loss)) <= TOL * abs(float(ref_loss))
    assert len(new) == len(ref) > 0
    # Relative to the largest gradient entry: a leaf whose own gradient is ~1e-6 of the
    # others' is a float32 cancellation either way, and is held to the common scale.
    scale = max(float(jnp.max(jnp.abs(g))) for g in ref)
    for g_new, g_ref in zip(new, ref, strict=True):
        assert float(jnp.max(jnp.abs(g_ref))) > 0
        assert float(jnp.max(jnp.abs(g_new - g_ref))) <= TOL * scale


def test_use_travels_with_split_merge_and_reverts():
    model = models.new_model(config("gemma3", 1), seed=0)
    assert attention.impl_of(model) == "tunix"
    attention.use(model, "chunked")
    assert attention.impl_of(nnx.merge(*nnx.split(model))) == "chunked"
    assert attention.impl_of(attention.use(model, "tunix")) == "tunix"
    assert type(model.layers[0].attn).__name__ == "Attention"


@pytest.mark.slow
def test_cache_calls_keep_tunix_block():
    """The sampler's path (a KV cache) runs Tunix's own block: same numbers, same cache."""
    model = models.new_model(config("gemma3", 1), seed=0)
    attn = model.layers[0].attn
    x = jax.random.normal(jax.random.key(0), (1, 4, 32))
    cache = {"k": jnp.zeros((1, 8, 1, 16)), "v": jnp.zeros((1, 8, 1, 16)),
             "end_index": jnp.zeros((1,), jnp.int32)}
    args = (x, jnp.arange(4)[None], cache, jnp.tril(jnp.ones((1, 4, 8), bool)))
    ref_cache, ref = attn(*args)
    new_cache, new = attention.use(model, "chunked").layers[0].attn(*args)
    assert jnp.array_equal(new, ref)
    assert jax.tree.all(jax.tree.map(jnp.array_equal, new_cache, ref_cache))


def fresh_attend():
    """``attention.attend`` jitted with a trace cache of its own: jax keys traces by the
    function object, so two ``jax.jit(attention.attend)`` would share one, and a program
    traced under one ``KEY_GROUPS`` would serve the next."""
    return jax.jit(lambda *a, **kw: attention.attend(*a, **kw),
                   static_argnames=("window", "soft_cap", "q_block"))


@pytest.mark.slow
@pytest.mark.parametrize("family,num_kv_heads", [("gemma3", 1), ("gemma2", 2)])
def test_a_continued_cache_call_equals_the_whole_sequence(family, num_kv_heads):
    """A prefix into a marked cache, then the rest continuing from it: each layer's output
    for the rest equals one call on the whole sequence (window 16, prefix 40, rest 24:
    the window sits on the true slots). Compared where a query sees a key: one that sees
    none (padding) gets the mean of the values its call holds. Tunix's own block,
    continuing the same cache, windows Gemma 3's rest as if it began at slot 0."""
    model = models.new_model(config(family, num_kv_heads, "chunked"), seed=0)
    (_, positions, mask), _ = batch()  # its padded rows: GRPO's (packed rows are not continued)
    x = jax.random.normal(jax.random.key(1), (3, S, 32))
    positions, mask, p = jnp.asarray(positions[:3]), jnp.asarray(mask[:3]), 40
    sees = jnp.any(mask, axis=-1)[..., None]  # [B, S, 1]
    seen = lambda out, part=slice(None): jnp.where(sees[:, part], out, 0.0)  # noqa: E731
    for layer in (0, 5 if family == "gemma3" else 1):  # a local and a global layer
        attn = model.layers[layer].attn
        _, whole = attn(x, positions, None, mask)
        empty = {"k": jnp.zeros((3, p, num_kv_heads, 16)), "v": jnp.zeros((3, p, num_kv_heads, 16)),
                 "end_index": jnp.zeros((3,), jnp.int32)}
        prefix, head = attn(x[:, :p], positions[:, :p], attention.continues(empty), mask[:, :p, :p])
        room = jnp.zeros((3, S - p, num_kv_heads, 16))
        cache = {"k": jnp.concatenate([prefix["k"], room], 1), "v": jnp.concatenate([prefix["v"], room], 1),
                 "end_index": prefix["end_index"]}
        assert int(cache["end_index"][0]) == p and attention.CONTINUES in prefix
        _, rest = attn(x[:, p:], positions[:, p:], attention.continues(cache), mask[:, p:])
        assert rel_err(seen(jnp.concatenate([head, rest], 1)), seen(whole)) <= TOL
        if family == "gemma3" and layer == 0:
            tunix = attention.use(model, "tunix").layers[0].attn
            _, theirs = tunix(x[:, p:], positions[:, p:], cache, mask[:, p:])
            attention.use(model, "chunked")
            assert rel_err(seen(theirs, slice(p, None)), seen(whole[:, p:], slice(p, None))) > 0.01


@pytest.mark.slow
@pytest.mark.parametrize("groups", [1, 2, 8])
def test_attend_continuing_a_cache_in_blocks_equals_one_block(monkeypatch, groups):
    """Fewer queries than keys (a call continuing a cache, its queries the last 8 of 24
    slots): query blocks, each against the keys up to its last query in runs of one key
    width, give one block's numbers, with a window on the queries' slots; so does a mask
    that lets a query see a later block's key (every block then takes every key)."""
    monkeypatch.setattr(attention, "KEY_GROUPS", groups)
    kq, kk, kv = jax.random.split(jax.random.key(0), 3)
    q = jax.random.normal(kq, (2, 8, 4, 8))
    k, v = jax.random.normal(kk, (2, 24, 2, 8)), jax.random.normal(kv, (2, 24, 2, 8))
    causal = jnp.tril(jnp.ones((24, 24), bool), 0)[16:][None].repeat(2, 0)  # queries at slots 16-23
    causal = causal.at[0, 2].set(False)  # a query that sees nothing
    ahead = causal.at[1, 1, 20].set(True)  # slot 17 sees slot 20, in a later block of 2
    slots = jnp.broadcast_to(16 + jnp.arange(8), (2, 8))
    attend = fresh_attend()
    for mask in (causal, ahead):
        for window in (5, None):
            one = attend(q, k, v, mask, window=window, window_on=slots, soft_cap=3.0)
            blocked = attend(q, k, v, mask, window=window, window_on=slots, soft_cap=3.0, q_block=2)
            assert rel_err(blocked, one) <= TOL


def test_bad_use_names_the_choice():
    model = models.new_model(config("gemma2", 2), seed=0)
    with pytest.raises(ValueError, match="impl='flash'"):
        attention.use(model, "flash")
    with pytest.raises(ValueError, match="no Tunix Gemma 3 / Gemma 2 Attention"):
        attention.use(model.final_norm, "chunked")


@pytest.mark.slow
@pytest.mark.parametrize("groups", [1, 2, 8])
def test_attend_blocks_equal_one_block(monkeypatch, groups):
    """Query blocks (a block size that does not divide T too), in runs of one key width or
    one run each, give one block's numbers; so does a mask that is not causal."""
    monkeypatch.setattr(attention, "KEY_GROUPS", groups)
    kq, kk, kv = jax.random.split(jax.random.key(0), 3)
    q = jax.random.normal(kq, (2, 24, 4, 8))
    k, v = jax.random.normal(kk, (2, 24, 2, 8)), jax.random.normal(kv, (2, 24, 2, 8))
    causal = jnp.tril(jnp.ones((24, 24), bool))[None].repeat(2, 0)
    causal = causal.at[0, :3].set(False)  # three queries that see nothing
    ahead = causal.at[1, 2, 7].set(True)  # one query sees a later block: all keys are used
    attend = fresh_attend()  # KEY_GROUPS is read when attend is traced
    for mask in (causal, ahead):
        for window in (5, None):
            one = attend(q, k, v, mask, window=window, soft_cap=3.0)
            for q_block in (5, 24):  # 5 -> 4 (the largest divisor of 24 at most 5): 6 blocks
                blocked = attend(q, k, v, mask, window=window, soft_cap=3.0, q_block=q_block)
                assert rel_err(blocked, one) <= TOL


def test_key_groups_cover_what_each_block_sees():
    for t, tq, window in ((1024, 64, None), (1024, 64, 512), (160, 40, 128), (24, 4, 5), (64, 64, None)):
        for groups in (1, 2, 4, 16):
            runs = attention.key_groups(t, tq, window, groups)
            assert runs[0][0] == 0 and runs[-1][1] == t // tq and len(runs) <= groups
            assert all(a[1] == b[0] and a[2] != b[2] for a, b in zip(runs, runs[1:], strict=False))
            for first, end, width in runs:
                assert width <= t
                for i in range(first, end):  # the keys [i1 - width, i1) from 0 hold [lo, i1)
                    i1, lo = (i + 1) * tq, 0 if window is None else max(0, i * tq - window + 1)
                    assert max(0, i1 - width) <= lo and i1 - lo <= width


@pytest.mark.slow
def test_model_config_picks_the_attention_of_every_model_built(tmp_path):
    """``ModelConfig.attention`` reaches new, loaded (safetensors) and LoRA'd models; "chunked" by default."""
    from reasonkit.presets import get_preset

    assert {get_preset(n).model.attention for n in ("tiny", "gemma3-1b", "gemma2-2b")} == {"chunked"}
    cfg = dataclasses.replace(config("gemma3", 1, impl="chunked"), vocab_size=512)  # the tokenizer's
    model = models.new_model(cfg, seed=0)
    assert attention.impl_of(model) == "chunked"
    assert attention.impl_of(models.apply_lora(model, LoraConfig(rank=2, alpha=2.0))) == "chunked"
    models_checkpoint.save_hf_checkpoint(model, cfg, tmp_path, models.tiny.ASSET / "tokenizer.model")
    loaded = models.load_model(tmp_path, dataclasses.replace(cfg, attention="dense"))
    assert attention.impl_of(loaded) == "dense"
    with pytest.raises(ValueError, match="ModelConfig.attention='flash'"):
        config("gemma3", 1, impl="flash")
