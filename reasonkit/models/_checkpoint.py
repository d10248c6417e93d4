"""Hugging Face-layout checkpoints: build, check, save and load a model.

Every base model, the tiny one included, is a directory in Hugging Face layout
(config.json, model.safetensors, tokenizer.model) loaded through Tunix's safetensors
loaders (:func:`load_model`, after :func:`check_checkpoint_dir` has named whatever is
missing or misshapen). :func:`new_model` builds a randomly initialised one,
:func:`to_hf_tensors` / :func:`save_hf_checkpoint` write a model back in that layout.
Every model built or loaded here runs the preset's attention
(the patch package's ``attention.use``).
"""

from __future__ import annotations

import json
import os
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from reasonkit.config import ModelConfig
from reasonkit.models._architecture import (
    CheckpointError,
    config_from_hf,
    hf_config,
    read_config_json,
    tunix_config,
)
from reasonkit.models._tokenizer import load_tokenizer
from reasonkit.tunix_patches import attention, lora_delta

__all__ = ["REQUIRED_FILES", "model_class", "attention_impl", "use_optimisations", "new_model", "hf_shapes",
           "check_checkpoint_dir", "to_hf_tensors", "save_hf_checkpoint", "load_model"]


REQUIRED_FILES = ("config.json", "tokenizer.model")


def model_class(cfg: ModelConfig):
    if cfg.family == "gemma3":
        from tunix.models.gemma3.model import Gemma3

        return Gemma3
    from tunix.models.gemma.model import Gemma

    return Gemma


def attention_impl(cfg: ModelConfig) -> str:
    """The attention a model built for ``cfg`` runs: ``cfg.attention`` ("tunix" is Tunix's own;
    a preset without the "attention" optimisation sets it so)."""
    return cfg.attention


def use_optimisations(optimisations) -> None:
    """Put qwix's LoRA delta in the form a preset's ``optimisations`` ask for, process-wide.

    With "flat LoRA delta" the patch package's flattened delta (said once, when installed),
    without it qwix's own. Models built after the call trace with it.
    """
    if "flat LoRA delta" not in optimisations:
        lora_delta.uninstall()
    elif not lora_delta.installed():
        print(lora_delta.install())  # a process-wide change: said once, when it is made


def new_model(cfg: ModelConfig, seed: int = 0) -> nnx.Module:
    """A randomly initialised model of ``cfg``'s architecture (as :func:`hf_config` describes it)."""
    return attention.use(model_class(cfg)(tunix_config(cfg), rngs=nnx.Rngs(params=seed)),
                         attention_impl(cfg))


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
    (the patch package's ``attention.use``).
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
    return attention.use(model, attention_impl(cfg))  # the preset's full-sequence attention
