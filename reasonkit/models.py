"""Tokenizer, base model (tiny or Gemma from Kaggle / HF / disk), LoRA, merge and export.

Every base model, the tiny one included, is a directory in Hugging Face layout
(config.json, model.safetensors, tokenizer.model) loaded through Tunix's
safetensors loaders, so the tiny preset exercises the same path as Gemma. Only
the *source* differs: the tiny directory is built here (:func:`build_tiny_checkpoint`)
with the recipe of :mod:`reasonkit.tiny`, the others are downloaded.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import itertools
import json
import os
import pathlib
import re
from typing import Any, Callable, Iterable

import jax
import jax.numpy as jnp
import numpy as np
import sentencepiece as spm
from flax import nnx

from reasonkit import attention, sampling, template, tiny
from reasonkit import mesh as mesh_lib
from reasonkit.config import LoraConfig, ModelConfig

REQUIRED_FILES = ("config.json", "tokenizer.model")
# The tokenizer files a Hugging Face Gemma directory may hold: downloaded, and copied into exports.
TOKENIZER_FILES = ("tokenizer.model", "tokenizer.json", "tokenizer_config.json",
                   "special_tokens_map.json", "added_tokens.json", "chat_template.jinja",
                   "chat_template.json")


class CheckpointError(ValueError):
    """A model directory that cannot be loaded: says which file and what is wrong."""


# --- tokenizer -------------------------------------------------------------------------


def load_tokenizer(path: str | os.PathLike, vocab_size: int | None = None) -> spm.SentencePieceProcessor:
    """A SentencePiece tokenizer; with ``vocab_size``, check it matches the model's.

    The model's embedding (``num_embed``) must equal the tokenizer's vocabulary, or
    the sampler emits ids SentencePiece cannot decode.
    """
    path = pathlib.Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no tokenizer at {path}")
    tok = spm.SentencePieceProcessor()
    try:
        tok.Load(str(path))
    except Exception as e:  # sentencepiece raises a bare OSError/RuntimeError
        raise CheckpointError(f"{path}: not a SentencePiece model ({e})") from e
    if vocab_size is not None and tok.GetPieceSize() != vocab_size:
        raise CheckpointError(
            f"{path}: tokenizer vocabulary has {tok.GetPieceSize()} pieces but the model's "
            f"vocab_size (num_embed) is {vocab_size}; they must be equal")
    return tok


def token_counter(tok: spm.SentencePieceProcessor) -> Callable[[str], int]:
    """``count(text)``: the tokens ``tok`` makes of ``text``, BOS not included (what
    :func:`reasonkit.data.build_splits` measures budgets with, adding the BOS itself)."""
    return lambda text: len(tok.EncodeAsIds(text))


def stop_token_ids(tok: spm.SentencePieceProcessor) -> list[int]:
    """Ids that end a model turn: ``<eos>`` and ``<end_of_turn>`` (1 and 106 for Gemma 3)."""
    ids = [tok.eos_id()]
    eot = tok.PieceToId(template.END_OF_TURN)
    if eot != tok.unk_id() and eot not in ids:
        ids.append(eot)
    return ids


def train_tokenizer(texts: Iterable[str], out_prefix: str | os.PathLike, vocab_size: int) -> pathlib.Path:
    """Train a Gemma-style SentencePiece model: pad 0, eos 1, bos 2, unk 3, turn and tag symbols.

    Returns the path of ``<out_prefix>.model``.
    """
    if hasattr(spm, "set_random_generator_seed"):
        spm.set_random_generator_seed(0)  # deterministic sampling inside the trainer
    out_prefix = pathlib.Path(out_prefix)
    out_prefix.parent.mkdir(parents=True, exist_ok=True)
    spm.SentencePieceTrainer.Train(
        sentence_iterator=iter(list(texts)), model_prefix=str(out_prefix),
        vocab_size=vocab_size, model_type="bpe", character_coverage=1.0,
        pad_id=0, eos_id=1, bos_id=2, unk_id=3, byte_fallback=True,
        user_defined_symbols=list(template.SPECIAL_TOKENS), split_digits=True,
        max_sentence_length=8192, num_threads=2, minloglevel=2,
        # Keep text byte-exact (newlines, leading spaces) like Gemma's tokenizer.
        normalization_rule_name="identity", remove_extra_whitespaces=False,
        add_dummy_prefix=False, allow_whitespace_only_pieces=True,
        hard_vocab_limit=True,
    )
    return out_prefix.with_suffix(".model")


# --- config <-> Tunix <-> config.json --------------------------------------------------
#
# config.json is read the way transformers reads it (its own config classes, so a field the
# file leaves out takes transformers' default, e.g. query_pre_attn_scalar 256), and every
# field that changes the numbers is either handed to Tunix's config or refused:
#
#   field                          Gemma 3 (Tunix 0.1.7)               Gemma 2 (Tunix 0.1.7)
#   rope theta (global / local)    honoured                            10000 only
#   rope scaling                   linear (factor >= 1), per layer     none
#                                  type: honoured; other types refused
#   query_pre_attn_scalar          head_dim or hidden / heads          head_dim only
#   softcaps (final, attention)    none only                           honoured
#   sliding_window                 honoured                            honoured
#   layer_types / window pattern   5 sliding : 1 full only             honoured
#   activation, rms_norm_eps,      gelu_pytorch_tanh, 1e-6, no bias, tied embeddings,
#   bias, ties, bidirectional      causal: refused otherwise

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
        if (bool(got) if isinstance(value, bool) else got) != value:  # None: transformers' False
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


def model_class(cfg: ModelConfig):
    if cfg.family == "gemma3":
        from tunix.models.gemma3.model import Gemma3

        return Gemma3
    from tunix.models.gemma.model import Gemma

    return Gemma


def new_model(cfg: ModelConfig, seed: int = 0) -> nnx.Module:
    """A randomly initialised model of ``cfg``'s architecture (as :func:`hf_config` describes it)."""
    return attention.use(model_class(cfg)(tunix_config(cfg), rngs=nnx.Rngs(params=seed)), cfg.attention)


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


# --- HF-layout safetensors <-> nnx state -----------------------------------------------


def hf_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor a Hugging Face checkpoint of ``cfg`` holds, with its shape."""
    d, f, n, k, h = cfg.embed_dim, cfg.hidden_dim, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    shapes = {"model.embed_tokens.weight": (cfg.vocab_size, d), "model.norm.weight": (d,)}
    for i in range(cfg.num_layers):
        p = f"model.layers.{i}."
        shapes.update({
            p + "self_attn.q_proj.weight": (n * h, d), p + "self_attn.k_proj.weight": (k * h, d),
            p + "self_attn.v_proj.weight": (k * h, d), p + "self_attn.o_proj.weight": (d, n * h),
            p + "mlp.gate_proj.weight": (f, d), p + "mlp.up_proj.weight": (f, d),
            p + "mlp.down_proj.weight": (d, f),
            p + "input_layernorm.weight": (d,), p + "post_attention_layernorm.weight": (d,),
            p + "pre_feedforward_layernorm.weight": (d,),
            p + "post_feedforward_layernorm.weight": (d,),
        })
        if cfg.family == "gemma3":
            shapes[p + "self_attn.q_norm.weight"] = (h,)
            shapes[p + "self_attn.k_norm.weight"] = (h,)
    return shapes


def check_checkpoint_dir(path: str | os.PathLike, cfg: ModelConfig) -> ModelConfig:
    """Check a model directory has every file and tensor ``cfg`` needs, with the right shapes."""
    from safetensors import safe_open

    path = pathlib.Path(path)
    if not path.is_dir():
        raise CheckpointError(f"{path}: not a directory")
    missing = [name for name in REQUIRED_FILES if not (path / name).is_file()]
    files = sorted(path.glob("*.safetensors"))
    index = path / "model.safetensors.index.json"
    if index.is_file():  # a sharded checkpoint: name the shards a partial download lacks
        try:
            shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (OSError, ValueError, KeyError, AttributeError) as e:
            raise CheckpointError(f"{index}: cannot read its weight_map ({e!r})") from e
        missing += [f"{name} (named in {index.name})" for name in shards
                    if not (path / name).is_file()]
    elif not files:
        missing.append("*.safetensors")
    if missing:
        raise CheckpointError(f"{path}: missing {', '.join(missing)}")
    found = config_from_hf(path / "config.json", expect=cfg)
    shapes: dict[str, tuple[int, ...]] = {}
    for file in files:
        with safe_open(file, framework="numpy") as sf:
            dtypes = set()
            for key in sf.keys():
                tensor = sf.get_slice(key)
                shapes[key.removeprefix("language_model.")] = tuple(tensor.get_shape())
                dtypes.add(tensor.get_dtype())
        if len(dtypes) > 1:  # Tunix reads every tensor of a file with the first one's item size
            raise CheckpointError(
                f"{file}: {file.name} mixes dtypes {sorted(dtypes)}; Tunix's safetensors loader "
                "needs one dtype per file: re-save it with a single dtype")
    expected = hf_shapes(cfg)
    absent = [k for k in expected if k not in shapes]
    wrong = [f"{k}: {shapes[k]} (expected {v})" for k, v in expected.items()
             if k in shapes and shapes[k] != v]
    if absent or wrong:
        raise CheckpointError(
            f"{path}: " + "; ".join(
                ([f"{len(absent)} tensors missing, e.g. {absent[:3]}"] if absent else [])
                + ([f"shape mismatch {wrong[:3]}"] if wrong else [])))
    load_tokenizer(path / "tokenizer.model", vocab_size=cfg.vocab_size)
    return found


def _flat_params(model: nnx.Module) -> dict[str, np.ndarray]:
    state = nnx.state(model, nnx.Param)
    return {".".join(str(p) for p in path): np.asarray(v.value if hasattr(v, "value") else v)
            for path, v in nnx.to_flat_state(state)}


def to_hf_tensors(model: nnx.Module, cfg: ModelConfig) -> dict[str, np.ndarray]:
    """The model's base weights as Hugging Face tensors (the inverse of Tunix's loaders)."""
    d, n, k, h = cfg.embed_dim, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    post_attn = "post_attention_norm" if cfg.family == "gemma3" else "post_attn_norm"
    flat = {key: v for key, v in _flat_params(model).items() if "lora" not in key}

    def proj(w):  # [heads, D, H] -> [heads * H, D]
        return np.transpose(w, (0, 2, 1)).reshape(-1, d)

    out = {"model.embed_tokens.weight": flat["embedder.input_embedding"],
           "model.norm.weight": flat["final_norm.scale"]}
    for i in range(cfg.num_layers):
        src, dst = f"layers.{i}.", f"model.layers.{i}."
        if src + "attn.qkv_einsum.w" in flat:  # fused when num_heads == num_kv_heads
            q, kk, v = flat[src + "attn.qkv_einsum.w"]
        else:
            q = flat[src + "attn.q_einsum.w"]
            kk, v = flat[src + "attn.kv_einsum.w"]
        out[dst + "self_attn.q_proj.weight"] = proj(q)
        out[dst + "self_attn.k_proj.weight"] = proj(kk)
        out[dst + "self_attn.v_proj.weight"] = proj(v)
        out[dst + "self_attn.o_proj.weight"] = flat[src + "attn.attn_vec_einsum.w"].reshape(n * h, d).T
        for name in ("gate_proj", "up_proj", "down_proj"):
            out[dst + f"mlp.{name}.weight"] = flat[src + f"mlp.{name}.kernel"].T
        out[dst + "input_layernorm.weight"] = flat[src + "pre_attention_norm.scale"]
        out[dst + "post_attention_layernorm.weight"] = flat[src + post_attn + ".scale"]
        out[dst + "pre_feedforward_layernorm.weight"] = flat[src + "pre_ffw_norm.scale"]
        out[dst + "post_feedforward_layernorm.weight"] = flat[src + "post_ffw_norm.scale"]
        if cfg.family == "gemma3":
            out[dst + "self_attn.q_norm.weight"] = flat[src + "attn._query_norm.scale"]
            out[dst + "self_attn.k_norm.weight"] = flat[src + "attn._key_norm.scale"]
    del k
    return {key: np.ascontiguousarray(v) for key, v in out.items()}


def save_hf_checkpoint(model: nnx.Module, cfg: ModelConfig, out_dir: str | os.PathLike,
                       tokenizer_path: str | os.PathLike) -> pathlib.Path:
    """Write config.json, model.safetensors and tokenizer.model in Hugging Face layout."""
    import shutil

    from safetensors.numpy import save_file

    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tensors = to_hf_tensors(model, cfg)
    tmp = out / "model.safetensors.tmp"
    save_file(tensors, str(tmp), metadata={"format": "pt"})
    tmp.replace(out / "model.safetensors")
    (out / "config.json").write_text(json.dumps(hf_config(cfg), indent=2))
    if pathlib.Path(tokenizer_path).resolve() != (out / "tokenizer.model").resolve():
        shutil.copy(tokenizer_path, out / "tokenizer.model")
    return out


def load_model(path: str | os.PathLike, cfg: ModelConfig,
               mesh: jax.sharding.Mesh | None = None) -> nnx.Module:
    """Load a checked Hugging Face-layout directory with Tunix's safetensors loader.

    The architecture is config.json's (RoPE, query scaling, softcaps, layer pattern: see
    :func:`tunix_config`), not the preset's defaults; the attention is ``cfg.attention``
    (:func:`reasonkit.attention.use`).
    """
    check_checkpoint_dir(path, cfg)
    config = pathlib.Path(path) / "config.json"
    tunix_cfg = tunix_config(cfg, read_config_json(config), where=str(config))
    dtype = jnp.bfloat16 if cfg.dtype == "bfloat16" else jnp.float32
    if cfg.family == "gemma3":
        from tunix.models.gemma3 import params_safetensors as loader
    else:
        from tunix.models.gemma import params_safetensors as loader
    model = loader.create_model_from_safe_tensors(str(path), tunix_cfg, mesh=mesh, dtype=dtype)
    return attention.use(model, cfg.attention)  # the preset's full-sequence attention


# --- where the weights come from -------------------------------------------------------


def cache_dir() -> pathlib.Path:
    """``$REASONKIT_CACHE``, else ~/.cache/reasonkit."""
    return pathlib.Path(os.environ.get("REASONKIT_CACHE", pathlib.Path.home() / ".cache" / "reasonkit"))


def read_platform_secrets(
        names: tuple[str, ...] = ("HF_TOKEN", "KAGGLE_USERNAME", "KAGGLE_KEY")) -> list[str]:
    """Copy credentials from Kaggle / Colab secrets into the environment, never printing them.

    Returns the names it set (not their values).
    """
    found = []
    for name in names:
        if os.environ.get(name):
            continue
        value = None
        try:  # Kaggle notebooks
            from kaggle_secrets import UserSecretsClient  # type: ignore

            value = UserSecretsClient().get_secret(name)
        except Exception:  # noqa: BLE001 - not on Kaggle, or the secret is not attached
            pass
        if value is None:
            try:  # Colab
                from google.colab import userdata  # type: ignore

                value = userdata.get(name)
            except Exception:  # noqa: BLE001 - not on Colab, or no such secret
                pass
        if value:
            os.environ[name] = value
            found.append(name)
    return found


@contextlib.contextmanager
def _download_errors(source: str):
    """Turn a failed download (no network, no credentials, licence not accepted) into advice."""
    try:
        yield
    except Exception as e:  # noqa: BLE001 - each client raises its own zoo (requests, httpx, ...)
        raise CheckpointError(
            f"cannot download {source!r} ({type(e).__name__}: {e}). Turn the internet on "
            "(Kaggle: notebook settings), accept the Gemma licence on the model's page and set "
            "KAGGLE_USERNAME + KAGGLE_KEY or HF_TOKEN (models.read_platform_secrets() copies "
            "notebook secrets); or, offline, point the preset at a local copy: "
            'REASONKIT_OVERRIDES=\'{"model.source": "/path/to/model_dir"}\'') from e


# What a Hugging Face download fetches: the weights (with a multimodal repo's vision tower:
# one file), the configs and the tokenizer files, nothing else.
DOWNLOAD_FILES = ("config.json", "generation_config.json", "*.safetensors",
                  "model.safetensors.index.json", *TOKENIZER_FILES)


def resolve_source(cfg: ModelConfig) -> pathlib.Path:
    """A local directory holding ``cfg``'s weights: built (tiny), downloaded, or given."""
    source = cfg.source
    if source == "tiny":
        return build_tiny_checkpoint(cfg)
    if source.startswith("kaggle:"):
        import kagglehub

        with _download_errors(source):
            return pathlib.Path(kagglehub.model_download(source.removeprefix("kaggle:")))
    if source.startswith("hf:"):
        from huggingface_hub import snapshot_download

        with _download_errors(source):
            return pathlib.Path(snapshot_download(
                source.removeprefix("hf:"),
                allow_patterns=list(DOWNLOAD_FILES)))
    path = pathlib.Path(source).expanduser()
    if not path.is_dir():
        raise CheckpointError(
            f"model source {source!r} is not 'tiny', 'kaggle:<handle>', 'hf:<repo>' "
            "or an existing directory")
    return path


def load_base(cfg: ModelConfig, mesh: jax.sharding.Mesh | None = None):
    """``(model, tokenizer, model_dir)`` for the preset's base model."""
    path = resolve_source(cfg)
    model = load_model(path, cfg, mesh=mesh)
    return model, load_tokenizer(path / "tokenizer.model", vocab_size=cfg.vocab_size), path


def sampling_graphdef(model: nnx.Module, group: int = 1):
    """``model``'s graphdef as a Tunix sampler should trace it: remat off, the prefill's
    output layer at the last position only, one prefill per ``group`` identical prompts.

    Tunix 0.1.7's Gemma 2 and 3 wrap each attention and MLP block in ``nnx.remat`` when
    their config asks (``model.remat``, on in every Gemma preset); inside the sampler's
    decoding loop that raises flax's ``TraceContextError`` ("Cannot mutate Param from a
    different trace level"). Without a backward pass remat saves nothing. The model's
    class becomes :func:`reasonkit.sampling.sampling_class`'s (``group``: GRPO's G). The
    graphdef merges with the model's own state (the same arrays); ``model`` is left as it was.
    """
    changed: list[tuple[Any, str, Any]] = []
    configs: dict[int, Any] = {}
    base = type(model)
    object.__setattr__(model, "__class__", sampling.sampling_class(base, group))  # plain Python's slot
    try:
        for _, module in nnx.iter_graph(model):
            if not isinstance(module, nnx.Module):
                continue
            remat = getattr(module, "remat_config", None)
            if remat is not None and remat != type(remat).NONE:
                changed.append((module, "remat_config", remat))
                module.remat_config = type(remat).NONE
            config = getattr(module, "config", None)
            remat = getattr(config, "remat_config", None)
            if remat is not None and remat != type(remat).NONE:
                if id(config) not in configs:
                    configs[id(config)] = dataclasses.replace(config, remat_config=type(remat).NONE)
                changed.append((module, "config", config))
                module.config = configs[id(config)]
        return nnx.graphdef(model)
    finally:
        for module, name, value in reversed(changed):
            setattr(module, name, value)
        object.__setattr__(model, "__class__", base)


def without_remat(model: nnx.Module) -> nnx.Module:
    """``model`` for sampling (:func:`sampling_graphdef`): the same arrays, remat off."""
    return nnx.merge(sampling_graphdef(model), nnx.state(model))


# --- LoRA ------------------------------------------------------------------------------


def lora_trace_input(model: nnx.Module, mesh: jax.sharding.Mesh | None = None) -> dict[str, Any]:
    """The dummy call qwix runs to find the projections: Tunix's, with a batch the mesh splits.

    Tunix's ``get_model_input()`` has 2 rows; under its activation constraints (on a TPU)
    a batch must split over the data axes, and 2 rows do not split 4 or 8 ways. The values
    do not matter, only the shapes.
    """
    rows = mesh_lib.data_ways(mesh)
    return {k: jnp.ones((rows, *v.shape[1:]), v.dtype) if hasattr(v, "shape") else v
            for k, v in model.get_model_input().items()}


def _flat_lora_delta(lhs, lora_a, lora_b, lhs_ca, lhs_ba, contract_shape, batch_shape, remain_shape,
                     rank, precision=None):
    """qwix 0.1.8's ``_compute_lora_delta``, ``(lhs A) B``, on ``lhs`` flattened to [tokens, in].

    The same products, but the gradient with respect to ``B`` no longer costs a transposed
    copy of its [tokens, out] cotangent on XLA:CPU. qwix contracts a 3-D ``lhs``
    ([B, T, in]) over its last axis, so autodiff's ``dB = (lhs A)^T g`` is a dot over two
    axes (B and T), which JAX writes as ``(g^T (lhs A))^T``. XLA:CPU lays that dot out
    by copying ``g`` to [out, tokens]: 6 ms for each MLP projection of the tiny SFT step
    at [4, 1024], 12 such copies, 15% of the step. Over one flattened axis the same
    gradient is one dot with no copy (docs/performance.md).
    Anything else goes to qwix: batch axes, contracted axes not last, another backend, or
    several devices (the real-shape compiles of benchmarks/shapes.py stand for a TPU's
    program, which keeps qwix's).
    """
    n, k = lhs.ndim, len(lhs_ca)
    if (lhs_ba or tuple(lhs_ca) != tuple(range(n - k, n)) or jax.default_backend() != "cpu"
            or jax.device_count() != 1):
        return _QWIX_LORA_DELTA(lhs, lora_a, lora_b, lhs_ca, lhs_ba, contract_shape, batch_shape,
                                remain_shape, rank, precision=precision)
    size = int(np.prod(contract_shape))
    dims = (((1,), (0,)), ((), ()))
    delta = jax.lax.dot_general(lhs.reshape(-1, size), lora_a.reshape(size, rank), dims,
                                precision=precision)
    delta = jax.lax.dot_general(delta, lora_b.reshape(rank, -1), dims, precision=precision)
    return delta.reshape(*lhs.shape[:n - k], *remain_shape)


_QWIX_LORA_DELTA: Callable | None = None  # qwix's own, kept by _use_flat_lora_delta


def _use_flat_lora_delta() -> None:
    """Put :func:`_flat_lora_delta` in place of qwix's delta (once, for the process; the
    traces after it use it). A qwix whose function has another signature is left alone."""
    global _QWIX_LORA_DELTA
    from qwix._src.providers import lora as qwix_lora

    own = getattr(qwix_lora, "_compute_lora_delta", None)
    if own is None or own is _flat_lora_delta:
        return
    expected = ["lhs", "lora_a", "lora_b", "lhs_ca", "lhs_ba", "contract_shape", "batch_shape",
                "remain_shape", "rank", "precision"]
    if list(inspect.signature(own).parameters) != expected:
        return
    _QWIX_LORA_DELTA = own
    qwix_lora._compute_lora_delta = _flat_lora_delta


def _is_traced(model: nnx.Module) -> bool:
    return any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(nnx.state(model)))


def apply_lora(model: nnx.Module, lora: LoraConfig, mesh: jax.sharding.Mesh | None = None,
               seed: int = 0) -> nnx.Module:
    """Add qwix LoRA (or QLoRA: NF4 base) adapters to the preset's target projections.

    Works on any mesh (:func:`lora_trace_input`), and on an abstract model under
    ``nnx.eval_shape`` (the adapters are then left for the caller to place).
    """
    import qwix

    _use_flat_lora_delta()
    kwargs: dict[str, Any] = {"module_path": lora.module_path, "rank": lora.rank, "alpha": lora.alpha}
    if lora.qlora:
        kwargs.update(weight_qtype="nf4", tile_size=lora.tile_size)
    provider = qwix.LoraProvider(**kwargs)
    lora_model = qwix.apply_lora_to_model(model, provider, rngs=nnx.Rngs(seed),
                                          **lora_trace_input(model, mesh))
    if not any(isinstance(v, nnx.LoRAParam) for _, v in nnx.iter_graph(lora_model)):
        raise ValueError(f"LoraConfig.module_path={lora.module_path!r} matched no module")
    if mesh is not None and not _is_traced(lora_model):
        # Shard the new adapters only. The base arrays must stay the very objects the base
        # model holds: Tunix shares the frozen backbone between a LoRA actor and its
        # reference by identity, and would silently copy it otherwise. (Tunix's own
        # reshard also skips arrays already on the mesh even when they are replicated.)
        nnx.update(lora_model, mesh_lib.reshard(nnx.state(lora_model, nnx.LoRAParam), mesh))
    return lora_model


def lora_params(model: nnx.Module) -> dict[str, np.ndarray]:
    """The LoRA adapters alone, as ``{path: array}``."""
    return {".".join(map(str, p)): np.asarray(v.value)
            for p, v in nnx.to_flat_state(nnx.state(model, nnx.LoRAParam))}


def base_params(model: nnx.Module) -> dict[str, np.ndarray]:
    """The frozen base weights alone, as ``{path: array}``."""
    return {k: v for k, v in _flat_params(model).items() if "lora" not in k.rsplit(".", 1)[-1]}


def merge_lora(lora_model: nnx.Module, lora: LoraConfig) -> None:
    """Fold every adapter into its base weight in place and zero the adapter.

    Works on qwix's einsum and linear adapters of Gemma 2 and Gemma 3 alike: the
    delta is ``einsum(a, b)`` laid out like the weight, scaled by alpha / rank. A QLoRA
    (NF4) base weight is dequantized first, so the merged weight is full precision.
    """
    import qwix

    scale = lora.alpha / lora.rank
    for _, module in nnx.iter_graph(lora_model):
        if not isinstance(module, nnx.Module):
            continue
        for name in ("w", "kernel"):
            a = getattr(module, f"{name}_lora_a", None)
            b = getattr(module, f"{name}_lora_b", None)
            if a is None or b is None:
                continue
            weight = getattr(module, name)
            if isinstance(weight, nnx.Variable):
                base = weight.value
            else:  # QLoRA: qwix's NF4 base (a WithAux around a QArray): merge in full precision
                base = jnp.asarray(qwix.dequantize(weight.array))
                weight = nnx.Param(base)
                setattr(module, name, weight)
            delta = _lora_delta(module, name, a.value, b.value, base.shape)
            weight.value = (base + scale * delta).astype(base.dtype)
            b.value = jnp.zeros_like(b.value)


def _lora_delta(module, name, a, b, shape):
    if name == "kernel":  # nnx.Linear: [in, r] @ [r, out]
        return a @ b
    lora_str = getattr(module, f"{name}_lora_einsum_str")  # e.g. "BTD,Dr,rNH->BTNH"
    rhs = module.einsum_str.split("->")[0].split(",")[1]  # the weight's axes, e.g. "NDH"
    _, a_axes, b_axes = lora_str.split("->")[0].split(",")
    delta = jnp.einsum(f"{a_axes},{b_axes}->{rhs}", a, b)
    if delta.shape != shape:
        raise ValueError(f"LoRA delta {delta.shape} does not fit weight {shape} ({lora_str})")
    return delta


# --- export: directories that transformers, PEFT, vLLM and GGUF converters load --------
#
# A merged export is a whole model: the source checkpoint's own config.json (only the dtype,
# and for a multimodal Gemma 3 the text-only architecture, change), a generation_config.json
# that stops at the turn end, the source's tokenizer files (or ones written from
# tokenizer.model), a README saying how to load it, and the Gemma notice. An adapter export
# is PEFT's adapter_config.json + adapter_model.safetensors: exact (no bf16 merge rounding)
# and small, applied to the source model.

GEMMA_NOTICE = ("Gemma is provided under and subject to the Gemma Terms of Use found at "
                "ai.google.dev/gemma/terms")

# Gemma's turn format as a chat template (what Gemma's own template gives for text): BOS, each
# turn trimmed between the turn markers, `assistant` named `model`, a system message put at
# the head of the first user turn, and the model's turn opened by add_generation_prompt.
CHAT_TEMPLATE = (
    "{%- if messages and messages[0]['role'] == 'system' -%}"
    "{%- set prefix = messages[0]['content'] + '\\n\\n' -%}{%- set turns = messages[1:] -%}"
    "{%- else -%}{%- set prefix = '' -%}{%- set turns = messages -%}{%- endif -%}"
    "{{ bos_token }}"
    "{%- for message in turns -%}"
    "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}"
    "{{ raise_exception('Conversation roles must alternate user / assistant / user / ...') }}"
    "{%- endif -%}"
    "{%- if message['content'] is string -%}{%- set text = message['content'] | trim -%}"
    "{%- else -%}{%- set text = message['content'] | selectattr('type', 'equalto', 'text')"
    " | map(attribute='text') | map('trim') | join('') -%}{%- endif -%}"
    "{{ '<sot>' + ('model' if message['role'] == 'assistant' else message['role']) + '\\n'"
    " + (prefix if loop.first else '') + text + '<eot>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<sot>model\\n' }}{%- endif -%}"
).replace("<sot>", template.START_OF_TURN).replace("<eot>", template.END_OF_TURN)


def export_config(source_dir: str | os.PathLike, cfg: ModelConfig) -> dict[str, Any]:
    """The export's config.json: the source's own, changing only what the export changes.

    That is the dtype (``cfg.dtype``, the weights written) and, for a multimodal Gemma 3,
    the architecture: the export holds the language model alone (``Gemma3ForCausalLM``
    with the source's ``text_config``). Every other field stays, so RoPE scaling, query
    scaling, layer pattern, ``max_position_embeddings`` and the token ids describe the
    export exactly as they did the source (the loader refused any it could not honour).
    """
    path = pathlib.Path(source_dir) / "config.json"
    raw = read_config_json(path)
    family, text = _text_part(raw, str(path))
    out = dict(text)
    if text is not raw:  # multimodal: its text model, under the text model's own type
        out.update(model_type="gemma3_text", architectures=["Gemma3ForCausalLM"])
        for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
            if key in raw and key not in out:
                out[key] = raw[key]
    out.setdefault("architectures", ["Gemma3ForCausalLM" if family == "gemma3" else "Gemma2ForCausalLM"])
    for key in [k for k in ("dtype", "torch_dtype") if k in out] or ["torch_dtype"]:
        out[key] = cfg.dtype
    return out


def export_generation_config(source_dir: str | os.PathLike,
                             tok: spm.SentencePieceProcessor) -> dict[str, Any]:
    """The source's generation_config.json (or one from its config.json), stopping at the turn end.

    ``eos_token_id`` keeps the source's ids and adds :func:`stop_token_ids` (``<eos>`` and
    ``<end_of_turn>``, looked up in the tokenizer): the model ends every answer with
    ``<end_of_turn>``, and transformers' ``generate`` and vLLM stop at these ids.
    """
    source = pathlib.Path(source_dir)
    gen_path = source / "generation_config.json"
    gen = read_config_json(gen_path) if gen_path.is_file() else {}
    config = read_config_json(source / "config.json")
    eos = gen.get("eos_token_id", config.get("eos_token_id"))
    eos = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
    gen["eos_token_id"] = eos + [i for i in stop_token_ids(tok) if i not in eos]
    gen.setdefault("bos_token_id", tok.bos_id())
    gen.setdefault("pad_token_id", tok.pad_id())
    return gen


HF_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def hf_tokenizer_files(tokenizer_model: str | os.PathLike,
                       names: Iterable[str] = HF_TOKENIZER_FILES) -> dict[str, str]:
    """``names`` of tokenizer.json, tokenizer_config.json and special_tokens_map.json for a
    Gemma-style SentencePiece model: BOS added on encoding, the chat template, the turn
    markers special.

    tokenizer.json is the model converted by transformers (about a second for the tiny
    512 pieces; minutes for Gemma's 262k, which is why a Gemma source's own file is copied
    instead); the other two are written directly.
    """
    import shutil
    import tempfile

    names = list(names)
    tok = load_tokenizer(tokenizer_model)
    specials = {"bos_token": tok.IdToPiece(tok.bos_id()), "eos_token": tok.IdToPiece(tok.eos_id()),
                "unk_token": tok.IdToPiece(tok.unk_id()), "pad_token": tok.IdToPiece(tok.pad_id())}
    turn_markers = [m for m in (template.START_OF_TURN, template.END_OF_TURN)
                    if tok.PieceToId(m) != tok.unk_id()]
    files = {}
    if "tokenizer.json" in names:
        with _quiet_transformers(), tempfile.TemporaryDirectory() as tmp:
            from transformers import GemmaTokenizer

            shutil.copy(tokenizer_model, pathlib.Path(tmp) / "tokenizer.model")
            fast = GemmaTokenizer.from_pretrained(tmp, **specials, mask_token=None,
                                                  add_bos_token=True, add_eos_token=False)
            backend = json.loads(fast.backend_tokenizer.to_str())
        # As in Gemma's tokenizer.json: the turn markers are special (decode(...,
        # skip_special_tokens=True) drops them); other single pieces, such as the answer
        # tags, are text.
        for added in backend.get("added_tokens", []):
            if added["content"] in turn_markers:
                added["special"] = True
        files["tokenizer.json"] = json.dumps(backend, ensure_ascii=False)
    if "tokenizer_config.json" in names:
        files["tokenizer_config.json"] = json.dumps(
            {"tokenizer_class": "GemmaTokenizer", **specials, "add_bos_token": True,
             "add_eos_token": False, "clean_up_tokenization_spaces": False,
             "spaces_between_special_tokens": False, "chat_template": CHAT_TEMPLATE},
            indent=2, ensure_ascii=False)
    if "special_tokens_map.json" in names:
        files["special_tokens_map.json"] = json.dumps(
            {**specials, "additional_special_tokens": turn_markers}, indent=2, ensure_ascii=False)
    return files


def export_tokenizer(source_dir: str | os.PathLike, out_dir: str | os.PathLike) -> list[str]:
    """Copy the source's tokenizer files; write the Hugging Face ones it lacks. Returns the names."""
    import shutil

    source, out = pathlib.Path(source_dir), pathlib.Path(out_dir)
    names = [n for n in TOKENIZER_FILES if (source / n).is_file()]
    for name in names:
        if (source / name).resolve() != (out / name).resolve():
            shutil.copy(source / name, out / name)
    missing = [n for n in HF_TOKENIZER_FILES if n not in names]
    for name, text in hf_tokenizer_files(source / "tokenizer.model", missing).items():
        (out / name).write_text(text)
    return sorted(names + missing)


def _base_model_id(cfg: ModelConfig, source_dir: str | os.PathLike) -> str:
    """What to load the base model from: the Hugging Face repo when it came from one."""
    return cfg.source.removeprefix("hf:") if cfg.source.startswith("hf:") else str(source_dir)


def export_readme(cfg: ModelConfig, lora: LoraConfig, kind: str, base: str, stops: list[int], *,
                  name: str | None = None) -> str:
    """The README.md of an export (``kind`` "merged" or "adapter"): what it is, how to load it, licence."""
    family = {"gemma3": "Gemma 3", "gemma2": "Gemma 2"}[cfg.family]
    eager = ', attn_implementation="eager"' if cfg.family == "gemma2" else ""
    vllm_rank = max(8, 1 << (lora.rank - 1).bit_length())  # vLLM takes powers of two from 8
    what = (f"the base model with the LoRA adapters merged into its weights ({cfg.dtype})"
            if kind == "merged" else f"LoRA adapters in PEFT's format (exact values), for the base `{base}`")
    lines = [f"# {name or 'reasonkit export'}", "",
             f"A {family} model post-trained for step-by-step answers with "
             f"reasonkit (LoRA rank {lora.rank}, alpha {lora.alpha:g}) "
             f"from `{cfg.source}`: {what}.", "",
             "## Prompt", "",
             "The model learned to answer a user turn that holds this instruction, a newline and the "
             "question, and answers in `<reasoning>...</reasoning>` then `<answer>...</answer>`, "
             f"ending its turn with `{template.END_OF_TURN}`:", "",
             "```python", f"INSTRUCTION = {template.INSTRUCTION!r}",
             'messages = [{"role": "user", "content": INSTRUCTION + "\\n" + "What is 7 * 6?"}]', "```", ""]
    if kind == "merged":
        lines += [
            "## Load it", "",
            "transformers (the chat template and BOS come with the tokenizer; `generate` stops at "
            f"`{template.END_OF_TURN}` through generation_config.json, ids {stops}):", "",
            "```python", "from transformers import AutoModelForCausalLM, AutoTokenizer", "",
            'path = "path/to/this/folder"', "tok = AutoTokenizer.from_pretrained(path)",
            f"model = AutoModelForCausalLM.from_pretrained(path{eager})",
            "inputs = tok.apply_chat_template(messages, add_generation_prompt=True, return_dict=True,",
            '                                 return_tensors="pt")',
            "out = model.generate(**inputs, max_new_tokens=512)",
            'print(tok.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True))', "```", ""]
        if cfg.family == "gemma2":
            lines += ["Gemma 2 needs `attn_implementation=\"eager\"`: transformers' default `sdpa` "
                      "attention ignores Gemma 2's attention logit softcap and gives other logits.", ""]
        lines += [
            "vLLM: `vllm serve path/to/this/folder` (OpenAI-compatible chat API), or "
            "`vllm.LLM(model=path).chat(messages)`.", "",
            "llama.cpp / Ollama: convert to GGUF with llama.cpp's `python convert_hf_to_gguf.py "
            "path/to/this/folder --outfile model.gguf`, then `ollama create` from a Modelfile "
            "holding `FROM ./model.gguf`.", ""]
    else:
        lines += [
            "## Load it", "",
            "PEFT, on the base model (its tokenizer; stop at "
            f"`{template.END_OF_TURN}` with `eos_token_id={stops}` when the base's generation config "
            "does not):", "",
            "```python", "import torch", "from peft import PeftModel",
            "from transformers import AutoModelForCausalLM, AutoTokenizer", "",
            f'base = "{base}"', "tok = AutoTokenizer.from_pretrained(base)",
            f"model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32{eager})",
            'model = PeftModel.from_pretrained(model, "path/to/this/folder")',
            "inputs = tok.apply_chat_template(messages, add_generation_prompt=True, return_dict=True,",
            '                                 return_tensors="pt")',
            f"out = model.generate(**inputs, max_new_tokens=512, eos_token_id={stops})", "```", "",
            f"vLLM: `vllm serve {base} --enable-lora --max-lora-rank {vllm_rank} "
            "--lora-modules reasonkit=path/to/this/folder`. `model.merge_and_unload()` gives a "
            "plain transformers model.", ""]
    lines += ["## Licence", ""]
    if cfg.source == "tiny":
        lines += ["reasonkit pretrained this model from scratch on its synthetic tasks (Gemma 3's "
                  "architecture, no Gemma weights); it is Apache-2.0, like reasonkit.", ""]
    else:
        lines += [f"{GEMMA_NOTICE}.", "",
                  f"This is a Model Derivative of Gemma: reasonkit modified `{cfg.source}` by "
                  "fine-tuning (LoRA). Whoever you share it with is bound by the Gemma Terms of Use, "
                  "including the use restrictions of the Gemma Prohibited Use Policy "
                  "(ai.google.dev/gemma/prohibited_use_policy); pass the terms on with it.", ""]
    return "\n".join(lines)


def _write_notices(out: pathlib.Path, cfg: ModelConfig, readme: str) -> None:
    (out / "README.md").write_text(readme)
    if cfg.source != "tiny":  # the Gemma Terms ask for the notice in a "Notice" text file
        (out / "NOTICE").write_text(GEMMA_NOTICE + "\n")


def export_merged(lora_model: nnx.Module, cfg: ModelConfig, lora: LoraConfig,
                  out_dir: str | os.PathLike, source_dir: str | os.PathLike, *,
                  name: str | None = None) -> pathlib.Path:
    """Save base + merged LoRA as a complete Hugging Face directory (Gemma 2 and 3).

    ``source_dir`` is the base model's directory (:func:`resolve_source`): its config,
    generation config and tokenizer files are carried over (see :func:`export_config`).
    The LoRA model itself is left unchanged (a copy is merged); model.safetensors is
    written last, so its presence means the export is complete.
    """
    from safetensors.numpy import save_file

    source, out = pathlib.Path(source_dir), pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = load_tokenizer(source / "tokenizer.model", vocab_size=cfg.vocab_size)
    (out / "config.json").write_text(json.dumps(export_config(source, cfg), indent=2))
    (out / "generation_config.json").write_text(json.dumps(export_generation_config(source, tok), indent=2))
    export_tokenizer(source, out)
    _write_notices(out, cfg, export_readme(cfg, lora, "merged", _base_model_id(cfg, source),
                                           stop_token_ids(tok), name=name))
    graph, state = nnx.split(lora_model)
    copy = nnx.merge(graph, jax.tree.map(lambda x: x, state))
    merge_lora(copy, lora)
    tmp = out / "model.safetensors.tmp"
    save_file(to_hf_tensors(copy, cfg), str(tmp), metadata={"format": "pt"})
    tmp.replace(out / "model.safetensors")
    return out


# qwix's adapter layouts (see :func:`_lora_delta`) and the transformers projections they feed.
_PEFT_LAYOUT = {
    "q_einsum": ("BTD,Dr,rNH->BTNH", "self_attn", ("q_proj",)),
    "kv_einsum": ("BSD,Dr,rCKH->CBSKH", "self_attn", ("k_proj", "v_proj")),
    "qkv_einsum": ("BTD,Dr,rSNH->SBTNH", "self_attn", ("q_proj", "k_proj", "v_proj")),
    "attn_vec_einsum": ("BTNH,NHr,rD->BTD", "self_attn", ("o_proj",)),
}


def peft_tensors(lora_model: nnx.Module) -> tuple[dict[str, np.ndarray], list[str]]:
    """The LoRA adapters in PEFT's layout, and the transformers modules they adapt.

    PEFT adds ``scale * B @ A`` (``scale = alpha / r``, as :func:`merge_lora`) to a
    transformers weight ``[out, in]``; qwix's ``a`` / ``b`` are laid out like the Tunix
    weight. For each adapted module (key prefix ``base_model.model.model.layers.{i}.``):

        Tunix module      a            b             PEFT lora_A [r, in]     lora_B [out, r]
        q_einsum          [D, r]       [r, N, H]     a.T                     b -> [N*H, r]
        kv_einsum         [D, r]       [r, 2, K, H]  a.T (k and v share it)  b[:, c] -> [K*H, r]
        qkv_einsum        [D, r]       [r, 3, N, H]  a.T                     b[:, c] -> [N*H, r]
        attn_vec_einsum   [N, H, r]    [r, D]        a -> [r, N*H]           b.T
        mlp.*_proj        [in, r]      [r, out]      a.T                     b.T
    """
    tensors: dict[str, np.ndarray] = {}
    for path, module in nnx.iter_graph(lora_model):
        if not isinstance(module, nnx.Module) or len(path) != 4 or path[0] != "layers":
            continue
        prefix = f"base_model.model.model.layers.{path[1]}."
        for param in ("w", "kernel"):
            a, b = getattr(module, f"{param}_lora_a", None), getattr(module, f"{param}_lora_b", None)
            if a is None or b is None:
                continue
            a, b = np.asarray(a.value), np.asarray(b.value)
            rank = b.shape[0]
            if param == "kernel":  # nnx.Linear in the MLP: gate_proj / up_proj / down_proj
                pieces = [(f"mlp.{path[3]}", a.T, b.T)]
            else:
                layout = _PEFT_LAYOUT.get(str(path[3]))
                found = getattr(module, "w_lora_einsum_str", None)
                if layout is None or found != layout[0]:
                    raise ValueError(f"{'.'.join(map(str, path))}: LoRA einsum {found!r} has no PEFT "
                                     f"mapping (known: {sorted(_PEFT_LAYOUT)} as {_PEFT_LAYOUT})")
                _, block, names = layout
                if path[3] == "attn_vec_einsum":
                    pieces = [(f"{block}.o_proj", a.reshape(-1, rank).T, b.T)]
                elif len(names) == 1:
                    pieces = [(f"{block}.{names[0]}", a.T, b.reshape(rank, -1).T)]
                else:
                    pieces = [(f"{block}.{n}", a.T, b[:, c].reshape(rank, -1).T) for c, n in enumerate(names)]
            for module_name, lora_a, lora_b in pieces:
                tensors[f"{prefix}{module_name}.lora_A.weight"] = np.ascontiguousarray(lora_a)
                tensors[f"{prefix}{module_name}.lora_B.weight"] = np.ascontiguousarray(lora_b)
    modules = sorted({k.removeprefix("base_model.model.").removesuffix(".lora_A.weight")
                      for k in tensors if k.endswith("lora_A.weight")})
    return tensors, modules


def export_adapter(lora_model: nnx.Module, cfg: ModelConfig, lora: LoraConfig,
                   out_dir: str | os.PathLike, source_dir: str | os.PathLike, *,
                   name: str | None = None) -> pathlib.Path:
    """Save the LoRA adapters alone as a PEFT directory (adapter_config.json + adapter_model.safetensors).

    Exact (the adapters' own values, no merge into bf16 weights) and small; PEFT applies
    them to the source model (``PeftModel.from_pretrained(base, out_dir)``). ``target_modules``
    name transformers' projections (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj,
    down_proj); when the adapters cover some layers only, it is a regular expression of
    the exact module names.
    """
    from safetensors.numpy import save_file

    source, out = pathlib.Path(source_dir), pathlib.Path(out_dir)
    tensors, modules = peft_tensors(lora_model)
    if not tensors:
        raise ValueError("the model has no LoRA adapters to export")
    by_layer: dict[str, set[str]] = {}
    for m in modules:  # "model.layers.3.self_attn.q_proj"
        layer, short = m.split(".")[2], m.rsplit(".", 1)[1]
        by_layer.setdefault(layer, set()).add(short)
    uniform = len(by_layer) == cfg.num_layers and len({frozenset(s) for s in by_layer.values()}) == 1
    targets: list[str] | str = (sorted(next(iter(by_layer.values()))) if uniform
                                else "|".join(re.escape(m) for m in modules))
    adapter_config = {
        "peft_type": "LORA", "task_type": "CAUSAL_LM",
        "base_model_name_or_path": _base_model_id(cfg, source), "r": lora.rank,
        "lora_alpha": lora.alpha, "lora_dropout": 0.0, "target_modules": targets, "bias": "none",
        "fan_in_fan_out": False, "inference_mode": True, "use_rslora": False, "use_dora": False,
        "init_lora_weights": True, "modules_to_save": None, "layers_to_transform": None,
        "layers_pattern": None, "rank_pattern": {}, "alpha_pattern": {}, "revision": None,
    }
    out.mkdir(parents=True, exist_ok=True)
    tok = load_tokenizer(source / "tokenizer.model", vocab_size=cfg.vocab_size)
    (out / "adapter_config.json").write_text(json.dumps(adapter_config, indent=2))
    _write_notices(out, cfg, export_readme(cfg, lora, "adapter", _base_model_id(cfg, source),
                                           stop_token_ids(tok), name=name))
    tmp = out / "adapter_model.safetensors.tmp"
    save_file(tensors, str(tmp), metadata={"format": "pt"})
    tmp.replace(out / "adapter_model.safetensors")
    return out


# --- the tiny base model: built with reasonkit.tiny's recipe -----------------------------


def build_tiny_checkpoint(cfg: ModelConfig, *, steps: int = tiny.STEPS, seed: int = 0,
                          out_root: str | os.PathLike | None = None, force: bool = False) -> pathlib.Path:
    """The tiny base model: tokenizer + a pretraining run (:mod:`reasonkit.tiny`), in HF layout.

    The repo ships the result for the tiny preset in ``reasonkit/assets/tiny``
    (rebuild it with ``python -m reasonkit.models``: about 45 minutes on a 2-core
    CPU); any other config, step count or seed is built on first use (about 0.5 s a
    step) and cached under ``cache_dir()/tiny-<key>``.
    """
    key = tiny.key(cfg, steps, seed)
    shipped = tiny.ASSET / "pretrain.json"
    if out_root is None and not force and shipped.is_file() and json.loads(
            shipped.read_text()).get("key") == key:
        return tiny.ASSET
    out = pathlib.Path(out_root or cache_dir()) / f"tiny-{key}"
    if (out / "model.safetensors").is_file() and not force:
        return out
    tok_path = train_tokenizer(tiny.tokenizer_texts(seed), out / "tokenizer", cfg.vocab_size)
    tok = load_tokenizer(tok_path, vocab_size=cfg.vocab_size)
    records, excluded = tiny.pretraining_records(seed)
    docs = tiny.corpus(records)
    model = new_model(cfg, seed)
    losses = tiny.pretrain(model, tok, docs, steps=steps, seed=seed, seq_len=tiny.SEQ_LEN)
    save_hf_checkpoint(model, cfg, out, tok_path)
    (out / "tokenizer.vocab").unlink(missing_ok=True)
    (out / "pretrain.json").write_text(json.dumps(
        {"key": key, "steps": steps, "seed": seed, "first_loss": losses[0],
         "final_loss": losses[-1], "documents": len(docs),
         "excluded_pool_prompts": excluded, "loss_every_50": losses[::50]}, indent=2))
    return out


if __name__ == "__main__":  # rebuild the shipped tiny checkpoint: python -m reasonkit.models [out_root]
    import shutil
    import sys

    from reasonkit.config import get_preset

    built = build_tiny_checkpoint(get_preset("tiny").model, force=True,
                                  out_root=sys.argv[1] if len(sys.argv) > 1 else None)
    tiny.ASSET.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "model.safetensors", "tokenizer.model", "pretrain.json"):
        shutil.copy(built / name, tiny.ASSET / name)
    print(f"tiny checkpoint -> {tiny.ASSET}")
