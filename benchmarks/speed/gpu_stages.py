"""A preset's stages at their real lengths on one accelerator: seconds per step, rollouts, peak memory.

Run from the repository root on a machine with a GPU or TPU::

    python -m benchmarks.speed.gpu_stages --preset gemma3-270m --steps 6 --out gpu_stages.json

The preset's architecture with random weights (:func:`reasonkit.testing.write_random_source`,
the tiny tokenizer padded to the preset's vocabulary: no download) and its own lengths,
batch sizes, LoRA and meshes; the data is the synthetic tasks. Weights' values do not
change the time of a step, and a random model never samples its end-of-turn, so every
rollout runs to the full generation length, as the time model assumes.

Each stage runs in a process of its own (``train.train_or_load`` for ``--steps`` steps,
as the notebooks call it, DPO starting from SFT's adapters and GRPO from DPO's), so that
its peak device memory is its own. A step's time is the gap between two batch requests
(:func:`reasonkit.train._clock.until`), the first step and any step that compiled left out.
Then 64 rollouts: the GRPO policy samples ``--rollouts`` completions of the full
generation length in one batch through Tunix's ``Sampler``, timed on the second call.

Beside each measurement it writes what the package predicts: the time model's seconds per
step (:func:`reasonkit.runtime._hardware.time_model`, as ``python -m reasonkit plan``
prints it) and the memory budget's peak (:func:`reasonkit.budget.memory_budget`). ``--tiny``
runs the tiny preset's shapes on a CPU in a minute (a smoke run; the numbers mean little).
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from benchmarks.common import ROOT, write_json

STAGES = ("sft", "dpo", "grpo")


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    steps = {f"{s}.max_steps": args.steps for s in STAGES}
    # no warm-up: the first steps would run at a learning rate near 0, which costs the same
    return steps | {f"{s}.warmup_ratio": 0.0 for s in STAGES} | json.loads(args.overrides)


def _prepare(args: argparse.Namespace, root: pathlib.Path):
    """The preset with its random source written under ``root``."""
    from reasonkit.presets import get_preset

    if args.preset == "tiny":
        return get_preset("tiny", **_overrides(args))
    from benchmarks.real_270m import e2e_real as e2e  # imports JAX: in the stage's process

    e2e.PRESET = args.preset
    return e2e.prepare(root, quick=False, overrides=_overrides(args))


def _peak_bytes() -> int | None:
    import jax

    stats = jax.devices()[0].memory_stats() or {}
    return stats.get("peak_bytes_in_use")


def run_stage(args: argparse.Namespace) -> dict[str, Any]:
    """One stage in this process: its steady seconds per step and the device's peak bytes."""
    from reasonkit import train
    from reasonkit.runtime import runs
    from reasonkit.train import clock

    root = pathlib.Path(args.root)
    preset = _prepare(args, root)
    run = runs.RunDir.create("gpu", root=root / "runs")
    gaps: list[float] = []
    until = clock.until

    def timed(stream, *a, **kw):  # the gaps between batch requests, as clock.until measures them
        last = None
        for item in until(stream, *a, **kw):
            now = time.perf_counter()
            if last is not None:
                gaps.append(now - last)
            last = now
            yield item

    clock.until = timed
    t0 = time.perf_counter()
    result = train.train_or_load(preset, run, args.stage)
    wall = time.perf_counter() - t0
    steady = gaps[1:]  # the first gap holds the step that compiled
    out = {"stage": args.stage, "steps": result.steps, "wall_s": round(wall, 1),
           "step_gaps_s": [round(g, 4) for g in gaps],
           "seconds_per_step": statistics.median(steady) if steady else None,
           "peak_bytes": _peak_bytes()}
    if args.stage == "grpo":
        out["rollouts"] = rollouts(preset, run, args.rollouts)
    return out


def rollouts(preset, run, n: int) -> dict[str, Any]:
    """``n`` sampled completions of the full generation length in one batch: the second call's time."""
    import dataclasses

    from reasonkit import data, evaluate
    from reasonkit.runtime import mesh as mesh_lib

    g = preset.grpo
    cfg = dataclasses.replace(preset.eval, batch_size=n, max_generation_length=g.max_generation_length,
                              max_prompt_length=g.max_prompt_length)
    model, tok = evaluate.load_stage(preset, run, "grpo", mesh_lib.stage_mesh(preset, "eval"))
    sampler = evaluate.make_sampler(model, tok, preset.model, cfg)
    prompts = [r["prompt"] for r in data.read_splits(run.require("data"))[0].eval][:n]
    prompts += prompts[-1:] * (n - len(prompts))
    times = []
    for seed in range(2):  # the first compiles
        t0 = time.perf_counter()
        texts = evaluate.generate(sampler, prompts, cfg, stop_ids=[], sample=True, seed=seed)
        times.append(time.perf_counter() - t0)
    tokens = n * cfg.max_generation_length
    return {"n": n, "prompt_length": cfg.max_prompt_length, "new_tokens": cfg.max_generation_length,
            "first_call_s": round(times[0], 2), "seconds": round(times[1], 3),
            "tokens_per_s": round(tokens / times[1], 1), "completion_chars": len(texts[0])}


def predictions(preset) -> dict[str, Any]:
    """The time model's seconds per step and the memory budget's peak bytes, per stage."""
    from reasonkit import budget
    from reasonkit.runtime import hardware

    hw = hardware.detect()
    model = hardware.time_model(preset, hw)
    steps = {c.stage: c.steps for c in model.costs}
    return {"hardware": hw.summary(), "peak_flops": model.peak,
            "seconds_per_step": {s: model.seconds(s) / steps[s] for s in STAGES},
            "peak_bytes": {s: budget.memory_budget(preset, s, 1, hw).total for s in STAGES}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="gemma3-270m")
    parser.add_argument("--steps", type=int, default=6, help="steps of each stage (the first compiles)")
    parser.add_argument("--rollouts", type=int, default=64)
    parser.add_argument("--overrides", default="{}", help="more preset overrides as JSON")
    parser.add_argument("--root", help="where the source and the run go (default: a temporary folder)")
    parser.add_argument("--stage", choices=STAGES, help=argparse.SUPPRESS)  # a child process
    parser.add_argument("--timeout", default="600",
                        help="seconds each stage may take: one number, or one per stage (sft,dpo,grpo)")
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("gpu_stages.json"))
    args = parser.parse_args()
    if args.stage:  # a stage that runs out of time prints where each thread was
        faulthandler.dump_traceback_later(max(float(args.timeout) - 3, 1), exit=True)
        result = run_stage(args)
        write_json(args.out, result)
        return
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(args.root or tmp).resolve()  # the stages run from the repository
        t0 = time.perf_counter()
        preset = _prepare(args, root)
        import jax

        from reasonkit import models
        from reasonkit.runtime import runs

        source = models.resolve_source(preset.model)
        tok = models.load_tokenizer(source / "tokenizer.model", vocab_size=preset.model.vocab_size)
        runs.build_data(runs.RunDir.create("gpu", root=root / "runs"), preset,
                        lambda text: len(tok.EncodeAsIds(text)))

        summary: dict[str, Any] = {
            "preset": args.preset, "steps": args.steps, "overrides": _overrides(args),
            "weights": "random, at the preset's shapes", "jax": jax.__version__,
            "device_kind": jax.devices()[0].device_kind,
            "source_written_s": round(time.perf_counter() - t0, 1),
            "predicted": predictions(preset), "stages": {}}
        print(summary["predicted"]["hardware"], flush=True)
        env = os.environ | {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
        limits = [float(t) for t in args.timeout.split(",")]
        for stage, limit in zip(STAGES, limits * 3 if len(limits) == 1 else limits, strict=True):
            out = root / f"{stage}.json"
            cmd = [sys.executable, "-m", __spec__.name, "--preset", args.preset, "--steps", str(args.steps),
                   "--rollouts", str(args.rollouts), "--overrides", args.overrides,
                   "--root", str(root), "--stage", stage, "--out", str(out), "--timeout", str(limit)]
            try:
                subprocess.run(cmd, check=True, env=env, timeout=limit, cwd=ROOT)
                summary["stages"][stage] = json.loads(out.read_text())
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
                summary["stages"][stage] = {"failed": str(e)}
                print(f"{stage}: {e}", flush=True)
            write_json(args.out, summary)  # what finished, after each stage
            if "failed" in summary["stages"][stage]:
                break
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
