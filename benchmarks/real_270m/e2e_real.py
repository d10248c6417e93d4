"""gemma3-270m end to end on a CPU: data -> SFT -> DPO -> GRPO -> evaluation -> export.

Run from the repository root, by hand: ``python -m benchmarks.real_270m.e2e_real`` runs the preset
``gemma3-270m`` at its own lengths and batch sizes (prompts of 256 tokens, completions of
512, 1000 / 600 / 800 steps: far too long for a CPU; ``--steps 2`` runs two steps of each
stage at those lengths), with random weights written here in Hugging Face layout and the
tiny tokenizer padded to Gemma's 262144 pieces (:mod:`reasonkit.testing`): no download.
The data is the synthetic tasks (the preset's GSM8K source needs the network).
``--quick`` uses the lengths of ``tests/test_e2e_real.py`` instead (:data:`SHORT`), which
imports this file and runs the same :func:`pipeline`.

Prints each stage's wall and CPU seconds and the peak RSS, and writes them to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import random
import tempfile
import time
import zlib
from typing import Any

import jax.numpy as jnp
import numpy as np

from benchmarks.common import clock, peak_rss_gib, write_json
from reasonkit import evaluate, masks, models, notebook, testing, train
from reasonkit.config import Preset
from reasonkit.presets import get_preset
from reasonkit.runtime import runs

PRESET = "gemma3-270m"

# The test's lengths: the prompt template alone is 31 tokens, + BOS (template.format_prompt),
# so prompts of 48 hold a short question; completions of 16 hold a one-line sum in the tags.
# float32: XLA:CPU compiles the bfloat16 programs 2.5 times slower (SFT's: 120 s against 48 s,
# 2 cores, remat on in both); remat stays on, as in the preset (off, 25 s).
SHORT: dict[str, Any] = {
    "model.dtype": "float32",
    "data.domain_weights": {"math": 1.0}, "data.eval_per_domain": 4, "data.train_size": 8,
    "sft.max_steps": 2, "sft.batch_size": 2, "sft.max_prompt_length": 48, "sft.max_target_length": 64,
    "sft.checkpoint_every": 2,
    # one step each: no warm-up, whose first step has a learning rate of 0 (train.schedule)
    "dpo.warmup_ratio": 0.0, "grpo.warmup_ratio": 0.0,
    "dpo.max_steps": 1, "dpo.batch_size": 1, "dpo.max_prompt_length": 48, "dpo.max_response_length": 16,
    "dpo.checkpoint_every": 1,
    "grpo.max_steps": 1, "grpo.batch_size": 1, "grpo.num_generations": 2, "grpo.max_prompt_length": 48,
    "grpo.max_generation_length": 16, "grpo.checkpoint_every": 1,
    "eval.batch_size": 4, "eval.max_prompt_length": 48, "eval.max_generation_length": 8,
    "eval.num_samples": 1, "eval.sampled_subset": 0, "eval.gsm8k_test": None,
}


def write_sums(path: str | os.PathLike, n: int = 48, seed: int = 0) -> pathlib.Path:
    """``n`` one-digit sums as a JSONL source (the schema's layout): short prompts and answers."""
    rng = random.Random(seed)
    pairs = rng.sample([(a, b) for a in range(1, 10) for b in range(1, 10)], n)
    path = pathlib.Path(path)
    path.write_text("".join(json.dumps({"prompt": f"What is {a} + {b}?", "reasoning": f"{a}+{b}={a + b}",
                                        "answer": str(a + b), "domain": "math"}) + "\n"
                            for a, b in pairs))
    return path


def prepare(root: str | os.PathLike, *, quick: bool, steps: int | None = None,
            overrides: dict[str, Any] | None = None) -> Preset:
    """Write the random gemma3-270m source (and, ``quick``, the sums) under ``root``; the preset."""
    root = pathlib.Path(root)
    cfg = get_preset(PRESET).model
    source = root / "source"
    if not (source / "model.safetensors").is_file():
        testing.write_random_source(source, cfg)
    changes: dict[str, Any] = {"model.source": str(source), "eval.gsm8k_test": None}
    if quick:
        changes |= SHORT | {"data.sources": (f"jsonl:{write_sums(root / 'sums.jsonl')}",)}
    else:
        changes["data.sources"] = ("tasks",)
    if steps is not None:
        changes |= {f"{s}.max_steps": steps for s in ("sft", "dpo", "grpo")}
    return get_preset(PRESET, **changes, **(overrides or {}))


TOKENS = [[2, 17, 40, 5, 99, 7, 0, 0], [2, 300, 12, 8, 9, 11, 13, 21]]  # logits compared on these


def forward(model, tokens=TOKENS) -> np.ndarray:
    """float32 logits ``[B, S, V]`` of ``tokens`` (0: padding)."""
    tokens = jnp.asarray(tokens)
    mask = tokens != 0
    logits, _ = model(tokens, masks.positions_from_mask(mask), None, masks.causal_mask(mask))
    return np.asarray(logits, np.float32)


def distinct(prompts: Any, completions: Any, **kwargs: Any) -> list[float]:
    """A reward in [0, 1) that differs between different completions (a checksum of the text).

    A random model's completions all score 0 on the real rewards, and a group whose rewards
    tie has no advantage: GRPO's step would change nothing. Added to the real rewards.
    """
    return [zlib.crc32(str(c).encode()) / 2**32 for c in completions]


def pipeline(preset: Preset, root: str | os.PathLike, stages=("grpo",), *,
             reward_fns=None) -> dict[str, Any]:
    """02 -> 03 -> 04 -> 05 (and its export) -> 06, as the notebooks call them, in ``<root>/runs/e2e``.

    Returns the run, the splits, each stage's summary, LoRA adapters (numpy) and the base
    tensors that differ from the source's (none, if the base stayed frozen), the
    evaluation's results, the export's paths, the GRPO policy's and the reloaded merged
    export's logits on :data:`TOKENS`, and ``times``: ``{stage: (wall s, CPU s)}``. Each
    stage's model is freed before the next loads. ``stages``: the models 06 evaluates
    (``"base"``, ``"sft"``, ...: each costs a load and two compilations); ``reward_fns``:
    GRPO's (default: the preset's ``grpo.rewards``, :func:`reasonkit.rewards.from_config`).
    """
    out: dict[str, Any] = {"times": {}, "lora": {}, "base_differences": {}}

    def timed(name, fn, *args, **kwargs):
        wall, cpu = clock()
        value = fn(*args, **kwargs)
        wall2, cpu2 = clock()
        out["times"][name] = (round(wall2 - wall, 1), round(cpu2 - cpu, 1))
        print(f"== {name}: {wall2 - wall:.1f} s wall, {cpu2 - cpu:.1f} s CPU, "
              f"peak RSS {peak_rss_gib():.2f} GiB", flush=True)
        return value

    run = out["run"] = runs.RunDir.create("e2e", root=pathlib.Path(root) / "runs")
    source = models.resolve_source(preset.model)
    tok = models.load_tokenizer(source / "tokenizer.model", vocab_size=preset.model.vocab_size)
    out["tokenizer"] = tok
    out["splits"], out["report"] = timed("data", runs.build_data, run, preset,
                                         lambda s: len(tok.EncodeAsIds(s)))
    for stage in ("sft", "dpo", "grpo"):
        if stage == "grpo" and reward_fns is not None:
            result = timed(stage, train.train_grpo, preset, run, reward_fns=reward_fns)
        else:
            result = timed(stage, train.train_or_load, preset, run, stage)
        out[stage] = result.summary()
        out["lora"][stage] = models.lora_params(result.policy)
        out["base_differences"][stage] = testing.base_differences(result.policy, preset.model, source)
        if stage == "grpo":  # 05_grpo exports its policy
            out["logits"] = forward(result.policy)
            out["export"] = timed("export", train.export, result, preset, run)
            out["export_logits"] = forward(models.load_model(out["export"]["merged"], preset.model))
        del result
        models.free()
    out["eval"], seconds = timed("eval", evaluate.evaluate_run, preset, run, stages)
    evaluate.save_run(run, preset, out["eval"], seconds,
                      notebook.eval_tables(out["eval"], preset.eval.num_samples))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="the test's short lengths (SHORT)")
    parser.add_argument("--steps", type=int, help="steps of each training stage (default: the preset's)")
    parser.add_argument("--root", help="where the source and the run go (default: a temporary folder)")
    parser.add_argument("--all-stages", action="store_true",
                        help="evaluate base, SFT, DPO and GRPO (default: GRPO alone)")
    parser.add_argument("--out", type=pathlib.Path, help="write the timings here as JSON")
    parser.add_argument("--overrides", type=json.loads, default={},
                        help='more preset overrides as JSON, e.g. \'{"model.dtype": "float32"}\'')
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(args.root or tmp)
        wall, cpu = clock()
        preset = prepare(root, quick=args.quick, steps=args.steps, overrides=args.overrides)
        print(f"== source written: {time.perf_counter() - wall:.1f} s", flush=True)
        result = pipeline(preset, root, ("base", "sft", "dpo", "grpo") if args.all_stages
                          else ("grpo",))
        wall2, cpu2 = clock()
        losses = train.read_metrics(result["run"], "sft").get("train/loss", ([], []))[1]
        summary = {"preset": PRESET, "quick": args.quick, "steps": args.steps,
                   "times": result["times"], "total": (round(wall2 - wall, 1), round(cpu2 - cpu, 1)),
                   "peak_rss_gib": round(peak_rss_gib(), 2), "sft_losses": losses,
                   "export_max_logit_difference": float(np.abs(result["logits"]
                                                               - result["export_logits"]).max()),
                   "base_differences": result["base_differences"],
                   "ln_vocab": math.log(preset.model.vocab_size),
                   "eval": {s: r["summary"]["overall"] for s, r in result["eval"].items()}}
    print(json.dumps(summary, indent=1))
    if args.out:
        write_json(args.out, summary)


if __name__ == "__main__":
    main()
