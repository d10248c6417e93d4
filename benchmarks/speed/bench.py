"""Padding, packing, compiles and throughput on a GSM8K-like length distribution.

Run from the repository root (``python -m benchmarks.speed.bench``; ``--quick`` for a smoke
run of about a minute). Everything is measured in one process, on one machine, with
the tiny preset's model architecture and weights:

  (a) padding efficiency (real tokens / computed tokens): static padding, buckets, packing
  (b) SFT real tokens/s: reasonkit's packed path vs plain Tunix PeftTrainer fed batches
      padded to the maximum length (the way Tunix's examples build them)
  (c) XLA compilations per stage (reasonkit's SFT / DPO / GRPO on the tiny preset, and
      evaluation), in total and after the first step
  (d) the SFT step's FLOP/s against a matmul benchmark run in the same process
  (e) GRPO-style rollout: generated tokens/s of Tunix's sampler
  (f) the old path against the new, alternating step by step in one process: the tiny
      GRPO step (Tunix 0.1.7's attention and padding; + length buckets; + reasonkit's
      chunked attention, the presets' default) from a tiny run's DPO adapters, and the
      SFT step (jitted forward + LoRA gradient, rows of ``--max-length``) with Tunix's
      attention and the chunked one, as a fraction of the same run's matmul FLOP/s, at
      the tiny width and wider (``--widths``)

Timings on a shared machine are noisy: compare the ratios of one run, not runs.
Prints a table and writes ``benchmarks/results/bench.json``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import platform
import shutil
import statistics
import tempfile
import time
from typing import Any, Iterable, Iterator

import numpy as np

from benchmarks.common import result_path, rotated, write_json
from benchmarks.speed import attention as attention_bench  # its SFT step and FLOPs
from benchmarks.speed.attention import sft_step_flops
from reasonkit import collate, data, models, testing, train
from reasonkit.presets import get_preset
from reasonkit.runtime import compiles, hardware, runs
from reasonkit.tunix_patches import cpu_memory

PAD = 0  # the tiny tokenizer's pad id; synthetic ids start above the special tokens
FIRST_ID = 3


# --- data -------------------------------------------------------------------------------


def gsm8k_like_lengths(n: int, seed: int = 0, max_length: int = 512) -> list[tuple[int, int]]:
    """(prompt, completion) token lengths: lognormal around 60 and 120 tokens, like GSM8K
    under a Gemma tokenizer with a reasoning template (question ~60, worked answer ~120)."""
    rng = np.random.default_rng(seed)
    p = np.clip(rng.lognormal(np.log(60), 0.45, n), 8, max_length // 2).astype(int)
    c = np.clip(rng.lognormal(np.log(120), 0.55, n), 4, max_length).astype(int)
    return [(int(a), int(b)) for a, b in zip(p, c, strict=True)]


def synth_pairs(lengths, vocab: int, seed: int = 0) -> list[tuple[list[int], list[int]]]:
    rng = np.random.default_rng(seed + 1)
    return [(rng.integers(FIRST_ID, vocab, p).tolist(), rng.integers(FIRST_ID, vocab, c).tolist())
            for p, c in lengths]


def sft_collator(kind: str, max_length: int, buckets: int = 4) -> collate.SFTCollator:
    layout = {"static": lambda: collate.StaticLayout(max_length=max_length),
              "buckets": lambda: collate.BucketLayout(
                  lengths=collate.bucket_lengths(max_length, buckets)),
              "packed": lambda: collate.PackedLayout(max_length=max_length)}[kind]()
    return collate.SFTCollator(layout=layout, pad_id=PAD, bos_id=2)


def sft_stream(kind: str, pairs, batch_size: int, max_length: int):
    """Batches of one layout (buckets: length-sorted in windows of 8 batches)."""
    c = sft_collator(kind, max_length)
    items: Iterable[Any] = pairs
    if kind == "buckets":
        items = collate.length_sorted(pairs, 8 * batch_size, lambda t: len(t[0]) + len(t[1]))
    return collate.batches(items, batch_size, c), c


def padding_table(pairs, batch_size: int, max_length: int) -> dict[str, Any]:
    """(a): efficiency and distinct batch shapes of each layout over the same examples."""
    out = {}
    for kind in ("static", "buckets", "packed"):
        stream, c = sft_stream(kind, pairs, batch_size, max_length)
        shapes = {b["input_tokens"].shape for b in stream}
        out[kind] = {"padding_efficiency": round(c.stats.padding_efficiency, 4),
                     "shapes": len(shapes), "examples": c.stats.kept,
                     "dropped": c.stats.dropped_too_long + c.stats.dropped_remainder}
    return out


# --- (b) + (d): SFT throughput and FLOP/s ----------------------------------------------


def tunix_example_input_fn(pad_id: int):
    """The model input function of Tunix's SFT examples: masks from the padding."""
    from tunix.sft import utils

    def fn(x):
        pad_mask = x["input_tokens"] != pad_id
        return {"input_tokens": x["input_tokens"], "input_mask": x["input_mask"],
                "positions": utils.build_positions_from_mask(pad_mask),
                "attention_mask": utils.make_causal_attn_mask(pad_mask)}
    return fn


class Clock:
    """Wraps a batch stream; records when the trainer asks for each batch."""

    def __init__(self, stream: Iterable[Any]):
        self.stream, self.times = stream, []

    def __iter__(self) -> Iterator[Any]:
        for item in self.stream:
            self.times.append(time.perf_counter())
            yield item


def timed_sft(path: str, batches: list[dict], model_cfg, lora_cfg, model_dir, warmup: int) -> dict:
    """One PeftTrainer over ``batches``; seconds per step after ``warmup`` steps."""
    import jax
    import optax
    import tunix
    from flax import nnx

    base = models.load_model(model_dir, model_cfg)
    policy = models.apply_lora(base, lora_cfg, seed=0)
    fn = train.gen_model_input_fn(PAD) if path == "packed" else tunix_example_input_fn(PAD)
    trainer = tunix.PeftTrainer(policy, optax.adamw(1e-4), tunix.TrainingConfig(
        eval_every_n_steps=10**9, max_steps=len(batches))).with_gen_model_input_fn(fn)
    clock = Clock(batches)
    with compiles.CompileCounter() as counter:
        trainer.train(counter.watch(clock, warmup_steps=warmup))
        jax.block_until_ready(nnx.state(policy, nnx.LoRAParam))
    end = time.perf_counter()
    steps = len(batches) - warmup
    seconds = (end - clock.times[warmup]) / steps
    real = [int((b["segment_ids"] > 0).sum()) if "segment_ids" in b
            else int((b["input_tokens"] != PAD).sum()) for b in batches[warmup:]]
    trainer.close() if hasattr(trainer, "close") else None
    return {"seconds_per_step": seconds, "real_tokens_per_step": float(np.mean(real)),
            "real_tokens_per_s": float(np.mean(real)) / seconds,
            "compiles": counter.summary()}


def sft_throughput(pairs, preset, batch_size: int, max_length: int, steps: int, warmup: int,
                   rounds: int) -> dict[str, Any]:
    model_dir = models.resolve_source(preset.model)
    data = {}
    for path, kind in (("naive", "static"), ("packed", "packed")):
        stream, _ = sft_stream(kind, pairs, batch_size, max_length)
        data[path] = list(train.take(stream, warmup + steps))
        assert len(data[path]) == warmup + steps, "not enough examples for the steps asked"
    runs: dict[str, list[dict]] = {"naive": [], "packed": []}
    matmul = [hardware.matmul_benchmark(n=1024, inner=4, repeats=3)["flops_per_s"]]
    for _ in range(rounds):  # alternate the paths, so a load spike hits both alike
        for path in ("naive", "packed"):
            runs[path].append(timed_sft(path, data[path], preset.model, preset.lora, model_dir,
                                        warmup))
        matmul.append(hardware.matmul_benchmark(n=1024, inner=4, repeats=3)["flops_per_s"])
    flops = sft_step_flops(preset.model, batch_size, max_length)
    out: dict[str, Any] = {"batch": batch_size, "length": max_length, "steps": steps,
                           "rounds": rounds, "step_flops": flops,
                           "matmul_flops_per_s": max(matmul), "matmul_samples": matmul}
    for path, rs in runs.items():
        best = min(rs, key=lambda r: r["seconds_per_step"])
        out[path] = {**best, "all_seconds_per_step": [r["seconds_per_step"] for r in rs],
                     "flops_per_s": flops / best["seconds_per_step"],
                     "fraction_of_matmul": flops / best["seconds_per_step"] / max(matmul)}
    out["speedup_real_tokens_per_s"] = (out["packed"]["real_tokens_per_s"]
                                        / out["naive"]["real_tokens_per_s"])
    return out


# --- (c): compiles per stage of reasonkit's own pipeline --------------------------------


def stage_compiles(quick: bool) -> dict[str, Any]:
    """Run reasonkit's SFT (packed), DPO (2 buckets), GRPO and a bucketed evaluation."""
    from reasonkit import evaluate, template

    steps = {"sft": 4, "dpo": 4, "grpo": 3} if quick else {"sft": 8, "dpo": 8, "grpo": 4}
    preset = get_preset("tiny", **{
        "sft.max_steps": steps["sft"], "sft.batch_size": 4, "sft.packing": True,
        "sft.checkpoint_every": steps["sft"],
        "dpo.max_steps": steps["dpo"], "dpo.batch_size": 2, "dpo.buckets": 2,
        "dpo.checkpoint_every": steps["dpo"],
        "grpo.max_steps": steps["grpo"], "grpo.batch_size": 2, "grpo.checkpoint_every": steps["grpo"],
        "grpo.max_generation_length": 24, "data.num_records": 40, "data.eval_per_domain": 2,
        "data.train_size": 60, "eval.buckets": 2, "eval.batch_size": 4,
        "eval.max_generation_length": 16})
    run = testing.make_run(pathlib.Path(tempfile.mkdtemp()), "bench", preset)
    splits, _ = data.read_splits(run.stage("data"))
    tok = models.load_tokenizer(models.resolve_source(preset.model) / "tokenizer.model")
    out: dict[str, Any] = {}
    result = None
    for stage in ("sft", "dpo", "grpo"):
        result = getattr(train, f"train_{stage}")(preset, run)
        out[stage] = {"steps": result.steps, **result.stats["compiles"]}
    sampler = evaluate.make_sampler(result.policy, tok, preset.model, preset.eval)
    prompts = [template.format_prompt(r["prompt"]) for r in splits.eval][:16]
    stop = models.stop_token_ids(tok)
    with compiles.CompileCounter() as first:
        evaluate.generate(sampler, prompts, preset.eval, stop)
    with compiles.CompileCounter() as again:
        evaluate.generate(sampler, prompts, preset.eval, stop)
    out["eval"] = {"steps": 2, "total": first.count + again.count, "after_warmup": again.count,
                   "names_after_warmup": sorted(set(again.names)),
                   "seconds": round(first.seconds + again.seconds, 2)}
    return out


# --- (e): rollout -------------------------------------------------------------------------


def rollout_throughput(preset, lengths, batch: int, max_new: int, vocab: int) -> dict[str, Any]:
    """Generated tokens/s of Tunix's sampler on GSM8K-like prompt lengths (sampled, as GRPO)."""
    from reasonkit import evaluate

    model_dir = models.resolve_source(preset.model)
    tok = models.load_tokenizer(model_dir / "tokenizer.model")
    policy = models.apply_lora(models.load_model(model_dir, preset.model), preset.lora, seed=0)
    rng = np.random.default_rng(3)
    prompts = [tok.DecodeIds(rng.integers(FIRST_ID + 5, vocab, min(p, 120)).tolist())
               for p, _ in lengths[:batch]]
    cfg = preset.eval.__class__(batch_size=batch, max_prompt_length=256,
                                max_generation_length=max_new, temperature=0.9, top_p=1.0)
    sampler = evaluate.make_sampler(policy, tok, preset.model, cfg)
    stop = models.stop_token_ids(tok)

    def once(seed):
        t = time.perf_counter()
        out = sampler(prompts, max_generation_steps=max_new, max_prompt_length=256,
                      eos_tokens=list(stop), temperature=0.9, top_p=1.0, top_k=50, seed=seed)
        return time.perf_counter() - t, out

    with compiles.CompileCounter() as warm:
        once(0)
    with compiles.CompileCounter() as again:
        seconds, out = once(1)
    with compiles.CompileCounter() as third:  # steady state: nothing may compile here
        once(2)
    generated = int(sum(len(t) for t in out.tokens))
    return {"batch": batch, "max_new_tokens": max_new, "seconds": seconds,
            "generated_tokens": generated, "generated_tokens_per_s": generated / seconds,
            "decode_slots_per_s": batch * max_new / seconds,
            "compiles_first_call": warm.count, "compiles_after_warmup": again.count,
            "names_after_warmup": again.names, "compiles_third_call": third.count}


# --- (f): the old path against the new ------------------------------------------------------

# GRPO paths, each a set of tiny-preset overrides; "new" is the preset as it ships.
GRPO_PATHS = {"old": {"model.attention": "tunix", "grpo.length_buckets": [[], []]},
              "buckets": {"model.attention": "tunix"},
              "new": {}}


def grpo_source(root: pathlib.Path, from_run: str | None, quick: bool = False) -> runs.RunDir:
    """A tiny run under ``root`` with finished data, SFT and DPO stages: copied from
    ``from_run`` (e.g. runs/demo), or trained here (about 4 minutes on 2 cores; ``quick``:
    a few steps each, a smoke run)."""
    if from_run is not None:
        source = runs.RunDir(pathlib.Path(from_run))
        for stage in ("data", "sft", "dpo"):
            shutil.copytree(source.require(stage), root / "source" / stage)
        return runs.RunDir(root / "source")
    preset = get_preset("tiny", **({"sft.max_steps": 8, "dpo.max_steps": 2} if quick else {}))
    run = testing.make_run(root, "source", preset)
    train.train_sft(preset, run)
    train.train_dpo(preset, run)
    return run


def grpo_old_new(source: runs.RunDir, steps: int, warmup: int) -> dict[str, Any]:
    """Seconds per GRPO step of each of :data:`GRPO_PATHS`, alternating step by step (in
    :func:`~benchmarks.common.rotated` order: each path takes each place in turn).

    Each path is its own learner (``train.build_stage``) on a branch of ``source``,
    starting from its DPO adapters; all take the same batches in the same order. A step
    is one ``learner.train([batch])`` call (the cluster's closing is deferred to the end).
    Steps where any path compiled (warm-up, a new length bucket) are left out of every
    path's mean, so the means are over the same batches.
    """
    import jax
    from flax import nnx

    stages = {}
    for path, overrides in GRPO_PATHS.items():
        preset = get_preset("tiny", **overrides)
        stage = train.build_stage(preset, "grpo", runs.branch(source, f"grpo-{path}"),
                                  started="dpo")
        close, stage.cluster.close = stage.cluster.close, lambda: None
        stages[path] = (stage, close)
    preset = get_preset("tiny")
    tok = stages["new"][0].tokenizer
    rows = train.grpo_records(data.read_splits(source.require("data"))[0].grpo)
    batches = list(train.take(train.grpo_batches(rows, preset, tok)[0], warmup + steps))
    seconds: dict[str, list[float]] = {path: [] for path in stages}
    compiled = [0] * len(batches)
    for i, batch in enumerate(batches):
        for path in rotated(stages, i):
            stage = stages[path][0]
            with stage.mesh, compiles.CompileCounter() as counter:
                t0 = time.perf_counter()
                stage.learner.train([batch])
                jax.block_until_ready(nnx.state(stage.policy, nnx.LoRAParam))
                seconds[path].append(time.perf_counter() - t0)
            compiled[i] += counter.count
        print(f"grpo step {i}: " + ", ".join(f"{p} {s[-1]:.2f} s" for p, s in seconds.items())
              + (f" ({compiled[i]} compiles)" if compiled[i] else ""), flush=True)
    for _, close in stages.values():
        close()
    kept = [i for i in range(warmup, len(batches)) if not compiled[i]]
    if not kept:
        raise RuntimeError("grpo_old_new: every timed step compiled; ask for more --grpo-steps")
    out: dict[str, Any] = {"steps": len(batches), "warmup": warmup, "kept_steps": len(kept),
                           "paths": {path: GRPO_PATHS[path] for path in stages}}
    for path, ts in seconds.items():
        out[path] = {"seconds_per_step": statistics.mean(ts[i] for i in kept),
                     "median": statistics.median(ts[i] for i in kept),
                     "all_seconds": [round(t, 3) for t in ts]}
    for path in stages:
        out[f"speedup_{path}"] = out["old"]["seconds_per_step"] / out[path]["seconds_per_step"]
    return out


def sft_old_new(widths: list[int], batch: int, length: int, steps: int) -> dict[str, Any]:
    """SFT's jitted forward + LoRA gradient, Tunix's attention vs chunked, per model width.

    ``sft_step_flops`` (attention over all pairs, as Tunix computes it) is the work for
    both, so each fraction of the matmul rate is the work done per second.
    """
    tiny = get_preset("tiny")
    matmul = [hardware.matmul_benchmark(n=1024, inner=4, repeats=3)["flops_per_s"]]
    times = {}
    for d in widths:
        m = attention_bench.at_width(tiny.model, d)
        times[d] = (m, attention_bench.compare(m, tiny.lora, batch, length, steps, ("tunix", "chunked")))
        matmul.append(hardware.matmul_benchmark(n=1024, inner=4, repeats=3)["flops_per_s"])
    out: dict[str, Any] = {"batch": batch, "length": length, "steps": steps,
                           "matmul_flops_per_s": max(matmul), "matmul_samples": matmul}
    for d, (m, t) in times.items():  # against the best matmul rate of the whole run
        flops = sft_step_flops(m, batch, length)
        out[f"d{d}"] = {"step_flops": flops, "speedup": t["tunix"] / t["chunked"], **{
            impl: {"seconds_per_step": s, "fraction_of_matmul": flops / s / max(matmul)}
            for impl, s in t.items()}}
    return out


def old_new_table(r: dict[str, Any]) -> str:
    lines = ["| (f) old vs new, same run | old (Tunix 0.1.7) | new (reasonkit) | new / old speed |",
             "| --- | --- | --- | --- |"]
    g = r.get("grpo")
    if g:
        lines.append(f"| tiny GRPO step, s (mean of {g['kept_steps']} steps; + buckets only: "
                     f"{g['buckets']['seconds_per_step']:.2f} s, {g['speedup_buckets']:.2f}x) | "
                     f"{g['old']['seconds_per_step']:.2f} | {g['new']['seconds_per_step']:.2f} | "
                     f"**{g['speedup_new']:.2f}x** |")
    s = r.get("sft")
    if s:
        for key in (k for k in s if k.startswith("d")):
            v = s[key]
            lines.append(f"| SFT forward + LoRA grad, {key[1:]} wide, [{s['batch']}, {s['length']}]: "
                         f"fraction of matmul FLOP/s | {v['tunix']['fraction_of_matmul']:.3f} | "
                         f"{v['chunked']['fraction_of_matmul']:.3f} | **{v['speedup']:.2f}x** |")
    return "\n".join(lines)


# --- report -------------------------------------------------------------------------------


def machine(step_memory: str | None = None) -> dict[str, Any]:
    import jax

    d = jax.devices()[0]
    return {"platform": d.platform, "device_kind": d.device_kind, "devices": jax.device_count(),
            "cpu_count": os.cpu_count(), "processor": platform.processor() or platform.machine(),
            "load_average_1m": os.getloadavg()[0], "jax": jax.__version__,
            "python": platform.python_version(), "step_memory": step_memory}


def table(r: dict[str, Any]) -> str:
    a, s, c, e = r["padding"], r["sft"], r["compiles"], r["rollout"]
    lines = ["| measurement | naive static | buckets | packed (reasonkit) |",
             "| --- | --- | --- | --- |",
             "| (a) padding efficiency (real / computed tokens) | "
             + " | ".join(f"{a[k]['padding_efficiency']:.3f} ({a[k]['shapes']} shape"
                          f"{'s' if a[k]['shapes'] > 1 else ''})"
                          for k in ("static", "buckets", "packed")) + " |",
             f"| (b) SFT real tokens/s, [{s['batch']}, {s['length']}] batches | "
             f"{s['naive']['real_tokens_per_s']:.0f} | - | {s['packed']['real_tokens_per_s']:.0f} "
             f"(**{s['speedup_real_tokens_per_s']:.2f}x**) |",
             f"| (d) SFT step FLOP/s / matmul FLOP/s ({s['matmul_flops_per_s'] / 1e9:.1f} GFLOP/s) | "
             f"{s['naive']['fraction_of_matmul']:.2f} | - | {s['packed']['fraction_of_matmul']:.2f} |",
             f"| (c) SFT trainer compiles, total / after warm-up | "
             f"{s['naive']['compiles']['total']} / {s['naive']['compiles']['after_warmup']} | - | "
             f"{s['packed']['compiles']['total']} / {s['packed']['compiles']['after_warmup']} |",
             "", "| (c) reasonkit stage | steps | compiles | after warm-up |",
             "| --- | --- | --- | --- |"]
    for stage, v in c.items():
        lines.append(f"| {stage} | {v['steps']} | {v['total']} | {v['after_warmup']} |")
    lines += ["", f"(e) rollout: {e['generated_tokens_per_s']:.0f} generated tokens/s "
              f"({e['generated_tokens']} tokens, batch {e['batch']}, up to {e['max_new_tokens']} "
              f"new tokens, {e['decode_slots_per_s']:.0f} decode slots/s; "
              f"compiles after warm-up: {e['compiles_after_warmup']} on the second call "
              f"{e['names_after_warmup']}, {e['compiles_third_call']} on the third)"]
    if "old_new" in r:
        lines += ["", r["old_new"]["table"]]
    return "\n".join(lines)


def main(argv=None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke run: fewer steps, one round")
    ap.add_argument("--out", default=str(result_path("bench.json")))
    ap.add_argument("--skip-stages", action="store_true", help="skip (c)'s pipeline run")
    ap.add_argument("--max-length", type=int, default=1024,
                    help="SFT row length (the Gemma presets' max_target_length is 1024); the "
                         "batch keeps 4096 token slots per step")
    ap.add_argument("--old-new", choices=("yes", "no", "only"), default="yes",
                    help="(f): run it (yes), skip it (no), or run only it and merge it into --out")
    ap.add_argument("--from-run", help="(f): a tiny run with finished data / SFT / DPO stages "
                    "to start GRPO from (copied; default: train them, about 4 minutes)")
    ap.add_argument("--grpo-steps", type=int, default=24, help="(f): GRPO steps per path")
    ap.add_argument("--widths", default="128,512,1024", help="(f): SFT model widths")
    ap.add_argument("--step-memory", choices=("kept", "glibc"), default="kept",
                    help="kept: as the notebooks run (tunix_patches.cpu_memory.keep_step_memory); glibc: "
                         "its defaults, each step's temporaries mapped fresh")
    args = ap.parse_args(argv)
    # First, before JAX starts its backends; in a process where they started it says so.
    step_memory = (cpu_memory.keep_step_memory() if args.step_memory == "kept"
                   else "step memory: left to glibc (--step-memory glibc)")
    print(step_memory, flush=True)
    if args.max_length < 64:
        ap.error(f"--max-length {args.max_length}: must be at least 64")
    if args.old_new == "only":
        return old_new_only(args, step_memory)
    t0 = time.time()
    preset = get_preset("tiny")
    vocab = preset.model.vocab_size
    max_length = 256 if args.quick else args.max_length
    batch = max(1, 4096 // max_length) if not args.quick else 4
    lengths = gsm8k_like_lengths(4000, max_length=512 if args.quick else max_length)
    if args.quick:  # same shape of distribution, halved, so it fits 256
        lengths = [(max(4, p // 2), max(2, c // 2)) for p, c in lengths]
    pairs = synth_pairs(lengths, vocab)
    results: dict[str, Any] = {"when": datetime.datetime.now().isoformat(timespec="seconds"),
                               "quick": args.quick, "machine": machine(step_memory),
                               "model": "tiny preset (6-layer Gemma 3 architecture, D=128)",
                               "lengths": {"prompt_mean": float(np.mean([p for p, _ in lengths])),
                                           "completion_mean": float(np.mean([c for _, c in lengths])),
                                           "max_length": max_length}}
    results["padding"] = padding_table(pairs, batch, max_length)
    print("padding:", json.dumps(results["padding"]), flush=True)
    results["sft"] = sft_throughput(pairs, preset, batch, max_length,
                                    steps=3 if args.quick else 6, warmup=2,
                                    rounds=1 if args.quick else 2)
    print("sft speedup:", round(results["sft"]["speedup_real_tokens_per_s"], 2), flush=True)
    results["compiles"] = {} if args.skip_stages else stage_compiles(args.quick)
    results["rollout"] = rollout_throughput(preset, lengths, batch=8 if args.quick else 16,
                                            max_new=16 if args.quick else 64, vocab=vocab)
    if args.old_new == "yes":
        results["old_new"] = old_new(args)
    results["seconds"] = round(time.time() - t0, 1)
    text = table(results)
    results["table"] = text
    print(text)
    print(f"\nmachine: {results['machine']}; {results['seconds']} s")
    write_json(args.out, results, indent=2, default=float)
    return results


def old_new(args) -> dict[str, Any]:
    """(f), both halves: the GRPO step and the SFT step, old path against new."""
    quick = args.quick
    with tempfile.TemporaryDirectory() as root:
        source = grpo_source(pathlib.Path(root), args.from_run, quick)
        grpo = grpo_old_new(source, steps=4 if quick else args.grpo_steps, warmup=3)
    sft = sft_old_new([128] if quick else [int(d) for d in args.widths.split(",")],
                      batch=max(1, 4096 // args.max_length), length=args.max_length,
                      steps=2 if quick else 5)
    out = {"grpo": grpo, "sft": sft}
    out["table"] = old_new_table(out)
    print(out["table"], flush=True)
    return out


def old_new_only(args, step_memory: str) -> dict[str, Any]:
    """Run (f) alone and put it into ``--out`` beside the other sections already there."""
    out = pathlib.Path(args.out)
    results = json.loads(out.read_text()) if out.is_file() else {}
    results["old_new"] = {"when": datetime.datetime.now().isoformat(timespec="seconds"),
                          "machine": machine(step_memory), **old_new(args)}
    write_json(out, results, indent=2, default=float)
    return results


if __name__ == "__main__":
    main()
