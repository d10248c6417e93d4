"""The memory budget: will each stage of a preset fit, and what to change when it does not.

``memory_budget`` estimates the bytes *per device* a stage needs at its peak, item by
item, from the preset's shapes, its mesh and the machine
(:class:`reasonkit.runtime._hardware.HardwareInfo`), and suggests changes when it does not
fit (each suggestion re-runs the estimate on a changed preset). ``budget_table`` is the
same for every stage, one row each, as notebook 01 shows it.

A budget by hand, for the tiny preset on one device (bytes):

>>> from reasonkit.presets import get_preset
>>> from reasonkit.runtime._hardware import from_name
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
>>> format_bytes(tpu.total), format_bytes(cpu.total)
('4.26 GiB', '10.6 GiB')
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any, NamedTuple

from reasonkit import train as training  # the sizes its patched programs compute in
from reasonkit.config import ModelConfig, Preset
from reasonkit.runtime import HardwareInfo, detect, format_bytes
from reasonkit.runtime import mesh as mesh_lib

__all__ = ["ACT_D", "ACT_F", "ACT_HEADS", "ATTN_COPIES", "LOGIT_CHUNK_COPIES", "LORA_COPIES",
           "CPU_EMBED_COPIES", "CPU_CONSTANT_CHUNKS", "SHARED_KV_COPIES", "BACKENDS",
           "FIT_FRACTION", "COLUMNS", "Advice", "Budget", "memory_budget", "budget_table",
           "format_bytes"]

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
# is live, recomputed in the backward (the patch package's attention).
ATTN_COPIES = 2
# Under remat (``model.remat``) the backward keeps, per layer, the residual-stream-sized
# tensors (ACT_D * D elements a token, in the model's dtype) and recomputes the F- and
# head-sized ones a block at a time.
# Log-probabilities are computed a chunk of positions at a time (the patch package's logprobs), all
# rows of the batch over each device's slice of the vocabulary, about logprobs.CHUNK_BYTES
# of float32 logits a chunk; the step holds four such buffers at once: the one-hot's int32
# iota and float32 zeros, the exponent and the quotient.
LOGIT_CHUNK_COPIES = 4
# LoRA state per LoRA parameter: the parameter, its gradient and Adam's two moments, all
# in the base dtype (qwix creates adapters in the frozen weight's dtype, optax keeps the
# moments in the parameter's dtype).
LORA_COPIES = 4
# --- what XLA:CPU holds beyond an accelerator (``memory_budget(..., backend="cpu")``) ---
# Attributed from the compiler's own buffer assignment (``--xla_dump_to``: the values live
# at the peak of each program; docs/presets.md#memory has the figures).
# XLA:CPU's dot emitter takes float32, so it converts every bfloat16 weight it multiplies
# with to a float32 copy, gathered over fsdp (the copy is whole along the dimension FSDP
# splits) and split over tp as the weight is. The copies depend on the parameters alone,
# so XLA:CPU computes them all at the start of a program and every layer's stays live.
# In a training step the embedding's copies are the device's vocabulary slice (the one
# the patch package's logprobs multiplies with), whole along D: CPU_EMBED_COPIES of them.
# Beside them, at the same moment, the one-hot's iota (int32) and its float32 zeros for one
# logits chunk, which depend on nothing and are computed early too: CPU_CONSTANT_CHUNKS
# chunk-sized buffers.
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
    """Float32 logits of one chunk of the patch package's ``logprobs.token_log_probs``, per device."""
    devices = math.prod(mesh.values())
    ways = devices if m.vocab_size % devices == 0 else 1  # the vocabulary over every device
    chunk = training.logprob_chunk_positions(rows, m.vocab_size // ways, positions)
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
        rows, score_layers = training.attention_block_size(length), 1
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
    first: 0 when the activations are the larger (gemma3-1b's GRPO update), most of the
    peak when the weights are (gemma2-2b-v3-8's SFT, whose peak holds no activation yet).
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
# An upper bound: the continued call's query blocks skip the keys after them.
SHARED_KV_COPIES = 2


def _generation_items(m: ModelConfig, seqs: int, cache_len: int,
                      mesh: dict[str, int]) -> dict[str, int]:
    """Sampling ``seqs`` sequences: the KV cache and the prefill's logits, per device."""
    nbytes = _dtype_bytes(m)
    local = math.ceil(seqs / mesh["fsdp"])
    cache = local * 2 * m.num_layers * m.num_kv_heads * m.head_dim * cache_len * nbytes
    # reasonkit's sampling model (the patch package's sampling) computes the prefill's output layer at
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
      layer's broadcast cache live at once. The item is the ``H - 1`` copies
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

    ``hw`` defaults to :func:`reasonkit.runtime._hardware.detect` (pass
    ``reasonkit.runtime._hardware.from_name(preset.hardware)`` to check the
    machine a preset was sized for); ``n_devices`` to ``hw.device_count``. The stage's
    mesh comes from the preset (``eval`` uses GRPO's) and must fit ``n_devices``.

    ``backend="tpu"`` (the default) is what an accelerator that multiplies in bfloat16
    needs: a TPU, or a GPU; notebook 01's "fits" is this figure. ``backend="cpu"`` adds
    the items named "XLA:CPU ...": what XLA:CPU holds beyond it, mostly float32 copies of
    bfloat16 weights (its dot emitter takes no bfloat16). That is the figure
    :mod:`reasonkit.shapes` compares its CPU compile to, and a TPU does not need it.
    Each XLA:CPU item comes from the compiler's buffers at the peak (docs/presets.md#memory
    has the figures); a float32 model gets only the broadcast KV cache.

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
      a token per layer in the model's dtype and one layer's attention matrix.
    - Log-probabilities are chunked over positions (the patch package's ``logprobs``):
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
      (the patch package's ``logprobs.shared_prompt_hidden``): it holds every row's KV cache
      over prompt + answer, and its gradient (``SHARED_KV_COPIES``), through the step.
    - ``backend="cpu"``: in training, the float32 copies of the output layer's slice,
      and of every weight at the step's start (:func:`_cpu_training_items`); in
      sampling, the float32 weight copies and a single KV head's cache broadcast to
      every query head (:func:`_cpu_generation_items`).
    - Fits means total <= 90% of the device's memory.
    """
    if stage not in mesh_lib.STAGES:
        raise ValueError(f"stage={stage!r}: must be one of {', '.join(mesh_lib.STAGES)}")
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r}: must be one of {', '.join(BACKENDS)}")
    hw = hw or detect()
    n_devices = n_devices or hw.device_count
    cfg = mesh_lib.stage_mesh_config(preset, stage)
    shape = mesh_lib.resolve_shape(cfg.shape, n_devices)
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
    for shape in mesh_lib.factorizations(n_devices, len(mesh_cfg.shape)):
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
    for stage in mesh_lib.STAGES:
        b = memory_budget(preset, stage, n_devices, hw)
        row: dict[str, Any] = {"stage": stage, "mesh": b.mesh_shape, "phase": b.phase}
        for col in COLUMNS:
            row[col] = 0
        for name, n in b.items.items():
            row["LoRA state" if name.startswith("LoRA") else name] = n
        row.update(total=b.total, capacity=b.capacity, fits=b.fits)
        rows.append(row)
    return rows
