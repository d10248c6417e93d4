"""GRPO's update and reference forward at a preset's shapes: each row whole, or each prompt once per group.

Run from the repository root::

    python -m benchmarks.speed.grpo_shared --preset tiny                 # 2-core CPU: about 1 minute
    python -m benchmarks.speed.grpo_shared --preset gemma3-1b --deadline 400 --out grpo_shared.json

One process, one device: the preset's model (random weights in its dtype, its LoRA with
random adapters, remat as the preset has it) and a GRPO batch of its shapes:
``grpo.batch_size`` prompts of ``grpo.max_prompt_length`` (left-padded, lengths drawn from
half to all of it), each repeated ``grpo.num_generations`` times as Tunix's learner
repeats them, and a different answer per row (length drawn up to
``grpo.max_generation_length``, EOS, then padding). Two programs each for ``group`` = 1
(Tunix's way: every row whole) and ``group`` = G
(:func:`reasonkit.tunix_patches._logprobs.shared_prompt_hidden`):

- **update**: the sum of the answers' log-probabilities and its gradient in the LoRA
  parameters, through ``logprobs.grpo_compute_per_token_logps`` (what GRPO's policy loss
  calls, with the entropy it logs);
- **reference**: the same forward without a gradient (what the reference's log-probs run).

The programs compile concurrently (``--deadline`` leaves out those still compiling) and
alternate step by step. Reports seconds per call, the speed-up, the largest difference of
the log-probabilities on the answers' tokens, and the compiler's temporary bytes.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from benchmarks.common import compile_concurrently, finish
from reasonkit import models
from reasonkit.config import Preset
from reasonkit.presets import get_preset
from reasonkit.tunix_patches import logprobs


def grpo_batch(prompts: int, group: int, prompt_len: int, answer_len: int, vocab: int,
               seed: int = 0) -> tuple[jax.Array, jax.Array]:
    """Prompts [prompts x group, P] (left-padded, each repeated ``group`` times) and answers
    [prompts x group, C] (tokens, EOS = 1, then padding 0), as Tunix's learner makes them."""
    rng = np.random.default_rng(seed)
    prompt = np.zeros((prompts, prompt_len), np.int32)
    for i, n in enumerate(rng.integers(prompt_len // 2, prompt_len + 1, prompts)):
        prompt[i, prompt_len - n:] = rng.integers(3, vocab, n)
    answer = np.zeros((prompts * group, answer_len), np.int32)
    for r, n in enumerate(rng.integers(1, answer_len, prompts * group)):
        answer[r, :n] = rng.integers(3, vocab, n)
        answer[r, n] = 1
    return jnp.asarray(np.repeat(prompt, group, axis=0)), jnp.asarray(answer)


def programs(graphdef, prompt, answer, group: int, temperature: float):
    """{name: jitted fn(lora, rest) -> (log-probs, anything to wait on)} for one ``group``."""
    kw = dict(pad_id=0, eos_id=1, temperature=temperature, group=group)
    real = (answer != 0).astype(jnp.float32)

    def update(lora, rest):
        def loss(lora):
            state = nnx.merge_state(lora, rest)
            logp, entropy = logprobs.grpo_compute_per_token_logps(
                graphdef, state, prompt, answer, stop_gradient=False, return_logits=True, **kw)
            return jnp.sum(logp * real) + 0.0 * jnp.sum(entropy), logp
        (_, logp), grads = jax.value_and_grad(loss, has_aux=True)(lora)
        return logp, grads

    def reference(lora, rest):
        logp = logprobs.grpo_compute_per_token_logps(graphdef, nnx.merge_state(lora, rest),
                                                     prompt, answer, **kw)
        return logp, logp

    return {"update": jax.jit(update), "reference": jax.jit(reference)}


def measure(preset: str | Preset, steps: int, deadline: float | None = None, log=print) -> dict[str, Any]:
    """Median seconds per call of the four programs, their log-probabilities compared."""
    preset = get_preset(preset) if isinstance(preset, str) else preset
    preset_name = preset.name
    cfg = preset.grpo
    g = cfg.num_generations
    model = models.apply_lora(models.new_model(preset.model, seed=0), preset.lora, seed=0)
    for i, (_, v) in enumerate(nnx.to_flat_state(nnx.state(model, nnx.LoRAParam))):
        v.value = (0.01 * jax.random.normal(jax.random.key(i), v.value.shape)).astype(v.value.dtype)
    graphdef, *state = nnx.split(model, nnx.LoRAParam, ...)  # adapters that change the numbers
    prompt, answer = grpo_batch(cfg.batch_size, g, cfg.max_prompt_length, cfg.max_generation_length,
                                preset.model.vocab_size)
    real = np.asarray(answer != 0)
    lowered = {}
    for group in (1, g):
        for part, fn in programs(graphdef, prompt, answer, group, cfg.temperature).items():
            lowered[(part, group)] = fn.lower(*state)
    log(f"{preset_name}: {prompt.shape[0]} rows = {cfg.batch_size} prompts x {g}, prompt "
        f"{prompt.shape[1]}, answer {answer.shape[1]}, {preset.model.dtype}, remat "
        f"{preset.model.remat}; {len(lowered)} programs traced")
    compiled, skipped = compile_concurrently(
        lowered, None if deadline is None else max(0.0, deadline - time.perf_counter()))
    skipped = [f"{part} group {group}" for part, group in skipped]
    runs: dict[tuple[str, int], dict[str, Any]] = {}
    for key, (fn, seconds) in compiled.items():
        logp, _ = jax.block_until_ready(fn(*state))
        mem = fn.memory_analysis()
        runs[key] = {"fn": fn, "times": [], "logp": np.asarray(logp, np.float32), "compile_s": seconds,
                     "temp_bytes": getattr(mem, "temp_size_in_bytes", None)}
    for _ in range(steps):
        for r in runs.values():
            t = time.perf_counter()
            jax.block_until_ready(r["fn"](*state))
            r["times"].append(time.perf_counter() - t)
    device = jax.devices()[0]
    out: dict[str, Any] = {"preset": preset_name, "rows": int(prompt.shape[0]), "group": g,
                           "prompt": int(prompt.shape[1]), "answer": int(answer.shape[1]),
                           "dtype": preset.model.dtype, "remat": preset.model.remat,
                           "steps": steps, "device_kind": device.device_kind,
                           "jax": jax.__version__, "python": platform.python_version(),
                           "not_compiled": skipped, "parts": {}}
    for part in ("update", "reference"):
        row: dict[str, Any] = {}
        for group in (1, g):
            r = runs.get((part, group))
            if r is not None:
                row[f"group_{group}"] = {"seconds": statistics.median(r["times"]),
                                         "compile_s": round(r["compile_s"], 1),
                                         "temp_bytes": r["temp_bytes"]}
        if (part, 1) in runs and (part, g) in runs:
            row["speedup"] = row["group_1"]["seconds"] / row[f"group_{g}"]["seconds"]
            diff = np.abs(runs[(part, 1)]["logp"] - runs[(part, g)]["logp"])
            row["max_logp_diff"] = float(np.max(np.where(real, diff, 0.0)))
        out["parts"][part] = row
    return out


def table(r: dict[str, Any]) -> str:
    g = r["group"]
    lines = [f"{r['preset']}: {r['rows']} rows ({r['rows'] // g} prompts x {g}), prompt {r['prompt']} + "
             f"answer {r['answer']}, {r['dtype']}, remat {r['remat']}, {r['device_kind']}, jax {r['jax']}",
             "| program | every row whole, s | each prompt once per group, s | speed-up | "
             "max log-prob difference | temp GiB (whole / shared) |", "| --- | --- | --- | --- | --- | --- |"]
    for part, row in r["parts"].items():
        one, shared = row.get("group_1"), row.get(f"group_{g}")
        cell = lambda x: f"{x['seconds']:.4f}" if x else "not compiled"  # noqa: E731
        temp = lambda x: f"{x['temp_bytes'] / 2**30:.2f}" if x and x["temp_bytes"] is not None else "-"  # noqa: E731
        speed = f"{row['speedup']:.2f}x" if "speedup" in row else "-"
        diff = f"{row['max_logp_diff']:.2g}" if "max_logp_diff" in row else "-"
        lines.append(f"| {part} | {cell(one)} | {cell(shared)} | {speed} | {diff} | "
                     f"{temp(one)} / {temp(shared)} |")
    return "\n".join(lines)


def main(argv=None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--deadline", type=float, default=None,
                    help="seconds from the start: programs still compiling 30 s before it are left out")
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    args = ap.parse_args(argv)
    start = time.perf_counter()
    r = measure(args.preset, args.steps, deadline=args.deadline and start + args.deadline - 30,
                log=lambda s: print(s, flush=True))
    finish(r, table(r), args.out)
    return r


if __name__ == "__main__":
    main()
