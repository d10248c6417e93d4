"""What am I running on: devices, memory, peak FLOP/s, will each stage fit, and how long.

``detect()`` describes the devices JAX sees; ``from_name("tpu-v5e-8")`` describes the
machine a preset was sized for, from the table below. ``memory_budget`` estimates the
bytes *per device* a stage needs, item by item, and suggests changes when it does not
fit (each suggestion re-runs the estimate on a changed preset). ``time_model`` estimates
each stage's time from its FLOPs per step, the peak and an assumed utilisation.

A budget by hand, for the tiny preset on one device (bytes):

>>> from reasonkit.config import get_preset
>>> p = get_preset("tiny")  # float32, V=512, D=128, F=512, L=6, H=4, K=1, h=32, rank 8
>>> b = memory_budget(p, "sft", hw=from_name("cpu-1"))
>>> for name, n in b.items.items():
...     print(f"{name:28s} {n:>11,d}")
base params                    5,963,776
LoRA params + grads + Adam     2,015,232
activations                  180,879,360
attention scores               3,276,800
logits                        20,971,520
returned model state           6,467,584
>>> 4 * p.model.num_params == b.items["base params"]  # fp32, nothing to shard on 1 device
True
>>> 4 * 16 * 160 * 512 * 4 == b.items["logits"]  # 4 fp32 buffers of one chunk: all of it
True
>>> 16 * 4 * 40 * 160 * 2 * 4 == b.items["attention scores"]  # one block of 40 queries, 2 copies
True
>>> per_token_layer = 6 * 128 + 3 * 512 + 4 * (4 + 1) * 32  # ACT_D*D + ACT_F*F + ...
>>> 16 * 160 * 6 * per_token_layer * 4 == b.items["activations"]
True

A bfloat16 model as XLA:CPU compiles it (``backend="cpu"``, what ``reasonkit.shapes``
checks) holds what a TPU does and float32 copies of its weights on top:

>>> g, v3 = get_preset("gemma2-2b-v3-8"), from_name("tpu-v3-8")
>>> tpu, cpu = (memory_budget(g, "sft", hw=v3, backend=k) for k in ("tpu", "cpu"))
>>> for name, n in cpu.items.items():
...     print(f"{name:28s} {format_bytes(n):>9s}{'' if name in tpu.items else '  XLA:CPU only'}")
base params                    623 MiB
LoRA params + grads + Adam     451 MiB
activations                   1.37 GiB
attention scores              4.00 MiB
logits                        1.11 GiB
XLA:CPU f32 output layer       281 MiB  XLA:CPU only
XLA:CPU f32 weights at start  6.11 GiB  XLA:CPU only
returned model state           736 MiB
>>> format_bytes(tpu.total), format_bytes(cpu.total)  # the compiler: 11.9 GiB
('4.26 GiB', '10.6 GiB')
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import time
from collections.abc import Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from reasonkit import attention, logprobs
from reasonkit.config import ModelConfig, Preset
from reasonkit.mesh import STAGES, factorizations, resolve_shape, stage_mesh_config

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


# glibc's mallopt parameters (<malloc.h>); a trim threshold of -1 "disables trimming
# completely" (mallopt(3)).
_M_TRIM_THRESHOLD, _M_MMAP_MAX, _NEVER = -1, -4, -1


def cpu_only(platforms: str | None = None) -> bool:
    """Will JAX run on the CPU alone here? Answered without starting its backends.

    Yes when ``platforms`` (default: ``JAX_PLATFORMS``, JAX's ``jax_platforms``) names
    ``cpu`` first, or when it names nothing and no accelerator's runtime is installed
    (neither ``libtpu`` nor a PJRT plugin, which is how JAX finds a GPU).

    >>> cpu_only("cpu"), cpu_only("cpu,tpu"), cpu_only("tpu,cpu"), cpu_only("cuda")
    (True, True, False, False)
    """
    import importlib.metadata
    import importlib.util
    import pkgutil

    platforms = jax.config.jax_platforms if platforms is None else platforms
    if platforms:
        return platforms.split(",")[0].strip() == "cpu"
    if importlib.util.find_spec("libtpu") or importlib.metadata.entry_points(group="jax_plugins"):
        return False
    try:
        import jax_plugins
    except ImportError:
        return True
    return not any(pkgutil.iter_modules(jax_plugins.__path__))


def keep_step_memory(env: Mapping[str, str] | None = None, libc: Any = None) -> str:
    """On a CPU, let each step reuse the last step's temporaries; returns what it did.

    XLA:CPU allocates a program's temporaries in one block per call (661 MiB for the tiny
    SFT step at [4, 1024]) and frees it after. glibc maps a block that large fresh from
    the kernel every time, so each step pays a page fault per 4 KiB it touches: 170,000
    faults, about half the step's CPU time spent in the kernel (docs/performance.md).
    Two changes keep the block instead:

    - JAX's CPU client runs each computation on the calling thread
      (``jax_cpu_enable_async_dispatch`` off), so the block comes from the main thread's
      malloc arena, not from a worker thread's, which maps anything over 64 MiB anyway;
    - glibc's main arena maps nothing (``M_MMAP_MAX`` 0) and gives nothing back to the
      kernel (``M_TRIM_THRESHOLD`` -1), so the freed block is still there for the next
      call, also when another program ran in between (a GRPO step's rollout, reference
      forward and update; the benchmark's two SFT steps). The cost: the process keeps
      the most it ever held, for later allocations to reuse (the tiny demo's largest
      process: 3.5 GiB at its peak).

    The numbers computed are the same, bit for bit. The flag must be set before JAX
    starts its backends, so call this first in a process (:func:`reasonkit.runs.start_session`
    does); it never starts them itself. A process where JAX may use an accelerator
    (:func:`cpu_only`), whose backends started first, without glibc, or with
    ``REASONKIT_KEEP_STEP_MEMORY=0`` is left as it is. ``libc`` is for tests.
    """
    import ctypes
    import platform as host

    from jax._src import xla_bridge  # no public way to ask without starting the backends

    env = os.environ if env is None else env
    if env.get("REASONKIT_KEEP_STEP_MEMORY", "1") == "0":
        return "step memory: left to glibc (REASONKIT_KEEP_STEP_MEMORY=0)"
    if xla_bridge.backends_are_initialized():
        if jax.default_backend() != "cpu":
            return f"step memory: left as it is on {jax.default_backend()}"
        if jax.config.read("jax_cpu_enable_async_dispatch"):
            return ("step memory: left to glibc (JAX's backends started before keep_step_memory; "
                    "call it first in a fresh process)")
    elif cpu_only():
        jax.config.update("jax_cpu_enable_async_dispatch", False)
    else:
        return "step memory: left as it is (JAX may use an accelerator here)"
    if libc is None:
        if host.libc_ver()[0] != "glibc":
            return "step memory: left to the allocator (not glibc)"
        libc = ctypes.CDLL(None)
    if not (libc.mallopt(_M_MMAP_MAX, 0) and libc.mallopt(_M_TRIM_THRESHOLD, _NEVER)):
        return "step memory: left to glibc (mallopt refused)"
    return ("step memory: kept between steps (computations on the calling thread; glibc keeps "
            "what is freed)")


# --- the memory budget --------------------------------------------------------------------

# Saved activations per token per decoder layer, in elements, for the backward pass
# (the accounting of Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
# Transformer Models", redone for Gemma's block: no dropout, four RMSNorms, gated MLP):
#   6 * D  the residual stream and the RMSNorms' inputs / outputs that feed matmuls
#   3 * F  gate and up projections and gelu(gate) * up (the down projection's input)
#   4 * (H + K) * h  q (projected, normed, scaled), k (projected, normed, rotated),
#          v, and the attention output per head
# XLA fuses and recomputes some elementwise ops, so the real figure may be a bit lower.
ACT_D, ACT_F, ACT_HEADS = 6, 3, 4
# The attention matrix Tunix's Gemma materialises, [B, H, T, S] per layer: the softmax
# output (used by both backward einsums) and the masked logits (between 1 and 2 copies).
# With ``model.attention="chunked"`` (every preset) only one query block's [B, H, tq, S]
# is live, recomputed in the backward (reasonkit.attention).
ATTN_COPIES = 2
# Under remat (``model.remat``) the backward keeps, per layer, the residual-stream-sized
# tensors (ACT_D * D elements a token, in the model's dtype) and recomputes the F- and
# head-sized ones a block at a time. Attributed in the compiler's buffers at the peak of
# gemma3-1b's GRPO update (XLA:CPU, 2 x 4 devices): 156 bf16 [16, 768, 288], 6 a layer.
# (An earlier reading, 25 B x D a token per layer from a 2- vs 26-layer difference, was
# mostly the per-layer float32 weight copies, now their own XLA:CPU item.)
# Log-probabilities are computed a chunk of positions at a time (reasonkit.logprobs), all
# rows of the batch over each device's slice of the vocabulary, about logprobs.CHUNK_BYTES
# of float32 logits a chunk; the step holds four such buffers at once. Attributed in the
# compiler's buffers at the peak of gemma3-1b's GRPO update (2 x 4 devices): the one-hot's
# int32 iota and float32 zeros, the exponent and the quotient, [32, 64, 32768] each.
LOGIT_CHUNK_COPIES = 4
# LoRA state per LoRA parameter: the parameter, its gradient and Adam's two moments, all
# in the base dtype (qwix creates adapters in the frozen weight's dtype, optax keeps the
# moments in the parameter's dtype).
LORA_COPIES = 4
# --- what XLA:CPU holds beyond an accelerator (``memory_budget(..., backend="cpu")``) ---
# Attributed from the compiler's own buffer assignment (``--xla_dump_to``: the values live
# at the peak of each program; docs/presets.md#memory has the figures):
# XLA:CPU's dot emitter takes float32, so it converts every bfloat16 weight it multiplies
# with to a float32 copy, gathered over fsdp (the copy is whole along the dimension FSDP
# splits) and split over tp as the weight is. The copies depend on the parameters alone,
# so XLA:CPU computes them all at the start of a program and every layer's stays live.
# In a training step the embedding's copies are the device's vocabulary slice (the one
# reasonkit.logprobs multiplies with), whole along D: CPU_EMBED_COPIES of them
# (gemma2-2b-v3-8 SFT: f32[2304, 32000] x 2). Beside them, at the same moment, the
# one-hot's iota (int32) and its float32 zeros for one logits chunk, which depend on
# nothing and are computed early too: CPU_CONSTANT_CHUNKS chunk-sized buffers.
CPU_EMBED_COPIES = 2
CPU_CONSTANT_CHUNKS = 2
BACKENDS = ("tpu", "cpu")  # an accelerator (TPU, GPU: bf16 matmuls) | XLA:CPU
FIT_FRACTION = 0.9  # leave 10% for XLA's scratch buffers and fragmentation


class _Matrix(NamedTuple):
    """One projection of a decoder layer, as Tunix's default ShardingConfig splits it."""

    name: str
    d_in: int
    d_out: int
    in_units: int  # the dimension the mesh axis splits (heads for per-head weights)
    out_units: int
    in_axis: str | None  # "fsdp" | "tp" | None
    out_axis: str | None


def _layer_matrices(m: ModelConfig) -> list[_Matrix]:
    D, F, H, K, h = m.embed_dim, m.hidden_dim, m.num_heads, m.num_kv_heads, m.head_dim
    attn = ([_Matrix("qkv_einsum", D, 3 * H * h, D, H, "fsdp", "tp")] if H == K else [
        _Matrix("q_einsum", D, H * h, D, H, "fsdp", "tp"),  # (N, D, h): ("tp", "fsdp", None)
        # (2, K, D, h): ("tp" on K) unless K == 1, which Tunix replicates
        _Matrix("kv_einsum", D, 2 * K * h, D, K, "fsdp", "tp" if K > 1 else None)])
    return attn + [
        _Matrix("attn_vec_einsum", H * h, D, H, D, "tp", "fsdp"),  # (N, h, D)
        _Matrix("gate_proj", D, F, D, F, "fsdp", "tp"),
        _Matrix("up_proj", D, F, D, F, "fsdp", "tp"),
        _Matrix("down_proj", F, D, F, D, "tp", "fsdp"),
    ]


def _split(units: int, axis: str | None, mesh: dict[str, int]) -> int:
    """How many ways ``axis`` splits a dimension of ``units`` (1 if it does not divide)."""
    size = mesh.get(axis, 1) if axis else 1
    return size if units % size == 0 else 1


def _targeted(name: str, module_path: str) -> bool:
    sub = "mlp" if name.endswith("_proj") else "attn"
    return re.fullmatch(module_path, f"layers/0/{sub}/{name}") is not None


def _dtype_bytes(m: ModelConfig) -> int:
    return 2 if m.dtype == "bfloat16" else 4


def _params_bytes(preset: Preset, mesh: dict[str, int]) -> tuple[int, int]:
    """(base params, LoRA params) bytes per device."""
    m, lora = preset.model, preset.lora
    nbytes = _dtype_bytes(m)
    # embedding [V, D] sharded ("tp", "fsdp"); tied to the output layer
    base = (m.vocab_size * m.embed_dim * nbytes
            / _split(m.vocab_size, "tp", mesh) / _split(m.embed_dim, "fsdp", mesh))
    lora_params = 0.0
    for mat in _layer_matrices(m):
        split_in = _split(mat.in_units, mat.in_axis, mesh)
        split_out = _split(mat.out_units, mat.out_axis, mesh)
        targeted = _targeted(mat.name, lora.module_path)
        # QLoRA: 4-bit NF4 codes plus one scale (base dtype) per tile of the frozen weight
        per_param = 0.5 + nbytes / lora.tile_size if (targeted and lora.qlora) else nbytes
        base += m.num_layers * mat.d_in * mat.d_out * per_param / split_in / split_out
        if targeted:  # lora_a [in, r] follows the input's axis, lora_b [r, out] the output's
            lora_params += m.num_layers * lora.rank * (mat.d_in / split_in
                                                       + mat.d_out / split_out)
    return math.ceil(base), math.ceil(lora_params * nbytes)


def _sequences_and_lengths(preset: Preset, stage: str) -> dict[str, int]:
    if stage == "sft":
        c = preset.sft
        return {"train_seqs": c.batch_size, "train_len": c.max_target_length}
    if stage == "dpo":  # chosen and rejected, concatenated on the batch axis
        c = preset.dpo
        return {"train_seqs": 2 * c.batch_size,
                "train_len": c.max_prompt_length + c.max_response_length}
    if stage == "grpo":
        c = preset.grpo
        rollouts = c.batch_size * c.num_generations
        return {"train_seqs": rollouts,
                "train_len": c.max_prompt_length + c.max_generation_length,
                "scored": c.max_generation_length,  # log-probs of the completion only
                "gen_seqs": rollouts, "cache_len": c.max_prompt_length + c.max_generation_length}
    c = preset.eval
    return {"gen_seqs": c.batch_size, "cache_len": c.max_prompt_length + c.max_generation_length}


def _chunk_bytes(m: ModelConfig, rows: int, positions: int, mesh: dict[str, int]) -> int:
    """Float32 logits of one chunk of :func:`reasonkit.logprobs.token_log_probs`, per device."""
    devices = math.prod(mesh.values())
    ways = devices if m.vocab_size % devices == 0 else 1  # the vocabulary over every device
    chunk = logprobs.chunk_positions(rows, m.vocab_size // ways, positions)
    return rows * chunk * (m.vocab_size // ways) * 4


def _training_items(m: ModelConfig, seqs: int, length: int, mesh: dict[str, int],
                    scored: int | None = None) -> dict[str, int]:
    """Forward + backward of ``seqs`` sequences of ``length`` tokens, per device.

    ``scored`` is how many positions a row's log-probabilities are taken at (GRPO: the
    completion's), ``length`` by default.
    """
    nbytes = _dtype_bytes(m)
    local = math.ceil(seqs / mesh["fsdp"])  # the batch axis is split over fsdp
    tokens = local * length
    per_layer = (ACT_D * m.embed_dim + ACT_F * m.hidden_dim
                 + ACT_HEADS * (m.num_heads + m.num_kv_heads) * m.head_dim)
    tp = _split(m.num_heads, "tp", mesh)  # feature / head dims of activations go over tp
    if m.remat:  # keep each layer's residual stream; recompute one block at a time
        act = tokens * m.num_layers * ACT_D * m.embed_dim * nbytes / tp
        score_layers = 1
    else:
        act = tokens * m.num_layers * per_layer * nbytes / tp
        score_layers = m.num_layers
    # Tunix's attention (and "dense") holds [B, N, T, S] per layer; "chunked" recomputes
    # one query block at a time in the backward: [B, N, block, <= S], one block, one layer.
    rows = length
    if m.attention == "chunked":
        rows, score_layers = attention.block_size(length), 1
    scores = (local * score_layers * ATTN_COPIES * m.num_heads * rows * length * nbytes
              / tp)
    logits = (LOGIT_CHUNK_COPIES * _chunk_bytes(m, seqs, scored or length, mesh)
              + _output_slice(m, mesh) * nbytes)
    return {"activations": math.ceil(act), "attention scores": math.ceil(scores),
            "logits": math.ceil(logits)}


def _output_slice(m: ModelConfig, mesh: dict[str, int]) -> int:
    """Elements of the embedding a device multiplies its logits chunks with: its slice of
    the vocabulary, whole along D (an all-to-all's copy; 0 on one device, which reads the
    embedding as it is)."""
    devices = math.prod(mesh.values())
    if devices == 1 or m.vocab_size % devices:
        return 0
    return m.vocab_size // devices * m.embed_dim


def _cpu_training_items(preset: Preset, seqs: int, mesh: dict[str, int],
                        train: dict[str, int], scored: int) -> dict[str, int]:
    """What XLA:CPU's training step holds beyond an accelerator's, per device.

    Two moments compete for XLA:CPU's peak. Mid-step, the activation items ``train``
    and a float32 copy of the output layer's slice. At the step's start, before any
    activation exists, the float32 copies of every weight (:func:`_cpu_weight_copies`,
    ``CPU_EMBED_COPIES`` of the embedding's slice) and ``CPU_CONSTANT_CHUNKS`` logits
    chunks. "XLA:CPU f32 weights at start" is what the second needs beyond the
    first: 0 when the activations are the larger (gemma3-1b's GRPO update on 2 x 4
    devices), most of the peak when the weights are (gemma2-2b-v3-8's SFT: 7.6 GiB of
    float32 weights live at its peak, no activation yet; the item is 6.05 GiB).
    """
    m = preset.model
    if m.dtype != "bfloat16":
        return {}
    vocab = m.vocab_size // (math.prod(mesh.values()) if _output_slice(m, mesh) else 1)
    embed = vocab * m.embed_dim * 4  # the device's vocabulary slice, whole along D, float32
    mid = sum(train.values()) + embed
    start = (_cpu_weight_copies(preset, mesh) + CPU_EMBED_COPIES * embed
             + CPU_CONSTANT_CHUNKS * _chunk_bytes(m, seqs, scored, mesh))
    return {"XLA:CPU f32 output layer": embed,
            "XLA:CPU f32 weights at start": max(0, start - mid)}


# GRPO's update with shared prompts: the continued call's KV caches and their cotangents.
# An upper bound: gemma3-1b's update on 8 devices held 2.07 caches more than every row whole
# when the continued call's blocks saw every key, 0.3 since they skip the later ones.
SHARED_KV_COPIES = 2


def _generation_items(m: ModelConfig, seqs: int, cache_len: int,
                      mesh: dict[str, int]) -> dict[str, int]:
    """Sampling ``seqs`` sequences: the KV cache and the prefill's logits, per device."""
    nbytes = _dtype_bytes(m)
    local = math.ceil(seqs / mesh["fsdp"])
    cache = local * 2 * m.num_layers * m.num_kv_heads * m.head_dim * cache_len * nbytes
    # reasonkit's sampling model (reasonkit.sampling) computes the prefill's output layer at
    # the last position only, [B, 1, V] in the model dtype (Tunix 0.1.7's Gemma: [B, prompt, V])
    prefill = local * 1 * m.vocab_size * nbytes / _split(m.vocab_size, "tp", mesh)
    return {"KV cache": math.ceil(cache / _kv_split(m, mesh)), "prefill logits": math.ceil(prefill)}


def _kv_split(m: ModelConfig, mesh: dict[str, int]) -> int:
    """How many ways tp splits the KV heads (Tunix replicates a single KV head)."""
    return _split(m.num_kv_heads, "tp", mesh) if m.num_kv_heads > 1 else 1


def _cpu_weight_copies(preset: Preset, mesh: dict[str, int]) -> int:
    """Float32 copies XLA:CPU makes of the decoder's bf16 weights and LoRA factors, per device.

    Every projection of every layer, whole along the dimension FSDP splits (the copy is
    made after the all-gather) and split over tp as the weight is. 0 for a float32 model.
    """
    m, lora = preset.model, preset.lora
    if m.dtype != "bfloat16":
        return 0
    n = 0.0
    for mat in _layer_matrices(m):
        tp_in = _split(mat.in_units, mat.in_axis, mesh) if mat.in_axis == "tp" else 1
        tp_out = _split(mat.out_units, mat.out_axis, mesh) if mat.out_axis == "tp" else 1
        n += mat.d_in * mat.d_out / tp_in / tp_out
        if _targeted(mat.name, lora.module_path):
            n += lora.rank * (mat.d_in / tp_in + mat.d_out / tp_out)
    return math.ceil(m.num_layers * n * 4)


def _cpu_generation_items(preset: Preset, seqs: int, cache_len: int,
                          mesh: dict[str, int]) -> dict[str, int]:
    """What XLA:CPU's sampler programs hold beyond an accelerator's, per device.

    - The float32 weight copies (:func:`_cpu_weight_copies`), and the embedding's: its
      tp slice of the vocabulary whole along D (the output layer, after the all-gather)
      and, in the decoding loop, the slice as stored (split over fsdp too), both float32.
    - With a single KV head (Gemma 3 1B and 270M) Tunix's attention einsums broadcast
      the cache to every query head ("BTNH,BSNH->BTNS"), and XLA:CPU keeps every
      layer's broadcast cache live at once (gemma3-1b's rollout: 52 bf16
      ``[16, 768, 4, 256]``, 1.2 GiB, 4 x the cache). The item is the ``H - 1`` copies
      beyond the cache itself. With K > 1 (Gemma 2 2B) Tunix groups the query heads
      over the KV heads instead, and no copy is live (gemma2-2b's rollout).
    """
    m = preset.model
    local = math.ceil(seqs / mesh["fsdp"])
    weights = _cpu_weight_copies(preset, mesh)
    if m.dtype == "bfloat16":
        vocab = m.vocab_size / _split(m.vocab_size, "tp", mesh)
        weights += math.ceil(vocab * m.embed_dim * 4
                             * (1 + 1 / _split(m.embed_dim, "fsdp", mesh)))
    # a single KV head is replicated over tp, and broadcast to all H query heads
    repeats = m.num_heads - 1 if m.num_kv_heads == 1 else 0
    cache = local * 2 * m.num_layers * m.head_dim * cache_len * _dtype_bytes(m)
    return {"XLA:CPU f32 weights": weights,
            "XLA:CPU KV per query head": cache * repeats}


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


@dataclasses.dataclass(frozen=True)
class Advice:
    """One change to a preset and the estimated per-device total after it."""

    change: str
    overrides: dict[str, Any]  # ``Preset.replace`` keys
    total: int
    fits: bool

    def __str__(self) -> str:
        verdict = "fits" if self.fits else "still too big"
        return f"{self.change}: ~{format_bytes(self.total)} per device ({verdict})"


@dataclasses.dataclass(frozen=True)
class Budget:
    """Estimated bytes per device at a stage's peak, item by item."""

    stage: str
    mesh_shape: tuple[int, ...]
    capacity: int  # bytes per device
    items: dict[str, int]  # resident at the peak; ``total`` is their sum
    off_peak: dict[str, int]  # GRPO: the other phase's transients (not in ``total``)
    phase: str  # "train" | "rollout" | "generate": which phase is the peak
    preset: Preset = dataclasses.field(repr=False)
    hw: HardwareInfo = dataclasses.field(repr=False)
    backend: str = "tpu"  # "tpu" (an accelerator) | "cpu" (XLA:CPU's own figure)

    @property
    def total(self) -> int:
        return sum(self.items.values())

    @property
    def fits(self) -> bool:
        return self.total <= FIT_FRACTION * self.capacity

    def phase_total(self, phase: str) -> int:
        """The estimate for one phase: ``total`` for the peak phase, else the other's."""
        if phase == self.phase or not self.off_peak:
            return self.total
        peak_items = sum(v for k, v in self.items.items()
                         if not k.startswith(("base params", "LoRA")))
        return self.total - peak_items + sum(self.off_peak.values())

    def advice(self) -> list[Advice]:
        """Concrete changes, smallest estimated total first; ``[]`` when it fits.

        Each estimate re-runs :func:`memory_budget` on the changed preset. When no single
        change fits, the last entry combines the best changes greedily until one does.
        """
        if self.fits:
            return []
        out = _single_changes(self.preset, self.stage, self.hw, self.mesh_shape,
                              self.backend)
        out = [a for a in out if a.total < self.total]
        out.sort(key=lambda a: a.total)
        if out and not any(a.fits for a in out):
            combined = _combine(self.preset, self.stage, self.hw, self.mesh_shape,
                                self.backend)
            if combined is not None:
                out.append(combined)
        return out

    def __str__(self) -> str:
        shape = "x".join(map(str, self.mesh_shape))
        compiler = " as XLA:CPU compiles it" if self.backend == "cpu" else ""
        lines = [f"{self.preset.name} {self.stage} on {self.hw.name}{compiler}, mesh "
                 f"(fsdp x tp) {shape}, peak in the {self.phase} phase:"]
        lines += [f"  {k:28s} {format_bytes(v):>10s}" for k, v in self.items.items()]
        other = "rollout" if self.phase == "train" else "train"
        lines += [f"  ({k}, {other} phase: {format_bytes(v)})"
                  for k, v in self.off_peak.items()]
        verdict = "fits" if self.fits else "does NOT fit"
        lines.append(f"  {'total':28s} {format_bytes(self.total):>10s} of "
                     f"{format_bytes(self.capacity)} per device: {verdict} "
                     f"(limit {FIT_FRACTION:.0%})")
        lines += [f"  - {a}" for a in self.advice()]
        return "\n".join(lines)


def memory_budget(preset: Preset, stage: str, n_devices: int | None = None,
                  hw: HardwareInfo | None = None, *, backend: str = "tpu") -> Budget:
    """Estimated peak bytes per device for ``stage`` in ("sft", "dpo", "grpo", "eval").

    ``hw`` defaults to :func:`detect` (pass ``from_name(preset.hardware)`` to check the
    machine a preset was sized for); ``n_devices`` to ``hw.device_count``. The stage's
    mesh comes from the preset (``eval`` uses GRPO's) and must fit ``n_devices``.

    ``backend="tpu"`` (the default) is what an accelerator that multiplies in bfloat16
    needs: a TPU, or a GPU; notebook 01's "fits" is this figure. ``backend="cpu"`` adds
    the items named "XLA:CPU ...": what XLA:CPU holds beyond it, mostly float32 copies of
    bfloat16 weights (its dot emitter takes no bfloat16). That is the figure
    :mod:`reasonkit.shapes` compares its CPU compile to, and a TPU does not need it: a
    bfloat16 model on XLA:CPU needs 1.05x to 3.7x the TPU figure (gemma2-2b-v3-8's SFT:
    10.6 vs 4.32 GiB a device; its compiler says 11.7). Each XLA:CPU item comes from
    the compiler's buffers at the peak (docs/presets.md#memory); a float32 model gets
    only the broadcast KV cache.

    Assumptions (Tunix 0.1.7, its default Gemma ShardingConfig, qwix LoRA):

    - Parameters split over fsdp x tp as Tunix shards them (embedding ("tp", "fsdp"),
      projections over both axes; a single KV head is replicated over tp); LoRA ``a``
      follows its weight's input axis and ``b`` its output axis, so on a pure-FSDP mesh
      the ``b`` halves are replicated. Norms are ignored (< 0.1%).
    - Batch-axis tensors split over fsdp; activations' feature dims, the attention
      matrix's heads and the logits' vocabulary split over tp where they divide.
    - Training keeps ``ACT_D*D + ACT_F*F + ACT_HEADS*(H+K)*h`` elements per token per
      layer, plus the materialised ``[B, H, T, T]`` attention (``ATTN_COPIES`` copies):
      Tunix's Gemma has no flash attention. ``model.remat`` keeps ``ACT_D*D`` elements
      a token per layer in the model's dtype (gemma3-1b's GRPO update on XLA:CPU: 156
      bf16 ``[16, 768, 288]``, 6 a layer) and one layer's attention matrix.
    - Log-probabilities are chunked over positions (:mod:`reasonkit.logprobs`):
      ``LOGIT_CHUNK_COPIES`` float32 buffers of one chunk's logits, every row over the
      device's slice of the vocabulary (at most ``logprobs.CHUNK_BYTES`` each), never
      the whole ``[B, S, V]``, plus that slice of the embedding, whole along D (on more
      than one device); GRPO scores the completion's positions only.
    - The step returns the model state it was given (base + LoRA; only the optimizer's
      state is donated, so it is counted once).
    - These are the compiler's terms (``reasonkit.shapes`` compiles the step on simulated
      devices and reads ``memory_analysis()``): arguments + outputs - donated +
      temporaries.
    - DPO runs the policy on chosen + rejected (2 x batch sequences); the reference's
      log-probs come from an earlier forward without gradients on the same backbone
      (LoRA off: no second copy of the weights), so they are not at the peak.
    - GRPO has two phases: rollouts (batch x num_generations sequences: KV cache of
      ``2 * L * K * h * (prompt + generation)`` per sequence, prefill logits) and the
      policy step on those rollouts (as SFT). The peak is the larger; the reference
      model shares the backbone. Evaluation generates ``eval.batch_size`` sequences.
    - With ``grpo.share_prompts`` GRPO's step runs each prompt once per group
      (:func:`reasonkit.logprobs.shared_prompt_hidden`): it holds every row's KV cache
      over prompt + answer, and its gradient (``SHARED_KV_COPIES``), through the step.
    - ``backend="cpu"``: in training, the float32 copies of the output layer's slice,
      and of every weight at the step's start (:func:`_cpu_training_items`); in
      sampling, the float32 weight copies and a single KV head's cache broadcast to
      every query head (:func:`_cpu_generation_items`).
    - Fits means total <= 90% of the device's memory.
    """
    if stage not in STAGES:
        raise ValueError(f"stage={stage!r}: must be one of {', '.join(STAGES)}")
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r}: must be one of {', '.join(BACKENDS)}")
    hw = hw or detect()
    n_devices = n_devices or hw.device_count
    cfg = stage_mesh_config(preset, stage)
    shape = resolve_shape(cfg.shape, n_devices)
    mesh = dict(zip(cfg.axis_names, shape, strict=True))
    mesh.setdefault("fsdp", 1)
    mesh.setdefault("tp", 1)
    cpu = backend == "cpu"
    base, lora = _params_bytes(preset, mesh)
    s = _sequences_and_lengths(preset, stage)
    items = {"base params": base}
    off_peak: dict[str, int] = {}

    def generation() -> dict[str, int]:
        out = _generation_items(preset.model, s["gen_seqs"], s["cache_len"], mesh)
        if cpu:
            out.update(_cpu_generation_items(preset, s["gen_seqs"], s["cache_len"], mesh))
        return out

    if stage == "eval":
        items["LoRA params"] = lora
        items.update(generation())
        phase = "generate"
    else:
        items["LoRA params + grads + Adam"] = lora * LORA_COPIES
        train = _training_items(preset.model, s["train_seqs"], s["train_len"], mesh,
                                s.get("scored"))
        if stage == "grpo" and preset.grpo.shares_prompts(preset.model.attention):
            kv = _generation_items(preset.model, s["gen_seqs"], s["cache_len"], mesh)["KV cache"]
            train["KV cache"] = SHARED_KV_COPIES * kv
        if cpu:
            train.update(_cpu_training_items(preset, s["train_seqs"], mesh, train,
                                             s.get("scored") or s["train_len"]))
        # the step returns the model state it was given (only the optimizer's is donated)
        train["returned model state"] = base + lora
        phase = "train"
        if stage == "grpo":
            rollout = generation()
            if sum(rollout.values()) > sum(train.values()):
                train, rollout, phase = rollout, train, "rollout"
            off_peak = rollout
        items.update(train)
    return Budget(stage=stage, mesh_shape=shape, capacity=hw.memory_per_device, items=items,
                  off_peak=off_peak, phase=phase, preset=preset, hw=hw, backend=backend)


# --- advice -------------------------------------------------------------------------------

def _candidates(preset: Preset, stage: str, n_devices: int,
                mesh_shape: tuple[int, ...]) -> list[tuple[str, dict[str, Any]]]:
    """(description, Preset.replace overrides) for each single change worth trying."""
    section = getattr(preset, stage)
    out = []
    if section.batch_size > 1:
        out.append((f"halve {stage}.batch_size {section.batch_size} -> "
                    f"{section.batch_size // 2}", {f"{stage}.batch_size":
                                                   section.batch_size // 2}))
    length_field = {"sft": "max_target_length", "dpo": "max_response_length",
                    "grpo": "max_generation_length", "eval": "max_generation_length"}[stage]
    length = getattr(section, length_field)
    shorter = length // 2
    if stage == "sft":
        shorter = max(shorter, preset.sft.max_prompt_length + 1)
    if 0 < shorter < length:
        out.append((f"shorten {stage}.{length_field} {length} -> {shorter}",
                    {f"{stage}.{length_field}": shorter}))
    if stage == "grpo" and preset.grpo.num_generations >= 4:
        g = preset.grpo.num_generations
        out.append((f"halve grpo.num_generations {g} -> {g // 2}",
                    {"grpo.num_generations": g // 2}))
    if stage != "eval" and not preset.model.remat:
        out.append(("enable remat (model.remat=True)", {"model.remat": True}))
    if not preset.lora.qlora:
        out.append(("QLoRA: NF4 base weights (lora.qlora=True)", {"lora.qlora": True}))
    mesh_section = "grpo" if stage == "eval" else stage
    mesh_cfg = getattr(preset, mesh_section).mesh
    for shape in factorizations(n_devices, len(mesh_cfg.shape)):
        if shape != tuple(mesh_shape):
            out.append((f"use mesh {shape} for {mesh_section} "
                        f"(fsdp x tp over {n_devices} devices)",
                        {f"{mesh_section}.mesh": dataclasses.replace(mesh_cfg, shape=shape)}))
    return out


def _single_changes(preset: Preset, stage: str, hw: HardwareInfo,
                    mesh_shape: tuple[int, ...], backend: str = "tpu") -> list[Advice]:
    n = math.prod(mesh_shape)
    out, best_mesh = [], None
    for change, overrides in _candidates(preset, stage, n, mesh_shape):
        try:
            b = memory_budget(preset.replace(**overrides), stage, n, hw, backend=backend)
        except ValueError:  # e.g. a length that the config rejects
            continue
        advice = Advice(change, overrides, b.total, b.fits)
        if change.startswith("use mesh"):  # only the best alternative mesh
            if best_mesh is None or advice.total < best_mesh.total:
                best_mesh = advice
        else:
            out.append(advice)
    return out + ([best_mesh] if best_mesh else [])


def _combine(preset: Preset, stage: str, hw: HardwareInfo, mesh_shape: tuple[int, ...],
             backend: str = "tpu", max_steps: int = 5) -> Advice | None:
    """Apply the best single change, then the best on top of it, ... until it fits."""
    overrides: dict[str, Any] = {}
    current, shape = preset, tuple(mesh_shape)
    for _ in range(max_steps):
        options = _single_changes(current, stage, hw, shape, backend)
        if not options:
            return None
        best = min(options, key=lambda a: a.total)
        overrides.update(best.overrides)
        current = preset.replace(**overrides)
        budget = memory_budget(current, stage, math.prod(mesh_shape), hw, backend=backend)
        shape = budget.mesh_shape
        if budget.fits:
            return Advice("together: " + ", ".join(
                f"{k}={v.shape if hasattr(v, 'shape') else v}" for k, v in overrides.items()),
                dict(overrides), budget.total, True)
    return None


# --- the notebook's table -----------------------------------------------------------------

COLUMNS = ("base params", "LoRA state", "activations", "attention scores", "logits",
           "returned model state", "KV cache", "prefill logits")


def budget_table(preset: Preset, hw: HardwareInfo | None = None,
                 n_devices: int | None = None) -> list[dict[str, Any]]:
    """One row per stage: mesh, bytes per item (``COLUMNS``), total, capacity, fits."""
    rows = []
    for stage in STAGES:
        b = memory_budget(preset, stage, n_devices, hw)
        row: dict[str, Any] = {"stage": stage, "mesh": b.mesh_shape, "phase": b.phase}
        for col in COLUMNS:
            row[col] = 0
        for name, n in b.items.items():
            row["LoRA state" if name.startswith("LoRA") else name] = n
        row.update(total=b.total, capacity=b.capacity, fits=b.fits)
        rows.append(row)
    return rows


# --- time: FLOPs per step, and how long the series takes -----------------------------------

# The fraction of the peak FLOP/s a stage's work is assumed to reach. Nothing here has run
# on a TPU yet: these are assumptions, printed wherever the model is, and each stage prints
# its measured ETA once its first steps have run. Training (forward + backward, LoRA on a
# frozen bf16 base) on a TPU: 0.3, below the 0.4-0.5 of tuned large-model training, since
# Tunix's Gemma materialises attention and the presets rematerialise. On a GPU it is a
# measurement: Gemma 3 1B's SFT step as the presets run it (forward + LoRA gradient, remat,
# chunked attention, [8, 1024]) ran at 0.194 of an H200's 989 TFLOP/s; with Tunix's attention
# 0.275, without remat 0.321 (benchmarks/mfu.json, docs/performance.md). Since the loss takes
# its gradient in the forward (2026-11-27) the last reads 0.348 (0.400 at [32, 1024]); the
# presets' configuration was not re-timed, so 0.194 stays and errs on the long side.
# Sampling decodes one token at a time and is bound by memory bandwidth, not FLOPs: 0.05.
# On a CPU the peak is the measured matmul rate and the tiny preset's SFT step reaches 0.12
# of it (docs/performance.md, "Performance", row (d)); sampling is assumed to do the same there.
UTILISATION: dict[str, dict[str, float]] = {
    "train": {"tpu": 0.3, "gpu": 0.194, "cpu": 0.12},
    "generate": {"tpu": 0.05, "gpu": 0.05, "cpu": 0.12},
}
EVAL_STAGES = ("base", "sft", "dpo", "grpo")


def forward_flops(m: ModelConfig, tokens: int, context: int) -> float:
    """FLOPs of a forward pass over ``tokens`` tokens that each attend to ``context`` positions.

    2 per parameter per token (every weight multiplies and adds once; the tied embedding
    counts once, as the output layer: the lookup is free), plus the attention: ``Q K^T`` and
    ``softmax V``, ``2 * 2 * heads * head_dim * context`` per layer. Tunix's Gemma computes
    attention over every position, masked (sliding windows included), so ``context`` is
    the full length. LoRA's own matmuls (a few percent at rank 64) are left out.

    >>> from reasonkit.config import get_preset
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
    platform: str
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
    return TimeModel(stage_costs(preset, eval_prompts, gsm8k_prompts), float(peak), hw.platform,
                     f"{source} of {hw.device_count} x {hw.device_kind}")
