"""Model FLOP utilisation of the SFT step at a preset's real shapes, on the accelerator JAX sees.

Run from the repository root on a machine with an accelerator::

    python -m benchmarks.speed.mfu --preset gemma3-1b --batch 8 --seq 1024 --out mfu.json

One process, one device: the preset's architecture (random weights in its dtype) with its
LoRA, and the step the SFT stage jits: ``reasonkit.tunix_patches._logprobs.sft_loss`` (the final hidden
states, then the vocabulary projection and log-softmax a chunk of positions at a time)
and its gradient with respect to the LoRA parameters, the optimizer's few elementwise ops
left out. Each attention implementation (``--impls``) and remat setting (``--remat``)
gets its own compiled step on the same weights and batch; they alternate step by step.

Model FLOPs per step are ``attention.sft_step_flops`` (projections forward and backward
through the activations, attention over all pairs x 3; no remat recompute, no weight
gradients for the frozen base, LoRA's own matmuls left out). MFU is those FLOPs per
second over the chip's peak (``hardware.PEAK_TABLE``); the same run's bf16 matmul rate
is measured too, as a ceiling the chip reaches here. XLA's own count of the compiled
step's FLOPs (``cost_analysis``: remat's recompute included, but on a GPU the cuBLAS
matmuls left out, so there it is no FLOP count) is reported beside it.
``--chunk-mib 256,1024`` adds a variant per size of the loss's vocabulary chunks
(``logprobs.CHUNK_BYTES``). ``--preset tiny`` runs on a CPU in a minute (a smoke run;
the numbers mean little there).

On a GPU machine whose image has JAX, flax and optax but not the pinned stack, what
``reasonkit`` imports beyond them travels as wheels: google-tunix 0.1.7, qwix 0.1.8,
clu, google_metrax, perfetto, tensorboardX, ml_collections and protobuf (7.x: perfetto's
generated code checks it); the versions are requirements.txt's. Compiles of the 1B step
took about 3 minutes there, so give a short lease ``--deadline`` (seconds for the whole
run): variants still compiling then are reported as not compiled, the rest are timed.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import pathlib
import platform
import statistics
import time
from typing import Any
from unittest import mock

import jax
from flax import nnx

from benchmarks.common import compile_concurrently, error_text, finish, rotated
from benchmarks.speed.attention import batch as random_batch
from benchmarks.speed.attention import sft_step_flops
from reasonkit import models
from reasonkit.presets import get_preset
from reasonkit.runtime import hardware
from reasonkit.tunix_patches import attention, logprobs


def sft_step(graphdef):
    """jit(LoRA params, rest, batch -> the SFT loss, its gradient w.r.t. the LoRA params)."""
    def step(lora, rest, x):
        # nnx's own grad, as Tunix's trainer takes it: Tunix's nnx.remat blocks need it
        loss = lambda m: logprobs.sft_loss(m, x["tokens"], x["valid"], x["positions"], x["mask"])
        grad = nnx.value_and_grad(loss, argnums=nnx.DiffState(0, nnx.LoRAParam))
        return grad(nnx.merge(graphdef, lora, rest))
    return jax.jit(step)


def _cost_flops(compiled) -> float | None:
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    return float(cost["flops"]) if cost and "flops" in cost else None


LOSSES = {"forward": True, "recompute": False}  # logprobs.gradient_path of each --loss


def variant_name(impl: str, remat: bool, loss: str, chunk_mib: float | None = None) -> str:
    chunk = f"+chunk{chunk_mib:g}M" if chunk_mib is not None else ""
    return f"{impl}{'+remat' if remat else ''}{'+recompute' if loss == 'recompute' else ''}{chunk}"


def measure(preset_name: str, batch: int, seq: int, steps: int, impls: tuple[str, ...],
            remats: tuple[bool, ...], compile_timeout: float = 3600, deadline: float | None = None,
            losses: tuple[str, ...] = ("forward",), profile: str | None = None,
            profile_dir: str | None = None, only: tuple[str, ...] | None = None,
            chunk_mibs: tuple[float | None, ...] = (None,), log=print) -> dict[str, Any]:
    """Median seconds per step, MFU and memory of each (attention, remat, loss) variant.

    ``losses``: how the loss's vocabulary chunks get their gradient, ``"forward"``
    (``logprobs.gradient_path``, the package's) or ``"recompute"`` (jax.checkpoint's,
    the path before it). The variants compile concurrently; one still compiling after
    ``compile_timeout`` seconds, or at ``deadline`` (a ``time.perf_counter()``), is left
    out (named in ``not_compiled``), one that fails to trace, compile or run is named
    with its error in ``failed``, and the rest are timed. ``profile``: variants (comma-separated)
    to run one more step of under ``jax.profiler.trace``, each into ``profile_dir/name``
    (with a Perfetto trace). ``only``: of the variants named by these choices, the ones to run.
    """
    preset = get_preset(preset_name)
    device = jax.devices()[0]
    gen = hardware.generation_of(device.platform, device.device_kind)
    peak = hardware.PEAK_TABLE.get(gen, (None, None))[1]
    big = device.platform != "cpu"
    mm = hardware.matmul_benchmark(n=8192 if big else 512, inner=8 if big else 2, repeats=5)
    log(f"{device.device_kind}: matmul {mm['flops_per_s'] / 1e12:.1f} TFLOP/s ({mm['dtype']}), "
        f"peak {peak / 1e12 if peak else float('nan'):.0f}")
    lora_model = lambda cfg: models.apply_lora(models.new_model(cfg, seed=0), preset.lora, seed=0)
    t0 = time.perf_counter()
    _, *state = nnx.split(lora_model(preset.model), nnx.LoRAParam, ...)  # every variant's arrays
    log(f"model and LoRA built in {time.perf_counter() - t0:.1f} s")
    x = random_batch(batch, seq, preset.model.vocab_size)
    flops = sft_step_flops(preset.model, batch, seq)
    lowered, failed = {}, {}
    for remat in remats:  # remat changes the graph, not the arrays
        abstract = nnx.eval_shape(lambda r=remat: lora_model(dataclasses.replace(preset.model, remat=r)))
        for impl in impls:
            for loss, mib in itertools.product(losses, chunk_mibs):
                name = variant_name(impl, remat, loss, mib)
                if only is not None and name not in only:
                    continue
                t0 = time.perf_counter()
                # both are read when the step is traced, and restored after it
                chunk = (mock.patch.object(logprobs, "CHUNK_BYTES", int(mib * 2**20)) if mib is not None
                         else contextlib.nullcontext())
                try:
                    graphdef, _, _ = nnx.split(attention.use(abstract, impl), nnx.LoRAParam, ...)
                    with logprobs.gradient_path(LOSSES[loss]), chunk:
                        lowered[name] = sft_step(graphdef).lower(*state, x)
                    log(f"{name}: traced in {time.perf_counter() - t0:.1f} s")
                except Exception as e:  # noqa: BLE001 - reported, and the others still run
                    failed[name] = error_text(e)
                    log(f"{name}: failed to trace: {failed[name]}")
    # all variants compile at once, each given compile_timeout seconds
    if deadline is not None:
        compile_timeout = max(0.0, min(compile_timeout, deadline - time.perf_counter()))
    done, skipped = compile_concurrently(lowered, compile_timeout, errors=failed)
    variants: dict[str, Any] = {}
    for name, (compiled, seconds) in done.items():
        mem = compiled.memory_analysis()
        try:
            value, _ = jax.block_until_ready(compiled(*state, x))
        except Exception as e:  # noqa: BLE001
            failed[name] = error_text(e)
            continue
        variants[name] = {"fn": compiled, "times": [], "compile_s": seconds,
                          "loss": float(value), "xla_flops": _cost_flops(compiled),
                          "temp_bytes": getattr(mem, "temp_size_in_bytes", None)}
        log(f"{name}: compiled by {variants[name]['compile_s']:.1f} s, loss {float(value):.5f}")
    for name in skipped:
        log(f"{name}: not compiled within {compile_timeout:.0f} s; left out")
    for name, error in failed.items():
        log(f"{name}: failed: {error}")
    for i in range(steps):  # alternating in rotated order, so drift and place fall on each alike
        for name in rotated(list(variants), i):
            v = variants[name]
            t0 = time.perf_counter()
            jax.block_until_ready(v["fn"](*state, x))
            v["times"].append(time.perf_counter() - t0)
    for name in (profile or "").split(","):
        if name not in variants or not profile_dir:
            continue
        try:
            with jax.profiler.trace(f"{profile_dir}/{name}", create_perfetto_trace=True):
                jax.block_until_ready(variants[name]["fn"](*state, x))
        except Exception as e:  # noqa: BLE001 - the timings stand without it
            log(f"profile of {name} failed: {error_text(e)}")
    out = {"preset": preset_name, "batch": batch, "seq": seq, "steps": steps,
           "lora_rank": preset.lora.rank, "dtype": preset.model.dtype, "model_step_flops": flops,
           "device_kind": device.device_kind, "peak_flops_per_s": peak,
           "matmul_flops_per_s": mm["flops_per_s"], "jax": jax.__version__,
           "python": platform.python_version(), "compile_timeout_s": compile_timeout,
           "not_compiled": skipped, "failed": failed, "variants": {}}
    for name, v in variants.items():
        s = statistics.median(v["times"])
        out["variants"][name] = {
            "seconds_per_step": s, "compile_s": v["compile_s"], "loss": v["loss"],
            "tokens_per_s": batch * seq / s,
            "model_flops_per_s": flops / s, "mfu": flops / s / peak if peak else None,
            "fraction_of_matmul": flops / s / mm["flops_per_s"],
            "xla_flops": v["xla_flops"], "xla_flops_per_s": v["xla_flops"] / s if v["xla_flops"] else None,
            "temp_bytes": v["temp_bytes"]}
    return out


def table(r: dict[str, Any]) -> str:
    lines = [f"{r['preset']} SFT step (forward + LoRA gradient), [{r['batch']}, {r['seq']}], "
             f"{r['device_kind']}, jax {r['jax']}; model FLOPs/step {r['model_step_flops'] / 1e12:.2f} T; "
             f"matmul {r['matmul_flops_per_s'] / 1e12:.0f} TFLOP/s",
             "| variant | s/step | tokens/s | model TFLOP/s | MFU | of matmul | XLA TFLOP/s | temp GiB |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, v in r["variants"].items():
        mfu = f"{v['mfu']:.3f}" if v["mfu"] is not None else "-"
        xla = f"{v['xla_flops_per_s'] / 1e12:.0f}" if v["xla_flops_per_s"] else "-"
        temp = f"{v['temp_bytes'] / 2**30:.1f}" if v["temp_bytes"] is not None else "-"
        lines.append(f"| {name} | {v['seconds_per_step']:.4f} | {v['tokens_per_s']:.0f} | "
                     f"{v['model_flops_per_s'] / 1e12:.1f} | {mfu} | {v['fraction_of_matmul']:.3f} | "
                     f"{xla} | {temp} |")
    for name, error in r.get("failed", {}).items():
        lines.append(f"| {name} | failed: {error.splitlines()[0][:120]} | | | | | | |")
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="gemma3-1b")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--impls", default="chunked,tunix", help="attention implementations, in order")
    ap.add_argument("--remat", default="yes", choices=("yes", "no", "both"),
                    help="rematerialise each block (the Gemma presets do)")
    ap.add_argument("--loss", default="forward", choices=("forward", "recompute", "both"),
                    help="the loss chunks' gradient: taken in the forward (the package's) or "
                    "recomputed in the backward (before)")
    ap.add_argument("--chunk-mib", default=None,
                    help="comma-separated logprobs.CHUNK_BYTES in MiB to trace variants with "
                    "(the loss's float32 logits per chunk); default: the package's")
    ap.add_argument("--profile", default=None, help="comma-separated variants to profile one step of")
    ap.add_argument("--only", default=None, help="comma-separated variant names to run of those chosen")
    ap.add_argument("--compile-timeout", type=float, default=3600,
                    help="seconds; variants still compiling then are left out")
    ap.add_argument("--deadline", type=float, default=None,
                    help="seconds from the start for the whole run: the compile timeout shrinks "
                    "to leave 30 s for the timing")
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    args = ap.parse_args(argv)
    start = time.perf_counter()
    remats = {"yes": (True,), "no": (False,), "both": (True, False)}[args.remat]
    losses = {"forward": ("forward",), "recompute": ("recompute",),
              "both": ("forward", "recompute")}[args.loss]
    r = measure(args.preset, args.batch, args.seq, args.steps, tuple(args.impls.split(",")), remats,
                args.compile_timeout, deadline=args.deadline and start + args.deadline - 30,
                losses=losses, profile=args.profile, only=args.only and tuple(args.only.split(",")),
                profile_dir=args.out and str(pathlib.Path(args.out).parent / "profile"),
                chunk_mibs=tuple(float(m) for m in args.chunk_mib.split(",")) if args.chunk_mib else (None,),
                log=lambda s: print(s, flush=True))
    finish(r, table(r), args.out)


if __name__ == "__main__":
    main()
