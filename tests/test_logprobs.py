"""The chunked loss and log-probabilities equal Tunix's own, values and gradients."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from reasonkit import masks, models
from reasonkit.config import LoraConfig, ModelConfig
from reasonkit.tunix_patches import logprobs

G3 = ModelConfig(family="gemma3", source="unused", num_layers=2, vocab_size=512, embed_dim=32,
                 hidden_dim=64, num_heads=2, head_dim=16, num_kv_heads=1, sliding_window=16,
                 dtype="float32")
G2 = dataclasses.replace(G3, family="gemma2", num_heads=4, num_kv_heads=2)
TOKENS = jnp.array([[2, 17, 40, 5, 99, 7, 0, 0, 0, 0], [2, 300, 12, 8, 9, 11, 13, 21, 6, 1]])


@functools.cache
def lora_model(cfg):
    """A small LoRA model whose adapters are not zero, so they change the logits (built once:
    qwix's eager first call is most of the cost)."""
    model = models.apply_lora(models.new_model(cfg, seed=0), LoraConfig(rank=4, alpha=8.0))
    for i, (_, v) in enumerate(nnx.to_flat_state(nnx.state(model, nnx.LoRAParam))):
        v.value = 0.1 * jax.random.normal(jax.random.key(i), v.value.shape)
    return model


def sft_inputs():
    valid = TOKENS != 0
    loss_mask = valid.at[:, :3].set(False)  # completion-only
    return dict(input_tokens=TOKENS, input_mask=loss_mask,
                positions=masks.positions_from_mask(valid), attention_mask=masks.causal_mask(valid))


def lora_grad(loss, model, *args, **kwargs):
    """Loss and its gradient in the adapters, jitted (eagerly, each op would compile alone)."""
    step = nnx.jit(lambda m, *a, **k: nnx.value_and_grad(
        loss, argnums=nnx.DiffState(0, nnx.LoRAParam))(m, *a, **k))
    value, grads = step(model, *args, **kwargs)
    return value, jax.tree.leaves(grads)


@pytest.mark.slow
@pytest.mark.parametrize("cfg", [G3, G2], ids=["gemma3", "gemma2-softcap"])
def test_sft_loss_equals_tunix_default(cfg):
    from tunix.sft.peft_trainer import _default_loss_fn

    model = lora_model(cfg)
    want, want_g = lora_grad(_default_loss_fn, model, **sft_inputs())
    got, got_g = lora_grad(logprobs.sft_loss, model, **sft_inputs())
    assert float(got) == pytest.approx(float(want), rel=1e-5)
    for a, b in zip(got_g, want_g, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    assert not any(isinstance(v, nnx.Intermediate) for _, v in nnx.iter_graph(model))


@pytest.mark.slow
def test_chunks_give_the_same_log_probs():
    model = lora_model(G3)
    valid = TOKENS != 0
    hidden = logprobs.hidden_states(model, TOKENS, masks.positions_from_mask(valid),
                                    masks.causal_mask(valid))
    emb = logprobs.output_embedding(model)
    whole = logprobs.token_log_probs(hidden[:, :-1], emb, TOKENS[:, 1:], chunk=9)
    for chunk in (1, 4, 5):  # 9 positions: padded to a multiple of the chunk
        np.testing.assert_allclose(
            logprobs.token_log_probs(hidden[:, :-1], emb, TOKENS[:, 1:], chunk=chunk), whole,
            rtol=1e-6, atol=1e-6)
    logits, _ = model(TOKENS, masks.positions_from_mask(valid), None, masks.causal_mask(valid))
    ref = jax.nn.log_softmax(logits[:, :-1], axis=-1)
    np.testing.assert_allclose(whole, jnp.take_along_axis(ref, TOKENS[:, 1:, None], -1)[..., 0],
                               rtol=1e-5, atol=1e-5)


def test_chunk_positions_follow_chunk_bytes_as_set_when_called(monkeypatch):
    """A GPU with memory to spare takes bigger chunks by setting ``logprobs.CHUNK_BYTES``
    (1 GiB: Gemma 3 1B's [32, 1024] SFT step 0.396 -> 0.410 MFU on an H200)."""
    rows, vocab = 32, 262144
    assert logprobs.chunk_positions(rows, vocab, 1023) == 8  # 256 MiB of float32 logits
    monkeypatch.setattr(logprobs, "CHUNK_BYTES", 2**30)
    assert logprobs.chunk_positions(rows, vocab, 1023) == 32
    assert logprobs.chunk_positions(rows, vocab, 1023, chunk_bytes=2**20) == 1  # an explicit size wins


def _weighted_log_probs(flag, hidden, emb, targets, w, **kw):
    """sum(w * log p) (+ 0.3 sum(w^2 * entropy)), the gradient taken in the forward or not (``flag``)."""
    with logprobs.gradient_path(flag):
        out = logprobs.token_log_probs(hidden, emb, targets, **kw)
    if kw.get("entropy"):
        return jnp.sum(out[0] * w) + 0.3 * jnp.sum(out[1] * w**2)
    return jnp.sum(out * w)


@pytest.mark.slow
@pytest.mark.parametrize("kw", [{}, {"softcap": 3.0, "temperature": 0.7, "entropy": True},
                                {"temperature": 1.3, "entropy": True}])
def test_gradient_taken_in_the_forward_equals_autodiffs(kw):
    """The chunks' custom backward gives autodiff's gradients (the recompute path's) for the
    hidden states and the embedding, with Gemma 2's soft-cap, a temperature and the entropy,
    over chunks that pad the last one; the values are the same numbers."""
    keys = jax.random.split(jax.random.key(0), 4)
    hidden = jax.random.normal(keys[0], (3, 21, 16))
    emb = 0.5 * jax.random.normal(keys[1], (50, 16))
    targets = jax.random.randint(keys[2], (3, 21), 0, 50)
    w = jax.random.normal(keys[3], (3, 21))
    f = functools.partial(_weighted_log_probs, targets=targets, w=w, chunk=8, **kw)
    got, got_g = jax.value_and_grad(lambda h, e: f(True, h, e), argnums=(0, 1))(hidden, emb)
    want, want_g = jax.value_and_grad(lambda h, e: f(False, h, e), argnums=(0, 1))(hidden, emb)
    assert got == want
    for a, b in zip(got_g, want_g, strict=True):
        assert float(jnp.max(jnp.abs(b))) > 0
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5 * float(jnp.max(jnp.abs(b))))


@pytest.mark.slow
@pytest.mark.parametrize("entropy", [False, True])
def test_gradient_in_the_forward_projects_onto_the_vocabulary_twice_not_three_times(entropy):
    """The loss and its gradient through the hidden states only (the embedding frozen, as
    with LoRA; the entropy, if any, only logged, as GRPO's loss does): the compiled step
    multiplies by the [V, D] embedding twice per chunk (the logits, and the gradient taken
    in the forward); jax.checkpoint's path three times (its recompute)."""
    b, t, d, v = 2, 64, 32, 4096
    keys = jax.random.split(jax.random.key(1), 3)
    hidden = jax.random.normal(keys[0], (b, t, d))
    emb = jax.random.normal(keys[1], (v, d))
    targets = jax.random.randint(keys[2], (b, t), 0, v)
    projection = 2 * b * 16 * d * v  # one chunk of 16 positions (XLA counts a loop body once)

    def loss(flag, h):
        with logprobs.gradient_path(flag):
            out = logprobs.token_log_probs(h, emb, targets, chunk=16, entropy=entropy)
        logp, ent = out if entropy else (out, jnp.zeros(()))
        return jnp.sum(logp), jnp.mean(ent)  # the entropy as aux: logged, not differentiated

    flops = {}
    for flag in (True, False):
        step = jax.jit(jax.value_and_grad(functools.partial(loss, flag), has_aux=True))
        flops[flag] = float(step.lower(hidden).compile().cost_analysis()["flops"])
    assert 2 * projection <= flops[True] < 2.5 * projection
    assert 3 * projection <= flops[False] < 3.5 * projection


@pytest.mark.slow
@pytest.mark.parametrize("cfg", [G3, G2], ids=["gemma3", "gemma2-softcap"])
def test_dpo_log_probs_equal_tunix(cfg):
    from tunix.sft.dpo import dpo_trainer

    model = lora_model(cfg)
    valid = TOKENS != 0
    args = (TOKENS, masks.positions_from_mask(valid), masks.causal_mask(valid), 5,
            valid[:, -5:].astype(jnp.float32))
    want = dpo_trainer.compute_logps(model, *args)
    got = logprobs.dpo_compute_logps(model, *args)
    np.testing.assert_allclose(got, want, rtol=1e-5)

    def loss(fn):
        return lambda m: (lambda c, r: (c - 2 * r).sum())(*fn(m, *args))  # logits_to_keep static

    _, want_g = lora_grad(loss(dpo_trainer.compute_logps), model)
    _, got_g = lora_grad(loss(logprobs.dpo_compute_logps), model)
    for a, b in zip(got_g, want_g, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("cfg", [G3, G2], ids=["gemma3", "gemma2-softcap"])
def test_grpo_log_probs_and_entropy_equal_tunix(cfg):
    from tunix.rl import algo_core, common

    model = lora_model(cfg)
    prompt, completion = TOKENS[:, :6], TOKENS[:, 6:]
    kw = dict(pad_id=0, eos_id=1, stop_gradient=False, return_logits=True, temperature=0.9)
    graphdef, state = nnx.split(model)
    want, logits = common.compute_per_token_logps(graphdef, state, prompt, completion, **kw)
    got, entropy = logprobs.grpo_compute_per_token_logps(graphdef, state, prompt, completion, **kw)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(logprobs.entropy_of_entropy(entropy),
                               algo_core.compute_entropy_from_logits(logits), rtol=1e-4, atol=1e-5)
    only = logprobs.grpo_compute_per_token_logps(graphdef, state, prompt, completion,
                                                 **{**kw, "return_logits": False})
    np.testing.assert_allclose(only, want, rtol=1e-5, atol=1e-6)


def grouped_batch(group: int, prompts: int = 2, p: int = 12, c: int = 10, seed: int = 0):
    """``prompts`` left-padded prompts of ``p`` columns, each repeated ``group`` times, and
    a different answer per row (EOS then padding): GRPO's batch, as Tunix's learner makes it."""
    rng = np.random.default_rng(seed)
    prompt = np.zeros((prompts, p), np.int32)
    for i in range(prompts):
        n = rng.integers(3, p + 1)
        prompt[i, p - n:] = rng.integers(3, 500, n)
    answer = np.zeros((prompts * group, c), np.int32)
    for r in range(prompts * group):
        n = rng.integers(1, c)
        answer[r, :n] = rng.integers(3, 500, n)
        answer[r, n] = 1
    return jnp.asarray(np.repeat(prompt, group, axis=0)), jnp.asarray(answer)


@pytest.mark.slow
@pytest.mark.parametrize("cfg", [G3, G2, dataclasses.replace(G3, remat=True)],
                         ids=["gemma3", "gemma2-softcap", "gemma3-remat"])
def test_grpo_log_probs_with_each_prompt_run_once_equal_every_row(cfg):
    """A prompt's keys run once for its group, then each answer continues from them: the same
    log-probs, entropies and adapter gradients as every row run whole. The window (16) is
    shorter than prompt + answer (22), so the continued call's window must sit on its true
    slots (Tunix's Gemma 3 would window it from slot 0)."""
    model = models.apply_lora(models.new_model(cfg, seed=0), LoraConfig(rank=4, alpha=8.0))
    for i, (_, v) in enumerate(nnx.to_flat_state(nnx.state(model, nnx.LoRAParam))):
        v.value = 0.1 * jax.random.normal(jax.random.key(i), v.value.shape)
    prompt, answer = grouped_batch(group=3)
    kw = dict(pad_id=0, eos_id=1, stop_gradient=False, return_logits=True, temperature=0.9)

    def loss(m, group):
        graphdef, state = nnx.split(m)
        logp, ent = logprobs.grpo_compute_per_token_logps(graphdef, state, prompt, answer,
                                                          group=group, **kw)
        return jnp.sum(logp * (answer != 0)), (logp, ent)

    step = lambda g: nnx.jit(lambda m: nnx.value_and_grad(
        functools.partial(loss, group=g), argnums=nnx.DiffState(0, nnx.LoRAParam), has_aux=True)(m))(model)
    (want, (want_lp, want_ent)), want_g = step(1)
    (got, (got_lp, got_ent)), got_g = step(3)
    real = np.asarray(answer != 0)
    np.testing.assert_allclose(np.where(real, got_lp, 0), np.where(real, want_lp, 0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.where(real, got_ent, 0), np.where(real, want_ent, 0), rtol=1e-5, atol=1e-5)
    for a, b in zip(jax.tree.leaves(got_g), jax.tree.leaves(want_g), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=2e-5)  # float32 sums in another order
    # a batch whose rows are not groups of 3 gives other numbers: the check is the caller's
    mixed = prompt.at[1].set(prompt[3])
    graphdef, state = nnx.split(model)
    one, three = (logprobs.grpo_compute_per_token_logps(graphdef, state, mixed, answer, group=g, **kw)[0]
                  for g in (1, 3))
    assert not np.allclose(np.where(real, one, 0), np.where(real, three, 0), atol=1e-3)


def test_shared_prompts_refuse_rows_that_are_not_groups_and_tunix_attention():
    model = lora_model(G3)
    prompt, answer = grouped_batch(group=3)
    graphdef, state = nnx.split(model)
    with pytest.raises(ValueError, match="6 rows are not groups of 4"):
        logprobs.grpo_compute_per_token_logps(graphdef, state, prompt, answer, pad_id=0, eos_id=1, group=4)
    from reasonkit.tunix_patches import attention
    tunix = attention.use(models.new_model(G3, seed=0), "tunix")
    graphdef, state = nnx.split(tunix)
    with pytest.raises(ValueError, match="needs reasonkit's attention"):
        logprobs.grpo_compute_per_token_logps(graphdef, state, prompt, answer, pad_id=0, eos_id=1, group=3)
