"""Each stage's training data as a deterministic stream of fixed-shape batches.

Split records become token examples (:func:`sft_examples`, :func:`dpo_examples`) or
GRPO's prompt rows (:func:`grpo_records`); :func:`epochs` reshuffles them each epoch from
the seed, forever, and :func:`take` cuts the stream at ``max_steps``. Every stream is a
function of the data, the preset and the seed alone, so a resumed trainer that skips
the batches it already consumed sees the rest of the very stream it started.
"""

from __future__ import annotations

import random
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from reasonkit import collate, template
from reasonkit.config import Preset

__all__ = ["epochs", "take", "sft_examples", "dpo_examples", "grpo_records", "sft_collator",
           "dpo_collator", "sft_batches", "dpo_batches", "grpo_batches"]


def epochs(items: Sequence[Any], seed: int, split: str = "training") -> Iterator[Any]:
    """``items`` reshuffled each epoch (seeded), forever; the same seed gives the same stream."""
    if not items:
        raise ValueError(
            f"no training examples: the {split} split is empty. data/data_report.json "
            f"(02_dataset_rebalance) says what each source gave and why rows were dropped; "
            f"{split} needs " + ("preference pairs or gold answers to build them from"
                                 if split == "dpo" else "records with a gold answer"))
    for epoch in range(1_000_000):
        order = list(range(len(items)))
        random.Random(seed * 1_000_003 + epoch).shuffle(order)
        yield from (items[i] for i in order)


def take(stream: Iterable[Any], n: int) -> Iterator[Any]:
    """The first ``n`` items of ``stream``, lazily; ``n`` is checked here, at the call.

    A wrong ``n`` (a negative ``max_steps`` would silently train nothing) fails where it
    is passed, not at the first ``next``. No item past the n-th is read: a batch stream
    collates, and counts in its stats, every batch it yields.

    >>> list(take(iter("abcdef"), 3)), list(take("ab", 5)), list(take("ab", 0))
    (['a', 'b', 'c'], ['a', 'b'], [])
    """
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"take: n={n!r} is a {type(n).__name__}; expected an int >= 0 "
                        "(how many items to take)")
    if n < 0:
        raise ValueError(f"take: n={n} is negative; expected an int >= 0 (how many items to take)")
    if not isinstance(stream, Iterable):
        raise TypeError(f"take: stream is a {type(stream).__name__}; expected an iterable")
    return _take(stream, int(n))


def _take(stream: Iterable[Any], n: int) -> Iterator[Any]:
    if n == 0:
        return
    for i, item in enumerate(stream, start=1):
        yield item
        if i == n:  # stop before asking the stream for one more
            return


def sft_examples(records: Sequence[dict], tok) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, completion ids) in the one template, BOS added by the collator."""
    return [(tok.EncodeAsIds(template.format_prompt(r["prompt"])),
             tok.EncodeAsIds(template.format_completion(r["reasoning"], r["answer"]))) for r in records]


def dpo_examples(records: Sequence[dict], tok) -> list[tuple[list[int], list[int], list[int]]]:
    """(BOS + prompt, chosen, rejected) token triples."""
    return [([tok.bos_id()] + tok.EncodeAsIds(template.format_prompt(r["prompt"])),
             tok.EncodeAsIds(r["chosen"]), tok.EncodeAsIds(r["rejected"])) for r in records]


def grpo_records(records: Sequence[dict]) -> list[dict[str, Any]]:
    """Rows for Tunix's GRPO: formatted prompt, gold answer, domain (reaches the rewards)."""
    return [{"prompts": template.format_prompt(r["prompt"]), "answer": r["answer"],
             "domain": r["domain"]} for r in records]


def sft_collator(preset: Preset, tok) -> collate.SFTCollator:
    cfg = preset.sft
    layout = collate.PackedLayout(max_length=cfg.max_target_length) if cfg.packing \
        else collate.StaticLayout(max_length=cfg.max_target_length)
    return collate.SFTCollator(layout=layout, pad_id=tok.pad_id(), bos_id=tok.bos_id())


def dpo_collator(preset: Preset, tok) -> collate.DPOCollator:
    cfg = preset.dpo
    return collate.DPOCollator(
        prompt_layout=collate.layout_for(cfg.max_prompt_length, cfg.buckets),
        response_layout=collate.layout_for(cfg.max_response_length, cfg.buckets),
        pad_id=tok.pad_id())


def sft_batches(examples, preset: Preset, tok, *, seed: int | None = None):
    """Exactly ``max_steps`` fixed-shape SFT batches (a deterministic stream) and the collator."""
    cfg = preset.sft
    collator = sft_collator(preset, tok)
    stream = collate.batches(epochs(examples, cfg.seed if seed is None else seed, "sft"),
                             cfg.batch_size, collator)
    return take(stream, cfg.max_steps), collator


def dpo_batches(examples, preset: Preset, tok, *, seed: int | None = None):
    cfg = preset.dpo
    collator = dpo_collator(preset, tok)
    stream = epochs(examples, cfg.seed if seed is None else seed, "dpo")
    if cfg.buckets > 1:  # rows of similar length together: most batches fit a small bucket
        stream = collate.length_sorted(stream, 8 * cfg.batch_size,
                                       lambda t: (len(t[0]), max(len(t[1]), len(t[2]))))
    stream = collate.batches(stream, cfg.batch_size, collator)
    return take(stream, cfg.max_steps), collator


def grpo_batches(rows, preset: Preset, tok, *, seed: int | None = None):
    cfg = preset.grpo
    # The sampler adds BOS: leave it one token of room.
    collator = collate.GRPOCollator(tokenizer=tok, max_prompt_length=cfg.max_prompt_length - 1)
    stream = collate.batches(epochs(rows, cfg.seed if seed is None else seed, "grpo"),
                             cfg.batch_size, collator)
    return take(stream, cfg.max_steps), collator
