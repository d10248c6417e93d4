"""What am I running on, and how long will each stage take.

``detect()`` describes the devices JAX sees; ``from_name("tpu-v5e-8")`` describes the
machine a preset was sized for, from the peak table below; ``matmul_benchmark`` measures
a device's FLOP/s. ``time_model`` estimates each stage's time from its FLOPs per step, the
peak and an assumed utilisation. Whether a stage fits in memory is :mod:`reasonkit.budget`.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import time
from typing import Any

import jax
import jax.numpy as jnp

from reasonkit.config import TRAIN_STAGES, ModelConfig, Preset

__all__ = ["GiB", "PEAK_TABLE", "DEVICE_KINDS", "generation_of", "HardwareInfo", "detect",
           "from_name", "matmul_benchmark", "format_bytes", "UTILISATION", "EVAL_STAGES",
           "forward_flops", "StageCost", "stage_costs", "format_duration", "TimeModel",
           "time_model"]

GiB = 2**30

# --- the table ----------------------------------------------------------------------------

# generation: (memory per JAX device in bytes, peak dense bf16 FLOP/s per JAX device).
# TPU v2/v3 chips hold 2 TensorCores and JAX shows each core as a device, so a "v3-8"
# is 4 chips = 8 devices and each device gets half a chip's HBM and FLOP/s. From v4 on
# a chip is one device ("megacore"). A GPU is one device.
PEAK_TABLE: dict[str, tuple[int, float]] = {
    # cloud.google.com/tpu/docs/v2 (system architecture): 16 GiB HBM, 45 TFLOP/s per chip
    "v2": (8 * GiB, 22.5e12),
    # cloud.google.com/tpu/docs/v3: 32 GiB HBM (16 GiB per core), 123 TFLOP/s per chip
    "v3": (16 * GiB, 61.5e12),
    # cloud.google.com/tpu/docs/v4: 32 GiB HBM, 275 TFLOP/s bf16 per chip
    "v4": (32 * GiB, 275e12),
    # cloud.google.com/tpu/docs/v5e: 16 GiB HBM, 197 TFLOP/s bf16 per chip
    "v5e": (16 * GiB, 197e12),
    # cloud.google.com/tpu/docs/v5p: 95 GiB HBM, 459 TFLOP/s bf16 per chip
    "v5p": (95 * GiB, 459e12),
    # cloud.google.com/tpu/docs/v6e: 32 GiB HBM, 918 TFLOP/s bf16 per chip
    "v6e": (32 * GiB, 918e12),
    # NVIDIA H100 datasheet: SXM5 80 GB HBM3, 989 TFLOP/s dense bf16 (1979 "with sparsity")
    "h100": (80 * GiB, 989e12),
    # NVIDIA H200 datasheet: 141 GB HBM3e, same compute as H100 SXM
    "h200": (141 * 10**9, 989e12),
    # NVIDIA A100 datasheet: 40 or 80 GB, 312 TFLOP/s dense bf16 (80 GB: see _gpu_memory)
    "a100": (40 * GiB, 312e12),
    # NVIDIA L4 datasheet: 24 GB GDDR6, 121 TFLOP/s dense bf16 (242 with sparsity)
    "l4": (24 * GiB, 121e12),
    # NVIDIA T4 datasheet: 16 GB, 65 TFLOP/s fp16 tensor cores (no bf16: emulated, slower)
    "t4": (16 * GiB, 65e12),
    # NVIDIA P100 PCIe datasheet: 16 GB, 18.7 TFLOP/s fp16 (no tensor cores, no bf16)
    "p100": (16 * GiB, 18.7e12),
}

# A representative jax ``device_kind`` per generation, for ``from_name``.
DEVICE_KINDS = {"v2": "TPU v2", "v3": "TPU v3", "v4": "TPU v4", "v5e": "TPU v5 lite",
                "v5p": "TPU v5", "v6e": "TPU v6 lite", "h100": "NVIDIA H100 80GB HBM3",
                "h200": "NVIDIA H200", "a100": "NVIDIA A100-SXM4-40GB", "l4": "NVIDIA L4",
                "t4": "Tesla T4", "p100": "Tesla P100-PCIE-16GB"}


def generation_of(platform: str, device_kind: str) -> str:
    """The table key for a jax ``(platform, device_kind)``.

    >>> generation_of("tpu", "TPU v5 lite"), generation_of("tpu", "TPU v5p")
    ('v5e', 'v5p')
    >>> generation_of("tpu", "TPU v3"), generation_of("gpu", "NVIDIA A100-SXM4-80GB")
    ('v3', 'a100')
    >>> generation_of("cpu", "cpu"), generation_of("gpu", "Some New GPU")
    ('cpu', 'some-new-gpu')
    """
    kind = device_kind.lower()
    if platform == "cpu":
        return "cpu"
    if platform == "tpu" or kind.startswith("tpu"):
        m = re.search(r"v(\d+)\s*(lite|e|p)?", kind)
        if not m:
            return re.sub(r"\W+", "-", kind).strip("-")
        suffix = {"lite": "e", "e": "e", "p": "p"}.get(m.group(2) or "", "")
        if m.group(1) == "5" and not suffix:
            suffix = "p"  # jax calls a v5p chip "TPU v5"
        if m.group(1) == "6" and not suffix:
            suffix = "e"
        return f"v{m.group(1)}{suffix}"
    for gen in ("h200", "h100", "a100", "l4", "t4", "p100"):
        if re.search(rf"\b{gen}\b", kind) or gen in kind.replace("-", " ").split():
            return gen
    return re.sub(r"[^a-z0-9]+", "-", kind).strip("-")


def _gpu_memory(gen: str, device_kind: str) -> int | None:
    if gen == "a100" and "80" in device_kind:
        return 80 * GiB
    return PEAK_TABLE[gen][0] if gen in PEAK_TABLE else None


def _host_ram() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def format_bytes(n: float) -> str:
    """Binary units, three significant digits.

    >>> format_bytes(512), format_bytes(1536), format_bytes(32 * 1024 * 262144 * 4)
    ('512 B', '1.50 KiB', '32.0 GiB')
    """
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if unit == "B" and abs(n) < 1024:
            return f"{int(n)} B"
        rounded = abs(float(f"{n:.3g}"))  # 9.996 is 10.0, not 10.00
        digits = 2 if rounded < 10 else 1 if rounded < 100 else 0
        text = f"{n:.{digits}f}"
        if abs(float(text)) < 1024 or unit == "TiB":  # 1023.9 KiB is 1.00 MiB, not 1024 KiB
            return f"{text} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


# --- detection ----------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True, kw_only=True)
class HardwareInfo:
    """The accelerator, as far as memory and speed are concerned."""

    platform: str  # "tpu" | "gpu" | "cpu"
    device_kind: str  # jax's string, e.g. "TPU v5 lite"
    generation: str  # "v3" | "v5e" | "v5p" | "v6e" | "h100" | ... | "cpu"
    device_count: int  # over all hosts
    process_count: int = 1
    memory_per_device: int  # bytes
    memory_source: str  # "memory_stats" | "table" | "host RAM"
    peak_flops_per_device: float | None  # dense bf16; None where unknown (CPU)

    @property
    def name(self) -> str:
        """E.g. ``"tpu-v5e-8"``: the spelling presets use in ``Preset.hardware``."""
        if self.platform == "cpu":
            return f"cpu-{self.device_count}"
        return f"{self.platform}-{self.generation}-{self.device_count}"

    @property
    def total_memory(self) -> int:
        return self.memory_per_device * self.device_count

    def summary(self) -> str:
        """One line for a notebook."""
        peak = (f"{self.peak_flops_per_device / 1e12:.1f} TFLOP/s bf16 per device"
                if self.peak_flops_per_device else "peak FLOP/s not tabulated (measure it)")
        return (f"{self.device_count} x {self.device_kind} ({self.generation}, "
                f"{self.process_count} process(es)): {format_bytes(self.memory_per_device)} "
                f"per device ({self.memory_source}), {peak}")


def detect(devices: list | None = None) -> HardwareInfo:
    """Describe the devices JAX sees (memory from ``memory_stats`` where it reports it)."""
    devices = list(jax.devices() if devices is None else devices)
    # this process's first device: another host's devices cannot report memory_stats
    d0 = next((d for d in devices if d.process_index == jax.process_index()), devices[0])
    platform, kind = d0.platform, d0.device_kind
    if platform not in ("tpu", "gpu", "cpu"):  # "cuda" / "rocm" from some plugins
        platform = "gpu" if platform in ("cuda", "rocm") else platform
    gen = generation_of(platform, kind)
    memory, source = 0, "unknown"
    try:
        stats = d0.memory_stats() or {}
    except Exception:  # noqa: BLE001 - some backends raise instead of returning None
        stats = {}
    if stats.get("bytes_limit"):
        memory, source = int(stats["bytes_limit"]), "memory_stats"
    elif platform == "cpu":
        local = sum(1 for d in devices if d.process_index == d0.process_index)
        memory, source = _host_ram() // max(1, local), "host RAM"  # fake devices share it
    elif (table := _gpu_memory(gen, kind)) is not None:
        memory, source = table, "table"
    peak = PEAK_TABLE[gen][1] if gen in PEAK_TABLE else None
    return HardwareInfo(platform=platform, device_kind=kind, generation=gen,
                        device_count=len(devices), process_count=jax.process_count(),
                        memory_per_device=memory, memory_source=source,
                        peak_flops_per_device=peak)


def _device_count(name: str, digits: str) -> int:
    if int(digits) < 1:
        raise ValueError(f"hardware name {name!r}: the device count must be >= 1")
    return int(digits)


def from_name(name: str) -> HardwareInfo:
    """A machine by name, from the table: ``"tpu-v5e-8"``, ``"tpu-v3-8"``, ``"gpu-h100-1"``.

    ``"cpu"`` / ``"cpu-N"`` is this host's RAM split over N devices.

    >>> hw = from_name("tpu-v3-8")
    >>> hw.device_count, hw.memory_per_device / 2**30, hw.peak_flops_per_device / 1e12
    (8, 16.0, 61.5)
    >>> from_name("tpu-v5e-8").name
    'tpu-v5e-8'
    """
    m = re.fullmatch(r"cpu(?:-(\d+))?", name)
    if m:
        n = _device_count(name, m.group(1) or "1")
        return HardwareInfo(platform="cpu", device_kind="cpu", generation="cpu",
                            device_count=n, memory_per_device=_host_ram() // n,
                            memory_source="host RAM", peak_flops_per_device=None)
    m = re.fullmatch(r"(tpu|gpu)-(\w+)-(\d+)", name)
    if not m or m.group(2) not in PEAK_TABLE:
        known = ", ".join(f"tpu-{g}-8" if g.startswith("v") else f"gpu-{g}-1"
                          for g in PEAK_TABLE)
        raise ValueError(f"unknown hardware name {name!r}; use cpu, cpu-N or one of {known}")
    platform, gen, n = m.group(1), m.group(2), _device_count(name, m.group(3))
    memory, peak = PEAK_TABLE[gen]
    return HardwareInfo(platform=platform, device_kind=DEVICE_KINDS[gen], generation=gen,
                        device_count=n, memory_per_device=memory, memory_source="table",
                        peak_flops_per_device=peak)


def matmul_benchmark(n: int = 512, dtype: Any = None, repeats: int = 3, inner: int = 8,
                     device: Any = None) -> dict[str, Any]:
    """Measured FLOP/s of a jitted ``[n, n] @ [n, n]`` chain on one device.

    Each timed call runs ``inner`` matmuls inside one jit (so dispatch overhead does not
    dominate on fast chips); compilation and a warm-up call are excluded; the best of
    ``repeats`` calls counts. ``dtype`` defaults to bfloat16 on accelerators and float32
    on CPU (where bf16 is emulated). On a TPU try ``n=4096, inner=32``.
    """
    device = device or jax.devices()[0]
    if dtype is None:
        dtype = jnp.float32 if device.platform == "cpu" else jnp.bfloat16
    dtype = jnp.dtype(dtype)
    ka, kb = jax.random.split(jax.random.key(0))
    a = jax.device_put(jax.random.normal(ka, (n, n), dtype), device)
    b = jax.device_put((jax.random.normal(kb, (n, n), jnp.float32) / math.sqrt(n))
                       .astype(dtype), device)  # keeps the chain's scale ~1

    @jax.jit
    def chain(x, w):
        return jax.lax.fori_loop(0, inner, lambda _, y: y @ w, x)

    chain(a, b).block_until_ready()  # compile + warm-up
    times = []
    for _ in range(max(1, repeats)):
        start = time.perf_counter()
        chain(a, b).block_until_ready()
        times.append(time.perf_counter() - start)
    best = min(times)
    flops = 2 * n**3 * inner / best
    gen = generation_of(device.platform, device.device_kind)
    peak = PEAK_TABLE[gen][1] if gen in PEAK_TABLE else None
    return {"n": n, "dtype": dtype.name, "inner": inner, "seconds": best,
            "flops_per_s": flops, "peak_flops_per_s": peak,
            "fraction_of_peak": flops / peak if peak else None,
            "device_kind": device.device_kind}


# --- time: FLOPs per step, and how long the series takes -----------------------------------

# The fraction of the peak FLOP/s a stage's work is assumed to reach, printed wherever the
# model is; each stage prints its measured ETA once its first steps have run. Training
# (forward + backward, LoRA on a frozen bf16 base) on a TPU is an assumption, below tuned
# large-model training since Tunix's Gemma materialises attention and the presets
# rematerialise. On a GPU and a CPU it is the presets' SFT step as measured
# (docs/performance.md), in the configuration the presets run. Sampling decodes one token
# at a time and is bound by memory bandwidth, not FLOPs; for the tiny model on a CPU it is
# assumed to reach what training does. A CPU keeps its cores busier on a Gemma's matrices
# than on the tiny model's, so "cpu-gemma" (:func:`utilisation_key`) is the real Gemma 3
# 270M's series on a 2-core CPU as measured, its evaluation's batches of 32 decoding at a
# higher share than its training (docs/results.md).
UTILISATION: dict[str, dict[str, float]] = {
    "train": {"tpu": 0.3, "gpu": 0.194, "cpu": 0.12, "cpu-gemma": 0.4},
    "generate": {"tpu": 0.05, "gpu": 0.05, "cpu": 0.12, "cpu-gemma": 0.6},
}
EVAL_STAGES = ("base", *TRAIN_STAGES)


def utilisation_key(platform: str, m: ModelConfig) -> str:
    """The row of :data:`UTILISATION` for ``m`` on ``platform``: a CPU has two, the tiny
    model's and a Gemma's (a residual stream of 512 or more).

    >>> from reasonkit.presets import get_preset
    >>> [utilisation_key("cpu", get_preset(p).model) for p in ("tiny", "gemma3-270m-cpu")]
    ['cpu', 'cpu-gemma']
    >>> utilisation_key("tpu", get_preset("gemma3-1b").model)
    'tpu'
    """
    return "cpu-gemma" if platform == "cpu" and m.embed_dim >= 512 else platform


def forward_flops(m: ModelConfig, tokens: int, context: int) -> float:
    """FLOPs of a forward pass over ``tokens`` tokens that each attend to ``context`` positions.

    2 per parameter per token (every weight multiplies and adds once; the tied embedding
    counts once, as the output layer: the lookup is free), plus the attention: ``Q K^T`` and
    ``softmax V``, ``2 * 2 * heads * head_dim * context`` per layer. Tunix's Gemma computes
    attention over every position, masked (sliding windows included), so ``context`` is
    the full length. LoRA's own matmuls (a few percent at rank 64) are left out.

    >>> from reasonkit.presets import get_preset
    >>> m = get_preset("tiny").model  # 1,490,944 parameters, 6 layers x 4 heads x 32
    >>> forward_flops(m, tokens=1, context=160) == 2 * 1_490_944 + 4 * 6 * 4 * 32 * 160
    True
    """
    attention = 4 * m.num_layers * m.num_heads * m.head_dim * context
    return float(tokens) * (2 * m.num_params + attention)


def _train_factor(m: ModelConfig) -> int:
    """A training step's FLOPs in forwards: 1 forward + 1 backward through the activations
    (the frozen base needs no weight gradients), + 1 forward again with rematerialisation."""
    return 3 if m.remat else 2


def _generate_flops(m: ModelConfig, seqs: int, prompt: int, new: int) -> float:
    """Prefill ``seqs`` prompts, then ``new`` tokens each over a cache of prompt + new."""
    return forward_flops(m, seqs * prompt, prompt) + forward_flops(m, seqs * new, prompt + new)


@dataclasses.dataclass(frozen=True)
class StageCost:
    """One stage: steps, and the FLOPs of one step split by the kind of work."""

    stage: str
    steps: int  # evaluation: one "step" per stage evaluated (base, sft, dpo, grpo)
    train_flops: float  # per step: forward and backward passes
    generate_flops: float  # per step: sampling (GRPO's rollouts, evaluation)
    note: str = ""  # what a step is made of, where the report should say

    def seconds(self, peak: float, platform: str) -> float:
        """Steps x FLOPs per step / (peak x the utilisation assumed for each kind of work)."""
        u = {kind: table.get(platform, table["tpu"]) for kind, table in UTILISATION.items()}
        return self.steps * (self.train_flops / (peak * u["train"])
                             + self.generate_flops / (peak * u["generate"]))


def stage_costs(preset: Preset, eval_prompts: int | None = None,
                gsm8k_prompts: int | None = None) -> list[StageCost]:
    """FLOPs per step of SFT, DPO, GRPO and evaluation, from the preset's shapes.

    Every row is padded to the stage's maximum length and every sample runs to the
    maximum generation length, as the static shapes compile: an upper bound when answers
    stop early. SFT: one training pass over ``batch x max_target_length``. DPO: chosen +
    rejected through the policy, and (``algorithm="dpo"``) a forward of the frozen
    reference. GRPO per step: ``batch x num_generations`` rollouts (generation), the
    reference's forward over them (``beta > 0``), the old policy's (``num_iterations >
    1``) and ``num_iterations`` training passes. Evaluation per stage: a greedy pass and
    ``num_samples`` sampled ones over ``eval_prompts`` prompts (default
    ``eval_per_domain`` x 6 domains), in full batches, plus a greedy pass over
    ``gsm8k_prompts`` GSM8K test problems (default ``eval.gsm8k_problems``: 1319 when
    ``eval.gsm8k_test`` is set, or ``eval.gsm8k_limit``; 0 when it is not).
    """
    m, f = preset.model, _train_factor(preset.model)
    c = preset.sft
    sft = StageCost("sft", c.max_steps, f * forward_flops(
        m, c.batch_size * c.max_target_length, c.max_target_length), 0.0)
    d = preset.dpo
    length = d.max_prompt_length + d.max_response_length
    one = forward_flops(m, 2 * d.batch_size * length, length)
    dpo = StageCost("dpo", d.max_steps, (f + (d.algorithm == "dpo")) * one, 0.0)
    g = preset.grpo
    seqs, length = g.batch_size * g.num_generations, g.max_prompt_length + g.max_generation_length
    one = forward_flops(m, seqs * length, length)
    forwards = f * g.num_iterations + (g.beta > 0) + (g.num_iterations > 1)
    grpo = StageCost("grpo", g.max_steps, forwards * one,
                     _generate_flops(m, seqs, g.max_prompt_length, g.max_generation_length))
    e = preset.eval
    prompts = eval_prompts if eval_prompts is not None else preset.data.eval_per_domain * 6
    gsm8k = gsm8k_prompts if gsm8k_prompts is not None else e.gsm8k_problems
    full = lambda n: -(-n // e.batch_size) * e.batch_size  # the last batch is topped up
    flops = (1 + e.num_samples) * _generate_flops(m, full(prompts), e.max_prompt_length,
                                                  e.max_generation_length)
    note = ""
    if gsm8k:
        flops += _generate_flops(m, full(gsm8k), e.max_prompt_length, e.max_generation_length)
        note = f"held-out {prompts} x {1 + e.num_samples} + GSM8K test {gsm8k} x 1"
    ev = StageCost("eval", len(EVAL_STAGES), 0.0, flops, note)
    return [sft, dpo, grpo, ev]


def format_duration(seconds: float) -> str:
    """Seconds as the largest sensible unit.

    >>> format_duration(42), format_duration(150), format_duration(9000)
    ('42 s', '2.5 min', '2.50 h')
    """
    if seconds < 100:
        return f"{seconds:.0f} s"
    if seconds < 6000:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.2f} h"


@dataclasses.dataclass(frozen=True)
class TimeModel:
    """How long each stage should take: FLOPs / (peak x assumed utilisation)."""

    costs: list[StageCost]
    peak: float  # FLOP/s of all devices together
    platform: str  # the row of UTILISATION: "tpu", "gpu", "cpu" or "cpu-gemma" (utilisation_key)
    peak_source: str  # where ``peak`` came from

    def seconds(self, stage: str) -> float:
        return next(c for c in self.costs if c.stage == stage).seconds(self.peak, self.platform)

    def total(self, stages: tuple[str, ...] | list[str] | None = None) -> float:
        return sum(c.seconds(self.peak, self.platform) for c in self.costs
                   if stages is None or c.stage in stages)

    def report(self, seconds_left: float | None = None,
               stages: tuple[str, ...] | list[str] | None = None) -> str:
        """A table of the stages still to run (``stages``; default all), and whether they fit."""
        u = {kind: table.get(self.platform, table["tpu"]) for kind, table in UTILISATION.items()}
        lines = [f"time model: steps x FLOPs per step / ({self.peak / 1e12:.3g} TFLOP/s, "
                 f"{self.peak_source}, x an assumed utilisation: {u['train']:.0%} training, "
                 f"{u['generate']:.0%} sampling)",
                 "| stage | steps | TFLOP per step (train + sample) | estimate |", "|---|---|---|---|"]
        todo = [c for c in self.costs if stages is None or c.stage in stages]
        for c in todo:
            name = f"{c.stage} ({c.note})" if c.note else c.stage
            lines.append(f"| {name} | {c.steps} | {c.train_flops / 1e12:.3g} + "
                         f"{c.generate_flops / 1e12:.3g} | "
                         f"{format_duration(c.seconds(self.peak, self.platform))} |")
        total = sum(c.seconds(self.peak, self.platform) for c in todo)
        verdict = f"total {format_duration(total)}"
        if seconds_left is not None:
            fits = total <= seconds_left
            verdict += (f" of the {format_duration(max(seconds_left, 0))} left before the deadline: "
                        + ("fits" if fits else "does NOT fit (the stages stop cleanly at the "
                           "deadline; run again in a new session to resume)"))
        lines.append(verdict + "; plus loading and compiling, not modelled")
        return "\n".join(lines)


def time_model(preset: Preset, hw: HardwareInfo | None = None, *, peak: float | None = None,
               eval_prompts: int | None = None, gsm8k_prompts: int | None = None) -> TimeModel:
    """The :class:`TimeModel` of ``preset`` on ``hw`` (default: :func:`detect`).

    ``peak`` (FLOP/s, all devices) defaults to the table's peak times the device count;
    where the table has none (a CPU) it is measured with :func:`matmul_benchmark`.
    """
    hw = hw or detect()
    source = "given"
    if peak is None and hw.peak_flops_per_device:
        peak, source = hw.peak_flops_per_device * hw.device_count, "the table's peak"
    elif peak is None:
        peak, source = matmul_benchmark()["flops_per_s"], "the measured matmul rate"
    return TimeModel(stage_costs(preset, eval_prompts, gsm8k_prompts), float(peak),
                     utilisation_key(hw.platform, preset.model),
                     f"{source} of {hw.device_count} x {hw.device_kind}")
