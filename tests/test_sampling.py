"""reasonkit.tunix_patches._sampling: the sampler's model against Tunix 0.1.7's own, on the tiny model."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from reasonkit import models, template
from reasonkit.presets import get_preset
from reasonkit.tunix_patches import sampling

PROMPTS = [template.format_prompt(q) for q in
           ("What is 3 + 4?", "Name a colour.", "What does this code print?\nprint(2 * 5)")]


@pytest.fixture(scope="module")
def tiny():
    preset = get_preset("tiny")
    path = models.resolve_source(preset.model)
    model = models.apply_lora(models.load_model(path, preset.model), preset.lora, seed=0)
    return preset, model, models.load_tokenizer(path / "tokenizer.model")


def sampler_for(model, tok, cfg, group: int = 1):
    """A Tunix sampler on ``model``; with ``group`` > 1, as a GRPO stage sets its rollout's."""
    import tunix

    cache = tunix.CacheConfig(cache_size=96 + 24, num_layers=cfg.num_layers,
                              num_kv_heads=cfg.num_kv_heads, head_dim=cfg.head_dim)
    sampler = tunix.Sampler(transformer=model, tokenizer=tok, cache_config=cache)
    if group > 1:
        sampling.trace_for_sampling(sampler, model, group)
    return sampler


def sample(sampler, prompts, **kwargs):
    out = sampler(prompts, max_generation_steps=24, max_prompt_length=96, temperature=0.9,
                  top_p=1.0, top_k=50, seed=jax.random.PRNGKey(7), **kwargs)
    return [list(t) for t in out.tokens]


@pytest.mark.slow
def test_tunix_sampler_asks_for_the_last_position_only(tiny):
    preset, model, tok = tiny
    plain = sampler_for(model, tok, preset.model)
    ours = sampler_for(sampling.without_remat(model), tok, preset.model)
    assert not plain._supports_decode_only_last_token
    assert ours._supports_decode_only_last_token  # found in the class's signature
    assert sample(ours, PROMPTS) == sample(plain, PROMPTS)


@pytest.mark.slow
def test_output_layer_at_the_last_position_matches_every_position(tiny):
    preset, model, _ = tiny
    ours = sampling.without_remat(model)
    tokens = jnp.asarray(np.random.default_rng(0).integers(3, 500, (2, 9)))
    positions = jnp.broadcast_to(jnp.arange(9), (2, 9))
    cache = {f"layer_{i}": {"k": jnp.zeros((2, 16, 1, 32)), "v": jnp.zeros((2, 16, 1, 32)),
                            "end_index": jnp.zeros((2,), jnp.int32)} for i in range(6)}
    mask = jnp.tril(jnp.ones((2, 9, 16), bool))
    every, cache_a = ours(tokens, positions, cache, mask)
    last, cache_b = ours(tokens, positions, cache, mask, decode_only_last_token=True)
    assert last.shape == (2, 1, preset.model.vocab_size)
    np.testing.assert_allclose(last[:, 0], every[:, -1], rtol=1e-6, atol=1e-6)
    assert jax.tree.all(jax.tree.map(lambda a, b: bool(jnp.allclose(a, b, atol=1e-6)), cache_a, cache_b))
    assert "decode" not in vars(ours.embedder)  # the shadowing is gone after the call


@pytest.mark.slow
def test_shared_prefill_samples_what_every_row_prefilled_does(tiny):
    """GRPO's repeated prompts: one prefill per group, the same answers (same keys) as before."""
    preset, model, tok = tiny
    repeated = list(np.repeat(PROMPTS, 4))  # as Tunix's learner repeats them: a a a a b b b b ...
    plain = sampler_for(model, tok, preset.model)
    shared = sampler_for(model, tok, preset.model, group=4)
    prefill = shared._compiled_prefill_fn
    calls = []
    prefill.shared = spy(prefill.shared, calls, "shared")
    prefill.every_row = spy(prefill.every_row, calls, "every row")
    want = sample(plain, repeated)
    assert sample(shared, repeated) == want
    assert len({tuple(t) for t in want[:4]}) > 1  # the group's answers differ: sampling is per row
    # rows that are not groups of 4 equal prompts take Tunix's every-row prefill: the same again
    mixed = repeated[1:] + repeated[:1]
    assert sample(shared, mixed) == sample(plain, mixed)
    assert calls == ["shared", "every row"]


def spy(fn, calls, name):
    def called(*args, **kwargs):
        calls.append(name)
        return fn(*args, **kwargs)
    return called


def test_sampling_class_refuses_a_bad_group_and_does_not_stack():
    from tunix.models.gemma3.model import Gemma3

    with pytest.raises(ValueError, match="group=0"):
        sampling.sampling_class(Gemma3, 0)
    once = sampling.sampling_class(Gemma3, 4)
    assert sampling.sampling_class(once, 2).__mro__[2] is Gemma3
    assert once.__name__ == "SamplingGemma3" and once.group == 4


@pytest.mark.slow
def test_training_calls_run_tunix_as_is(tiny):
    """No cache (training, the reference forward): the class changes nothing."""
    preset, model, _ = tiny
    ours = sampling.without_remat(model)
    tokens = jnp.asarray(np.random.default_rng(1).integers(3, 500, (4, 12)))
    positions = jnp.broadcast_to(jnp.arange(12), (4, 12))
    mask = jnp.tril(jnp.ones((12, 12), bool))[None].repeat(4, 0)
    assert jnp.array_equal(ours(tokens, positions, None, mask)[0], model(tokens, positions, None, mask)[0])
