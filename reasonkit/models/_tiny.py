"""How the tiny base model is pretrained: its corpus, its key, its training loop.

The tiny preset's base is a small Gemma 3-architecture model trained by the project, on a
2-core CPU, from the synthetic tasks of :mod:`reasonkit.tasks`: a SentencePiece tokenizer
(:func:`tokenizer_texts`), then full-parameter next-token training (:func:`pretrain`) on
plain-prose documents (:func:`corpus`, no answer tags: teaching those is SFT's job) that
leave out every prompt of the tiny preset's data pool (:func:`pretraining_records`).

The repository ships the result in ``reasonkit/assets/tiny`` (:data:`ASSET`);
:func:`reasonkit.models._sources.build_tiny_checkpoint` returns it when its recorded :func:`key`
matches the config and this recipe, and otherwise builds one with the functions here.
``python -m reasonkit.models`` rebuilds the shipped one. This module imports no other
module of :mod:`reasonkit.models`: it is the recipe, :mod:`reasonkit.models._sources` builds with it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import optax
import sentencepiece as spm
from flax import nnx
from tqdm.auto import tqdm

from reasonkit import masks, tasks, template
from reasonkit.config import ModelConfig
from reasonkit.presets import get_preset

__all__ = ["ASSET", "STEPS", "DOCS_PER_DOMAIN", "TOKENIZER_RECORDS", "SEQ_LEN", "corpus", "key",
           "pretraining_records", "tokenizer_texts", "pretrain"]

ASSET = pathlib.Path(__file__).parent.parent / "assets" / "tiny"
STEPS = 4000
DOCS_PER_DOMAIN = 3000  # pretraining documents per domain, before exclusions
TOKENIZER_RECORDS = 600  # per domain: the tokenizer is trained on the first ones
SEQ_LEN = 160  # longer than every pretraining document: none is cut
_VERSION = 2  # bump when the tiny recipe changes, so caches rebuild


def corpus(records: list[dict]) -> list[str]:
    """Pretraining documents: a user turn, then plain-prose reasoning and answer, no tags.

    The base model learns the tasks' language and the turn structure. It reads
    ``<reasoning>`` / ``<answer>`` only in the prompt's instruction and never writes
    them: teaching that format is SFT's job.
    """
    return [f"{template.format_prompt(r['prompt'])}{r['reasoning']} So the answer is {r['answer']}."
            f"{template.END_OF_TURN}" for r in records]


def key(cfg: ModelConfig, steps: int = STEPS, seed: int = 0) -> str:
    """What the tiny checkpoint is a function of: its config and the pretraining recipe.

    ``remat`` and ``attention`` are left out: they change how the numbers are computed,
    not the weights.
    """
    arch = dataclasses.asdict(dataclasses.replace(cfg, remat=False))
    arch.pop("attention")
    text = json.dumps([arch, steps, seed, _VERSION], sort_keys=True)
    return hashlib.sha1(text.encode()).hexdigest()[:10]


def pretraining_records(seed: int = 0) -> tuple[list[dict], int]:
    """The synthetic records the tiny base is pretrained on, and how many were excluded.

    Every prompt of the tiny preset's own data pool (the records its SFT, DPO, GRPO and
    evaluation splits are drawn from) is left out, so the base model has never seen an
    evaluation prompt. Some domains have small prompt spaces: a third of the pool
    would otherwise appear here.
    """
    pool_cfg = get_preset("tiny").data
    pool = {template.normalize_prompt(r["prompt"]) for r in tasks.generate_all(
        pool_cfg.num_records, seed=pool_cfg.seed, difficulty=pool_cfg.difficulty)}
    records = tasks.generate_all(DOCS_PER_DOMAIN, seed=10_000 + seed)  # seeds apart from data's
    kept = [r for r in records if template.normalize_prompt(r["prompt"]) not in pool]
    return kept, len(records) - len(kept)


def tokenizer_texts(seed: int = 0) -> list[str]:
    """What the tiny tokenizer is trained on: the first records of each task, as task text
    and as pretraining documents (so every tag and turn marker is one piece)."""
    records = tasks.generate_all(TOKENIZER_RECORDS, seed=10_000 + seed)
    return tasks.corpus_texts(records) + corpus(records)


def pretrain(model: nnx.Module, tok: spm.SentencePieceProcessor, docs: list[str], *,
             steps: int, seed: int = 0, batch_size: int = 16, seq_len: int = 128,
             lr: float = 3e-3) -> list[float]:
    """Full-parameter next-token training (AdamW, warm-up + cosine); returns the losses."""
    ids = [[tok.bos_id()] + tok.EncodeAsIds(d) for d in docs]
    ids = [x[:seq_len] for x in ids]
    tokens = np.zeros((len(ids), seq_len), np.int32)
    for i, x in enumerate(ids):
        tokens[i, : len(x)] = x
    schedule = optax.warmup_cosine_decay_schedule(0.0, lr, max(1, steps // 10), steps, lr * 0.05)
    optimizer = nnx.Optimizer(model, optax.chain(optax.clip_by_global_norm(1.0),
                                                 optax.adamw(schedule, weight_decay=0.01)),
                              wrt=nnx.Param)

    @nnx.jit
    def step(model, optimizer, batch):
        def loss_fn(model):
            mask = batch != 0  # [B, S]
            logits, _ = model(batch, masks.positions_from_mask(mask), None, masks.causal_mask(mask))
            logp = jax.nn.log_softmax(logits[:, :-1].astype(jnp.float32))
            target = batch[:, 1:]
            nll = -jnp.take_along_axis(logp, target[..., None], axis=-1)[..., 0]
            weight = mask[:, 1:].astype(jnp.float32)
            return (nll * weight).sum() / weight.sum()

        loss, grads = nnx.value_and_grad(loss_fn)(model)
        optimizer.update(model, grads)
        return loss

    rng = np.random.default_rng(seed)
    losses = []
    bar = tqdm(range(steps), desc="pretrain", leave=False, mininterval=5)
    for i in bar:
        batch = tokens[rng.integers(0, len(tokens), batch_size)]
        losses.append(float(step(model, optimizer, jnp.asarray(batch))))
        if i % 50 == 0:
            bar.set_postfix(loss=f"{losses[-1]:.3f}")
    return losses
