"""Tiny fakes shared by the tests and the benchmarks: no download, seconds on a CPU.

>>> res = fake_results(base=(0.0, 0.1), sft=(0.9, 0.4))
>>> [res[s]["summary"]["overall"]["accuracy"] for s in ("base", "sft")]
[0.1, 0.4]
"""

from __future__ import annotations

import os
from typing import Any

import jax.numpy as jnp
import numpy as np

from reasonkit import evaluate, masks, models, runs
from reasonkit.config import Preset, get_preset

# The tiny preset cut to a few steps of each stage on a few records: every stage trains,
# checkpoints, resumes and hands off as in a full run, in seconds.
SMALL = {
    "sft.max_steps": 4, "sft.checkpoint_every": 2, "sft.batch_size": 4,
    "dpo.max_steps": 3, "dpo.checkpoint_every": 2, "dpo.batch_size": 2,
    "grpo.max_steps": 2, "grpo.checkpoint_every": 1, "grpo.batch_size": 2,
    "grpo.max_generation_length": 24,
    "data.num_records": 40, "data.eval_per_domain": 2, "data.train_size": 60,
}


def small_preset(**overrides: Any) -> Preset:
    """The tiny preset with :data:`SMALL`'s overrides, then ``overrides``."""
    return get_preset("tiny", **{**SMALL, **overrides})


def make_run(root: str | os.PathLike, name: str, preset: Preset) -> runs.RunDir:
    """A run directory whose data stage is done (the preset's sources: for tiny, synthetic tasks)."""
    run = runs.RunDir.create(name, root=root)
    tok = models.load_tokenizer(models.resolve_source(preset.model) / "tokenizer.model")
    runs.build_data(run, preset, models.token_counter(tok))
    return run


def fake_results(**stages: tuple[float, float]) -> dict[str, Any]:
    """Stage results as :func:`reasonkit.evaluate.evaluate_run` gives them, for 100 prompts
    per stage (math and general alternating): ``stage=(fmt, acc)`` answers a fraction
    ``acc`` right and ``fmt`` well formatted (the rest readable, without a reasoning block)."""
    out = {}
    for stage, (fmt, acc) in stages.items():
        rows = []
        for i in range(100):
            ans = "12" if i < 100 * acc else "13"
            text = (f"<reasoning>r</reasoning><answer>{ans}</answer>" if i < 100 * fmt
                    else f"<answer>{ans}</answer>")  # readable answer, no reasoning block
            rec = {"domain": ["math", "general"][i % 2], "answer": "12", "prompt": f"q{i}", "id": i}
            rows += evaluate.score_stage([rec], [text], [[text]])
        out[stage] = {"summary": evaluate.summarize(rows), "rows": rows}
    return out


def forward(model, tokens) -> np.ndarray:
    """Logits ``[B, S, V]`` of a Gemma model on ``tokens`` ``[B, S]`` (id 0 is padding)."""
    tokens = jnp.asarray(tokens)
    mask = tokens != 0  # [B, S]
    logits, _ = model(tokens, masks.positions_from_mask(mask), None, masks.causal_mask(mask))
    return np.asarray(logits)
