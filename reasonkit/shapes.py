"""Compile a stage at its preset's real shapes and ask the compiler what each device needs.

Nobody needs a TPU or Gemma's weights for this: the model is abstract (shapes and
shardings, no values), the step is built exactly as training builds it
(:func:`reasonkit.train.build_stage`), and ``jit(...).lower(...).compile()`` reports the
bytes per device of its arguments, outputs, temporaries and the inputs it donates:

    peak = arguments + outputs - aliased + temporaries

On a CPU the preset's devices are simulated (``--xla_force_host_platform_device_count``,
which must be set before JAX starts: :func:`check_in_subprocess` runs a fresh process).
Two things differ from a TPU and are handled here, in one place:

- Tunix switches its models' activation sharding constraints off when the platform is
  CPU (``tunix/utils/sharding_utils.py`` ``shard`` for Gemma 3, the ``shard`` of
  ``tunix/models/gemma/model.py`` for Gemma 2). Without them XLA compiles another
  program (the batch replicated, contractions over the sharded model dimension), so
  :func:`tpu_sharding_constraints` turns them back on while a check compiles. A
  constraint that does not divide its dimension is then an error, as on a TPU.
- XLA:CPU expands the optimization barriers ``jax.checkpoint`` (remat) puts around a
  recomputation before it eliminates common subexpressions, which merges the
  recomputation back into the forward pass: remat is undone and every layer's
  activations stay live (a 2-layer check: 584 MiB with remat as without; a TPU keeps
  the barriers). :data:`CPU_XLA_FLAGS` disables that one pass (132 MiB), so the CPU
  compiles the program a TPU runs. (It also asks LLVM for less optimised machine code,
  which changes no buffer and saves about 40% of the compile time.)
- XLA:CPU computes bfloat16 matmuls in float32 (converted copies of their operands), so
  its figure is an upper bound of a TPU's, by design. A check therefore compares it to
  ``budget.memory_budget(..., backend="cpu")``, which counts those copies as items of
  their own, and reports the accelerator's estimate (``backend="tpu"``) beside it.

Stages: ``sft``, ``dpo``, ``grpo`` (the policy update), ``rollout`` (GRPO's sampler:
prefill, one per group of G prompts and Tunix's every-row one, then the decoding loop,
with the KV cache of batch x generations) and ``eval`` (the evaluation's sampler). A
generation stage's peak is the largest of its prefill and decode programs.

From a shell: ``python -m reasonkit.shapes gemma3-1b sft`` (``--devices 8`` by default
the preset's device count).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import subprocess
import sys
import time
from typing import Any

import jax
import jax.numpy as jnp

from reasonkit import evaluate, train
from reasonkit.budget import FIT_FRACTION, memory_budget
from reasonkit.config import TRAIN_STAGES, Preset
from reasonkit.presets import get_preset
from reasonkit.runtime import hardware
from reasonkit.runtime import mesh as mesh_lib

__all__ = ["CHECK_STAGES", "CPU_XLA_FLAGS", "BUDGET_STAGE", "PHASE", "Memory", "check", "estimate",
           "device_count", "check_in_subprocess", "describe", "main"]

CHECK_STAGES = (*TRAIN_STAGES, "rollout", "eval")
CPU_XLA_FLAGS = "--xla_disable_hlo_passes=cse_barrier_expander --xla_backend_optimization_level=0"
BUDGET_STAGE = {"sft": "sft", "dpo": "dpo", "grpo": "grpo", "rollout": "grpo", "eval": "eval"}
PHASE = {"sft": "train", "dpo": "train", "grpo": "train", "rollout": "rollout", "eval": "generate"}
GiB = 2**30


# --- Tunix's activation constraints, as on a TPU ---------------------------------------------


# --- what the compiler says ------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Memory:
    """Bytes per device of one compiled program, from ``compiled.memory_analysis()``."""

    arguments: int
    outputs: int
    temporaries: int
    aliased: int  # outputs written into donated arguments: counted once

    @property
    def peak(self) -> int:
        return self.arguments + self.outputs - self.aliased + self.temporaries

    @classmethod
    def of(cls, compiled) -> "Memory":
        m = compiled.memory_analysis()
        return cls(int(m.argument_size_in_bytes), int(m.output_size_in_bytes),
                   int(m.temp_size_in_bytes), int(m.alias_size_in_bytes))

    def to_dict(self) -> dict[str, int]:
        return {**dataclasses.asdict(self), "peak": self.peak}


def _compile(lowered, name: str, programs: dict[str, Any]) -> None:
    t0 = time.time()
    compiled = lowered.compile()
    programs[name] = {**Memory.of(compiled).to_dict(), "compile_s": round(time.time() - t0, 1)}


def _sampler_programs(sampler, batch: int, prompt_len: int, gen_len: int, sampling: dict,
                      programs: dict[str, Any], prefix: str) -> None:
    """Lower and compile a Tunix sampler's prefill and decode for ``batch`` prompts."""
    seed = jax.random.PRNGKey(0)
    init = functools.partial(sampler.init_sample_state, total_sampling_steps=prompt_len + gen_len,
                             include_logits=False, forbidden_token_ids=None, seed=seed,
                             beam_size=None, include_logprobs=False, **sampling)
    state = jax.eval_shape(init, jax.ShapeDtypeStruct((batch, prompt_len), jnp.int32))
    # a static field holding an array: concrete in a real call, a leaked tracer here
    state = state.replace(num_input_tokens=jnp.array(prompt_len, dtype=jnp.int32))
    sampler.eos_ids = jnp.array([1])
    params, prefill_fn, decode_fn = train.sampler_programs(sampler)
    if isinstance(prefill_fn, train.SharedPrefill):  # GRPO's rollout: both of its prefills
        _compile(prefill_fn.shared.lower(params, state, None, echo=False), f"{prefix}shared prefill",
                 programs)
        prefill_fn = prefill_fn.every_row
    prefill = prefill_fn.lower(params, state, None, echo=False)
    compiled = prefill.compile()
    programs[f"{prefix}prefill"] = Memory.of(compiled).to_dict()
    after = jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh),
                         prefill.out_info, compiled.output_shardings)
    _compile(decode_fn.lower(params, after),
             f"{prefix}decode", programs)


def _generation_programs(preset: Preset, stage: str, programs: dict[str, Any]) -> None:
    if stage == "rollout":
        built = train.build_stage(preset, "grpo", weights="abstract")
        cfg = preset.grpo
        with built.mesh:
            _sampler_programs(train.sampler_of(built.cluster.rollout),
                              cfg.batch_size * cfg.num_generations, cfg.max_prompt_length,
                              cfg.max_generation_length,
                              dict(temperature=cfg.temperature, top_p=cfg.top_p, top_k=cfg.top_k),
                              programs, "")
        return
    cfg = preset.eval
    mesh = mesh_lib.stage_mesh(preset, "eval")
    mesh_lib.check_batch(cfg.batch_size, mesh, "eval.batch_size")
    with mesh:
        _, policy, _, tok, _ = train.build_models(preset, mesh, "abstract")
        sampler = evaluate.make_sampler(policy, tok, preset.model, cfg)
        # sampled decoding (pass@k) holds what greedy does and the top-k / top-p buffers
        _sampler_programs(sampler, cfg.batch_size, cfg.max_prompt_length,
                          cfg.max_generation_length,
                          dict(temperature=cfg.temperature, top_p=cfg.top_p, top_k=cfg.top_k),
                          programs, "")


def check(preset: Preset, stage: str, hw: hardware.HardwareInfo | None = None) -> dict[str, Any]:
    """Compile ``stage`` of ``preset`` at its real shapes on the devices JAX sees.

    Returns the compiler's bytes per device for each program (``programs``), the stage's
    ``peak`` (its largest program), ``budget.memory_budget``'s estimate for the same
    thing as XLA:CPU compiles it (``estimate``; :func:`estimate`) and on an accelerator
    (``estimate_tpu``), ``ratio`` = estimate / peak, the device memory of ``hw``
    (default: the preset's machine) and whether the peak fits in
    ``budget.FIT_FRACTION`` of it.
    """
    if stage not in CHECK_STAGES:
        raise ValueError(f"stage={stage!r}: must be one of {', '.join(CHECK_STAGES)}")
    if hw is None:
        hw = hardware.detect() if preset.hardware == "cpu" else hardware.from_name(preset.hardware)
    t0 = time.time()
    programs: dict[str, Any] = {}
    with train.tpu_sharding_constraints():
        if stage in train.TRAIN_STAGES:
            _compile(train.build_stage(preset, stage, weights="abstract").lower(), "step", programs)
        else:
            _generation_programs(preset, stage, programs)
    peak = max(p["peak"] for p in programs.values())
    estimates = estimate(preset, stage, jax.device_count(), hw)
    mesh = mesh_lib.resolve_shape(mesh_lib.stage_mesh_config(preset, BUDGET_STAGE[stage]).shape,
                                  jax.device_count())
    return {"preset": preset.name, "stage": stage, "hardware": hw.name,
            "devices": jax.device_count(), "mesh": list(mesh), "programs": programs,
            "peak": peak, **estimates, "ratio": round(estimates["estimate"] / peak, 3),
            "capacity": hw.memory_per_device,
            "fits": peak <= FIT_FRACTION * hw.memory_per_device,
            "seconds": round(time.time() - t0, 1)}


def estimate(preset: Preset, stage: str, devices: int,
             hw: hardware.HardwareInfo) -> dict[str, int]:
    """``budget.memory_budget``'s bytes per device for a check's stage, two ways.

    ``estimate``: as XLA:CPU compiles it (``backend="cpu"``: the float32 copies and the
    rest of what only XLA:CPU holds), the figure a check compares to the compiler's.
    ``estimate_tpu``: the same stage on an accelerator (what notebook 01 prints).
    """
    out = {}
    for key, backend in (("estimate", "cpu"), ("estimate_tpu", "tpu")):
        budget = memory_budget(preset, BUDGET_STAGE[stage], n_devices=devices, hw=hw,
                               backend=backend)
        out[key] = budget.phase_total(PHASE[stage])
    return out


def device_count(preset: Preset) -> int:
    """How many devices the preset was sized for (``"tpu-v5e-8"``: 8; ``"cpu"``: 1)."""
    return 1 if preset.hardware == "cpu" else hardware.from_name(preset.hardware).device_count


def check_in_subprocess(preset_name: str, stage: str, *, devices: int | None = None,
                        overrides: dict[str, Any] | None = None, timeout: float = 3600,
                        nice: int = 0) -> dict[str, Any]:
    """:func:`check` in a fresh CPU process with ``devices`` simulated devices (the preset's)."""
    devices = devices or device_count(get_preset(preset_name, **(overrides or {})))
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS=f"{os.environ.get('XLA_FLAGS', '')} {CPU_XLA_FLAGS} "
                         f"--xla_force_host_platform_device_count={devices}".strip())
    cmd = [sys.executable, "-m", "reasonkit.shapes", preset_name, stage, "--here", "--json"]
    if overrides:
        cmd += ["--overrides", json.dumps(overrides)]
    if nice:
        cmd = ["nice", "-n", str(nice), *cmd]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"shape check {preset_name} {stage} on {devices} devices failed:\n"
                           f"{proc.stderr[-4000:]}")
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def describe(result: dict[str, Any]) -> str:
    """One line: the compiler's peak, the estimate, the device memory, fits or not."""
    fmt = hardware.format_bytes
    verdict = "fits" if result["fits"] else "does NOT fit"
    return (f"{result['preset']} {result['stage']:8s} mesh {'x'.join(map(str, result['mesh']))}: "
            f"compiler {fmt(result['peak'])} per device, estimate {fmt(result['estimate'])} "
            f"(x{result['ratio']:.2f}), {verdict} in {FIT_FRACTION:.0%} of "
            f"{fmt(result['capacity'])}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("preset")
    parser.add_argument("stage", choices=CHECK_STAGES)
    parser.add_argument("--overrides", default="{}", help="JSON of Preset.replace keys")
    parser.add_argument("--devices", type=int, help="simulated CPU devices (default: the "
                                                      "preset's device count)")
    parser.add_argument("--here", action="store_true",
                        help="compile in this process, on the devices it has (no subprocess)")
    parser.add_argument("--json", action="store_true", help="print a RESULT line of JSON")
    args = parser.parse_args(argv)
    overrides = json.loads(args.overrides)
    if args.here:
        result = check(get_preset(args.preset, **overrides), args.stage)
    else:
        result = check_in_subprocess(args.preset, args.stage, devices=args.devices,
                                     overrides=overrides)
    print(describe(result))
    if args.json:
        print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
