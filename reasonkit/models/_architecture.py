"""config.json, reasonkit's :class:`~reasonkit.config.ModelConfig` and Tunix's: one from the other.

config.json is read the way transformers reads it (its own config classes, so a field the
file leaves out takes transformers' default, e.g. query_pre_attn_scalar 256), and every
field that changes the numbers is either handed to Tunix's config (:func:`tunix_config`)
or refused with a :class:`CheckpointError` naming the field and its value::

    field                          Gemma 3 (Tunix 0.1.7)               Gemma 2 (Tunix 0.1.7)
    rope theta (global / local)    honoured                            10000 only
    rope scaling                   linear (factor >= 1), per layer     none
                                   type: honoured; other types refused
    query_pre_attn_scalar          head_dim or hidden / heads          head_dim only
    softcaps (final, attention)    none only                           honoured
    sliding_window                 honoured                            honoured
    layer_types / window pattern   5 sliding : 1 full only             honoured
    activation, rms_norm_eps,      gelu_pytorch_tanh, 1e-6, no bias, tied embeddings,
    bias, ties, bidirectional      causal: refused otherwise

:func:`hf_config` writes the config.json of a new model, :func:`config_from_hf` reads one
back. This is the first module of :mod:`reasonkit.models`: it imports none of the others,
and :class:`CheckpointError`, which every later one raises, is defined here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import os
import pathlib
from typing import Any

import jax.numpy as jnp
import numpy as np

from reasonkit.config import ModelConfig

__all__ = ["CheckpointError", "read_config_json", "tunix_config", "hf_config", "config_from_hf"]


class CheckpointError(ValueError):
    """A model directory that cannot be loaded: says which file and what is wrong."""


# transformers' names for the shapes, and ours.
_HF_FIELDS = {"num_layers": "num_hidden_layers", "vocab_size": "vocab_size",
              "embed_dim": "hidden_size", "hidden_dim": "intermediate_size",
              "num_heads": "num_attention_heads", "head_dim": "head_dim",
              "num_kv_heads": "num_key_value_heads", "sliding_window": "sliding_window"}
# Fields Tunix hard-codes: (transformers' attribute, the one value Tunix computes with).
_FIXED = (("hidden_activation", "gelu_pytorch_tanh"), ("rms_norm_eps", 1e-6),
          ("attention_bias", False), ("tie_word_embeddings", True),
          ("use_bidirectional_attention", False))
_LAYER_TYPES = ("sliding_attention", "full_attention")


@contextlib.contextmanager
def _quiet_transformers():
    """Import / call transformers without its advice that PyTorch is missing (JAX needs
    none) and its warnings about rope keys, which :func:`tunix_config` judges itself."""
    key = "TRANSFORMERS_NO_ADVISORY_WARNINGS"
    old = os.environ.get(key)
    os.environ[key] = "1"
    try:
        from transformers.utils import logging as hf_logging

        verbosity = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()
        try:
            yield
        finally:
            hf_logging.set_verbosity(verbosity)
    finally:
        if old is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = old


def read_config_json(path: str | os.PathLike) -> dict[str, Any]:
    """A config.json (or generation_config.json) as a dict, or a CheckpointError saying why not."""
    path = pathlib.Path(path)
    try:
        raw = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path}: cannot read {path.name} ({e})") from e
    if not isinstance(raw, dict):
        raise CheckpointError(f"{path}: {path.name} holds a {type(raw).__name__}, not an object")
    return raw


def _text_part(raw: dict[str, Any], where: str) -> tuple[str, dict[str, Any]]:
    """``(family, the text model's fields)`` of a Gemma 2 / Gemma 3 (text or multimodal) config."""
    model_type = str(raw.get("model_type", ""))
    family = "gemma2" if model_type == "gemma2" else "gemma3" if model_type.startswith("gemma3") else None
    if family is None:
        raise CheckpointError(f"{where}: model_type {model_type!r} is not Gemma 2 or Gemma 3")
    text = raw.get("text_config", raw) if model_type == "gemma3" else raw
    if not isinstance(text, dict):
        raise CheckpointError(f"{where}: text_config is a {type(text).__name__}, not an object")
    return family, text


def _hf_text_config(family: str, text: dict[str, Any], where: str):
    """transformers' own reading of the text model's config (defaults filled in)."""
    with _quiet_transformers():
        import transformers

        cls = transformers.Gemma2Config if family == "gemma2" else transformers.Gemma3TextConfig
        fields = {k: v for k, v in text.items() if k not in ("model_type", "text_config", "vision_config")}
        try:
            return cls(**fields)
        except Exception as e:  # noqa: BLE001 - strict dataclass validation raises its own types
            raise CheckpointError(
                f"{where}: transformers {transformers.__version__} cannot read it as "
                f"{cls.__name__}: {e}") from e


def _refuse(where: str, field: str, value: Any, why: str, given: dict[str, Any] | None = None):
    """Raise the CheckpointError naming ``field`` and ``value``; ``given``: the file's fields."""
    if given is not None and field.isidentifier() and field not in given:
        why += " (the file leaves it out: this is transformers' default)"
    raise CheckpointError(f"{where}: {field}={value!r}: {why}")


def _rope(params: Any, field: str, where: str) -> tuple[float, float]:
    """``(theta, linear scale factor)`` of one rope parameter dict, or a refusal."""
    if not isinstance(params, dict):
        _refuse(where, field, params, "is not an object")
    kind, legacy = params.get("rope_type", "default"), params.get("type")
    if legacy is not None and legacy != kind:
        _refuse(where, field, params, f"says rope_type {kind!r} and type {legacy!r}; transformers "
                "computes with rope_type: write the scaling you mean as rope_type")
    if kind == "default":
        factor = 1.0
    elif kind == "linear":
        factor = params.get("factor")
        if not (isinstance(factor, (int, float)) and factor >= 1):
            _refuse(where, field, params, "linear RoPE scaling needs a factor >= 1")
    else:
        _refuse(where, field, params, f"rope_type {kind!r}: Tunix 0.1.7 implements RoPE "
                "without scaling ('default') or with linear scaling only")
    if params.get("partial_rotary_factor", 1.0) != 1.0:
        _refuse(where, field, params, "Tunix 0.1.7 rotates every dimension (partial_rotary_factor 1)")
    theta = params.get("rope_theta")
    if not (isinstance(theta, (int, float)) and theta > 0):
        _refuse(where, field, params, "needs a positive rope_theta")
    return float(theta), float(factor)


def _tunix_config(cfg: ModelConfig, family: str, t, text: dict[str, Any], where: str):
    """Tunix's ModelConfig from ``cfg``'s shapes and transformers' config ``t`` (read from ``text``)."""
    if family != cfg.family:
        raise CheckpointError(f"{where}: a {family} config, but the model is {cfg.family}")

    def refuse(field: str, value: Any, why: str):
        _refuse(where, field, value, why, given=text)

    for name, value in _FIXED:
        got = getattr(t, name, value)
        if isinstance(value, bool):
            same = bool(got) == value  # None: transformers' False
        elif isinstance(value, float):  # equal within float32 rounding (a GGUF file's 1e-6)
            same = isinstance(got, (int, float)) and np.float32(got) == np.float32(value)
        else:
            same = got == value
        if not same:
            refuse(name, got, f"Tunix 0.1.7's Gemma computes with {value!r} only")
    types = list(t.layer_types)
    if len(types) != cfg.num_layers or not set(types) <= set(_LAYER_TYPES):
        refuse("layer_types", types, f"needs {cfg.num_layers} entries, each one of {list(_LAYER_TYPES)}")
    pattern_field = ("layer_types" if "layer_types" in text else "sliding_window_pattern"
                     if "sliding_window_pattern" in text else "layer_types")
    pattern_value = text.get(pattern_field, types)
    rope = t.rope_parameters or {}
    per_type = isinstance(rope, dict) and set(_LAYER_TYPES) & set(rope) and all(
        isinstance(rope.get(k), dict) for k in set(types))
    scalar = t.query_pre_attn_scalar
    dtype = jnp.bfloat16 if cfg.dtype == "bfloat16" else jnp.float32

    if family == "gemma3":
        from tunix.models.gemma3 import model as g3

        tunix_types = [("sliding_attention" if a == g3.AttentionType.LOCAL_SLIDING else "full_attention")
                       for _, a in zip(range(cfg.num_layers), itertools.cycle(g3.GEMMA3_ATTENTION_PATTERN))]
        if types != tunix_types:
            refuse(pattern_field, pattern_value, "Tunix 0.1.7's Gemma 3 always repeats 5 "
                   "sliding-window layers then 1 full-attention layer")
        if not per_type:
            refuse("rope_parameters", rope, "a Gemma 3 config has one RoPE per layer type")
        scaled = "rope_scaling" if "rope_scaling" in text else "rope_parameters['full_attention']"
        global_base, global_scale = _rope(rope.get("full_attention"), scaled, where)
        local_base, local_scale = _rope(rope.get("sliding_attention"),
                                        "rope_parameters['sliding_attention']", where)
        if scalar == cfg.head_dim:
            query_norm = g3.QueryPreAttentionNormalisation.BY_ONE_OVER_SQRT_HEAD_DIM
        elif scalar == cfg.embed_dim // cfg.num_heads:
            query_norm = g3.QueryPreAttentionNormalisation.BY_ONE_OVER_SQRT_EMBED_DIM_DIV_NUM_HEADS
        else:
            refuse("query_pre_attn_scalar", scalar, "Tunix 0.1.7's Gemma 3 scales queries by "
                   f"1/sqrt(head_dim={cfg.head_dim}) or 1/sqrt(hidden_size / num_attention_heads="
                   f"{cfg.embed_dim // cfg.num_heads}) only")
        for name in ("final_logit_softcapping", "attn_logit_softcapping"):
            if getattr(t, name) is not None:
                refuse(name, getattr(t, name), "Tunix 0.1.7's Gemma 3 has no softcapping")
        return g3.ModelConfig(
            num_layers=cfg.num_layers, num_embed=cfg.vocab_size, embed_dim=cfg.embed_dim,
            hidden_dim=cfg.hidden_dim, num_heads=cfg.num_heads, head_dim=cfg.head_dim,
            num_kv_heads=cfg.num_kv_heads, sliding_window_size=cfg.sliding_window,
            local_base_frequency=local_base, global_base_frequency=global_base,
            local_scale_factor=local_scale, global_scale_factor=global_scale,
            query_pre_attn_norm=query_norm,
            remat_config=g3.RematConfig.BLOCK if cfg.remat else g3.RematConfig.NONE,
            param_dtype=dtype,
        )

    from tunix.models.gemma import model as g2

    ropes = ([(rope[k], f"rope_parameters[{k!r}]") for k in sorted(set(types))] if per_type
             else [(rope, "rope_scaling" if "rope_scaling" in text else "rope_parameters")])
    for params, field in ropes:
        theta, factor = _rope(params, field, where)
        if factor != 1.0:
            refuse(field, params, "Tunix 0.1.7's Gemma 2 has no RoPE scaling")
        if theta != 10_000.0:
            refuse("rope_theta" if "rope_theta" in text else field, theta,
                   "Tunix 0.1.7's Gemma 2 fixes the RoPE base at 10000")
    if scalar != cfg.head_dim:
        refuse("query_pre_attn_scalar", scalar, "Tunix 0.1.7's Gemma 2 scales queries by "
               f"1/sqrt(head_dim={cfg.head_dim}) only")
    kinds = {"sliding_attention": g2.AttentionType.LOCAL_SLIDING, "full_attention": g2.AttentionType.GLOBAL}
    return g2.ModelConfig(
        num_layers=cfg.num_layers, num_embed=cfg.vocab_size, embed_dim=cfg.embed_dim,
        hidden_dim=cfg.hidden_dim, num_heads=cfg.num_heads, head_dim=cfg.head_dim,
        num_kv_heads=cfg.num_kv_heads, final_logit_softcap=t.final_logit_softcapping,
        use_post_attn_norm=True, use_post_ffw_norm=True, attn_logits_soft_cap=t.attn_logit_softcapping,
        sliding_window_size=cfg.sliding_window, attention_types=tuple(kinds[k] for k in types),
        remat_config=g2.RematConfig.BLOCK if cfg.remat else g2.RematConfig.NONE,
    )


def tunix_config(cfg: ModelConfig, hf: dict[str, Any] | None = None, *, where: str = "config.json"):
    """The Tunix ModelConfig of ``cfg``'s shapes and ``hf``'s architecture fields.

    ``hf`` is a checkpoint's config.json as a dict (None: the one :func:`hf_config` writes
    for ``cfg``). Every field that changes the numbers is honoured through Tunix's config
    or refused with a CheckpointError naming the field and its value (table above).
    """
    family, text = _text_part(hf_config(cfg) if hf is None else hf, where)
    return _tunix_config(cfg, family, _hf_text_config(family, text, where), text, where)


def hf_config(cfg: ModelConfig) -> dict[str, Any]:
    """config.json for a new model of ``cfg`` in Hugging Face transformers' layout."""
    common = {
        "hidden_size": cfg.embed_dim, "intermediate_size": cfg.hidden_dim,
        "num_hidden_layers": cfg.num_layers, "num_attention_heads": cfg.num_heads,
        "num_key_value_heads": cfg.num_kv_heads, "head_dim": cfg.head_dim,
        "vocab_size": cfg.vocab_size, "sliding_window": cfg.sliding_window,
        "query_pre_attn_scalar": cfg.head_dim, "rms_norm_eps": 1e-6,
        "hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": True,
        "pad_token_id": 0, "eos_token_id": 1, "bos_token_id": 2,
        "torch_dtype": cfg.dtype,
    }
    if cfg.family == "gemma3":
        return {"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
                "rope_theta": 1_000_000.0, "rope_local_base_freq": 10_000.0,
                "sliding_window_pattern": 6, "final_logit_softcapping": None,
                "attn_logit_softcapping": None, **common}
    return {"architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2",
            "rope_theta": 10_000.0, "final_logit_softcapping": 30.0,
            "attn_logit_softcapping": 50.0, **common}


def config_from_hf(path: str | os.PathLike, expect: ModelConfig | None = None) -> ModelConfig:
    """Read a config.json (Gemma 2 / Gemma 3, text or multimodal) into a ModelConfig.

    Fields the file leaves out take transformers' defaults, as transformers would load
    it. With ``expect``, every shape must match, or a CheckpointError lists them; a field
    Tunix cannot represent is refused either way (see :func:`tunix_config`).
    """
    path = pathlib.Path(path)
    raw = read_config_json(path)
    family, text = _text_part(raw, str(path))
    t = _hf_text_config(family, text, str(path))
    dims = {ours: getattr(t, hf) for ours, hf in _HF_FIELDS.items()}
    bad = {k: v for k, v in dims.items() if not (isinstance(v, int) and v > 0)}
    if bad:
        raise CheckpointError(f"{path}: " + "; ".join(
            f"{_HF_FIELDS[k]}={v!r} (Tunix needs a positive int)" for k, v in bad.items()))
    base = expect or ModelConfig(family=family, source=str(path.parent), **dims)
    found = dataclasses.replace(base, family=family, **dims)
    if expect is not None:
        diff = [f"{k}: preset {getattr(expect, k)!r} vs checkpoint {getattr(found, k)!r}"
                for k in ("family", *dims) if getattr(expect, k) != getattr(found, k)]
        if diff:
            raise CheckpointError(f"{path} does not match the preset's model: " + "; ".join(diff))
    _tunix_config(found, family, t, text, str(path))  # refuses what Tunix cannot represent
    return found
