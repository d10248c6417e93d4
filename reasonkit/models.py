"""Tokenizer, base model (tiny or Gemma from Kaggle / HF / disk), LoRA, merge and export.

Every base model, the tiny one included, is a directory in Hugging Face layout
(config.json, model.safetensors, tokenizer.model) loaded through Tunix's
safetensors loaders, so the tiny preset exercises the same path as Gemma. Only
the *source* differs: the tiny directory is built here from the synthetic tasks
(:func:`build_tiny_checkpoint`), the others are downloaded.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import pathlib
from typing import Any, Iterable

import jax
import jax.numpy as jnp
import numpy as np
import sentencepiece as spm
from flax import nnx

from reasonkit import data
from reasonkit import mesh as mesh_lib
from reasonkit.config import LoraConfig, ModelConfig

REQUIRED_FILES = ("config.json", "tokenizer.model")


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


def stop_token_ids(tok: spm.SentencePieceProcessor) -> list[int]:
    """Ids that end a model turn: ``<eos>`` and ``<end_of_turn>`` (1 and 106 for Gemma 3)."""
    ids = [tok.eos_id()]
    eot = tok.PieceToId(data.END_OF_TURN)
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
        user_defined_symbols=list(data.SPECIAL_TOKENS), split_digits=True,
        max_sentence_length=8192, num_threads=2, minloglevel=2,
        # Keep text byte-exact (newlines, leading spaces) like Gemma's tokenizer.
        normalization_rule_name="identity", remove_extra_whitespaces=False,
        add_dummy_prefix=False, allow_whitespace_only_pieces=True,
        hard_vocab_limit=True,
    )
    return out_prefix.with_suffix(".model")


# --- config <-> Tunix <-> config.json --------------------------------------------------


def tunix_config(cfg: ModelConfig):
    """The Tunix ModelConfig for ``cfg`` (Gemma 3 or Gemma 2 architecture)."""
    dtype = jnp.bfloat16 if cfg.dtype == "bfloat16" else jnp.float32
    if cfg.family == "gemma3":
        from tunix.models.gemma3 import model as g3

        return g3.ModelConfig(
            num_layers=cfg.num_layers, num_embed=cfg.vocab_size, embed_dim=cfg.embed_dim,
            hidden_dim=cfg.hidden_dim, num_heads=cfg.num_heads, head_dim=cfg.head_dim,
            num_kv_heads=cfg.num_kv_heads, sliding_window_size=cfg.sliding_window,
            local_base_frequency=10_000, global_base_frequency=1_000_000,
            remat_config=g3.RematConfig.BLOCK if cfg.remat else g3.RematConfig.NONE,
            param_dtype=dtype,
        )
    from tunix.models.gemma import model as g2

    layers = cfg.num_layers
    return g2.ModelConfig(
        num_layers=layers, num_embed=cfg.vocab_size, embed_dim=cfg.embed_dim,
        hidden_dim=cfg.hidden_dim, num_heads=cfg.num_heads, head_dim=cfg.head_dim,
        num_kv_heads=cfg.num_kv_heads, final_logit_softcap=30.0, use_post_attn_norm=True,
        use_post_ffw_norm=True, attn_logits_soft_cap=50.0, sliding_window_size=cfg.sliding_window,
        attention_types=tuple((g2.AttentionType.LOCAL_SLIDING, g2.AttentionType.GLOBAL)[i % 2]
                              for i in range(layers)),
        remat_config=g2.RematConfig.BLOCK if cfg.remat else g2.RematConfig.NONE,
    )


def model_class(cfg: ModelConfig):
    if cfg.family == "gemma3":
        from tunix.models.gemma3.model import Gemma3

        return Gemma3
    from tunix.models.gemma.model import Gemma

    return Gemma


def new_model(cfg: ModelConfig, seed: int = 0) -> nnx.Module:
    """A randomly initialised model of ``cfg``'s architecture."""
    return model_class(cfg)(tunix_config(cfg), rngs=nnx.Rngs(params=seed))


def hf_config(cfg: ModelConfig) -> dict[str, Any]:
    """config.json for ``cfg`` in Hugging Face transformers' layout."""
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


_HF_FIELDS = {"num_layers": "num_hidden_layers", "vocab_size": "vocab_size",
              "embed_dim": "hidden_size", "hidden_dim": "intermediate_size",
              "num_heads": "num_attention_heads", "head_dim": "head_dim",
              "num_kv_heads": "num_key_value_heads", "sliding_window": "sliding_window"}


def config_from_hf(path: str | os.PathLike, expect: ModelConfig | None = None) -> ModelConfig:
    """Read a config.json (Gemma 2 / Gemma 3, text or multimodal) into a ModelConfig.

    With ``expect``, every architecture field must match, or a CheckpointError lists them.
    """
    path = pathlib.Path(path)
    try:
        raw = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path}: cannot read config.json ({e})") from e
    if not isinstance(raw, dict):
        raise CheckpointError(f"{path}: config.json holds a {type(raw).__name__}, not an object")
    model_type = raw.get("model_type", "")
    text = raw.get("text_config", raw) if model_type == "gemma3" else raw
    if not isinstance(text, dict):
        raise CheckpointError(f"{path}: text_config is a {type(text).__name__}, not an object")
    family = "gemma2" if model_type == "gemma2" else "gemma3" if model_type.startswith("gemma3") else None
    if family is None:
        raise CheckpointError(f"{path}: model_type {model_type!r} is not Gemma 2 or Gemma 3")
    missing = [hf for hf in _HF_FIELDS.values() if text.get(hf) is None]
    if missing:
        raise CheckpointError(f"{path}: config.json lacks {missing}")
    dims = {ours: int(text[hf]) for ours, hf in _HF_FIELDS.items()}
    base = expect or ModelConfig(family=family, source=str(path.parent), **dims)
    found = dataclasses.replace(base, family=family, **dims)
    if expect is not None:
        diff = [f"{k}: preset {getattr(expect, k)!r} vs checkpoint {getattr(found, k)!r}"
                for k in ("family", *dims) if getattr(expect, k) != getattr(found, k)]
        if diff:
            raise CheckpointError(f"{path} does not match the preset's model: " + "; ".join(diff))
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
    """Load a checked Hugging Face-layout directory with Tunix's safetensors loader."""
    check_checkpoint_dir(path, cfg)
    dtype = jnp.bfloat16 if cfg.dtype == "bfloat16" else jnp.float32
    if cfg.family == "gemma3":
        from tunix.models.gemma3 import params_safetensors as loader
    else:
        from tunix.models.gemma import params_safetensors as loader
    return loader.create_model_from_safe_tensors(str(path), tunix_config(cfg), mesh=mesh, dtype=dtype)


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
                allow_patterns=["*.json", "*.safetensors", "tokenizer.model"]))
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


def _is_traced(model: nnx.Module) -> bool:
    return any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(nnx.state(model)))


def apply_lora(model: nnx.Module, lora: LoraConfig, mesh: jax.sharding.Mesh | None = None,
               seed: int = 0) -> nnx.Module:
    """Add qwix LoRA (or QLoRA: NF4 base) adapters to the preset's target projections.

    Works on any mesh (:func:`lora_trace_input`), and on an abstract model under
    ``nnx.eval_shape`` (the adapters are then left for the caller to place).
    """
    import qwix

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


def export_merged(lora_model: nnx.Module, cfg: ModelConfig, lora: LoraConfig,
                  out_dir: str | os.PathLike, tokenizer_path: str | os.PathLike) -> pathlib.Path:
    """Save base + merged LoRA as a Hugging Face safetensors directory (Gemma 2 and 3).

    The LoRA model itself is left unchanged (a copy is merged).
    """
    graph, state = nnx.split(lora_model)
    copy = nnx.merge(graph, jax.tree.map(lambda x: x, state))
    merge_lora(copy, lora)
    return save_hf_checkpoint(copy, cfg, out_dir, tokenizer_path)


# --- the tiny base model ---------------------------------------------------------------


def tiny_corpus(records: list[dict]) -> list[str]:
    """Pretraining documents: a user turn, then plain-prose reasoning and answer, no tags.

    The base model learns the tasks' language and the turn structure. It reads
    ``<reasoning>`` / ``<answer>`` only in the prompt's instruction and never writes
    them: teaching that format is SFT's job.
    """
    return [f"{data.format_prompt(r['prompt'])}{r['reasoning']} So the answer is {r['answer']}."
            f"{data.END_OF_TURN}" for r in records]


TINY_ASSET = pathlib.Path(__file__).parent / "assets" / "tiny"
TINY_STEPS = 4000
TINY_DOCS_PER_DOMAIN = 3000  # pretraining documents per domain, before exclusions
_TINY_TOKENIZER_RECORDS = 600  # per domain: the tokenizer is trained on the first ones
_TINY_SEQ_LEN = 160  # the longest document is about 150 tokens: none is cut


def tiny_key(cfg: ModelConfig, steps: int = TINY_STEPS, seed: int = 0) -> str:
    """What the tiny checkpoint is a function of: its config and the pretraining recipe.

    ``remat`` is left out: it trades memory for compute, the weights are the same.
    """
    arch = dataclasses.asdict(dataclasses.replace(cfg, remat=False))
    key = json.dumps([arch, steps, seed, _TINY_VERSION], sort_keys=True)
    return hashlib.sha1(key.encode()).hexdigest()[:10]


def tiny_pretraining_records(seed: int = 0) -> tuple[list[dict], int]:
    """The synthetic records the tiny base is pretrained on, and how many were excluded.

    Every prompt of the tiny preset's own data pool (the records its SFT, DPO, GRPO and
    evaluation splits are drawn from) is left out, so the base model has never seen an
    evaluation prompt. Some domains have small prompt spaces: a third of the pool
    would otherwise appear here.
    """
    from reasonkit import tasks
    from reasonkit.config import get_preset

    pool_cfg = get_preset("tiny").data
    pool = {data.normalize_prompt(r["prompt"]) for r in tasks.generate_all(
        pool_cfg.num_records, seed=pool_cfg.seed, difficulty=pool_cfg.difficulty)}
    records = tasks.generate_all(TINY_DOCS_PER_DOMAIN, seed=10_000 + seed)  # seeds apart from data's
    kept = [r for r in records if data.normalize_prompt(r["prompt"]) not in pool]
    return kept, len(records) - len(kept)


def build_tiny_checkpoint(cfg: ModelConfig, *, steps: int = TINY_STEPS, seed: int = 0,
                          out_root: str | os.PathLike | None = None, force: bool = False) -> pathlib.Path:
    """The tiny base model: tokenizer + a pretraining run, in HF layout.

    The repo ships the result for the tiny preset in ``reasonkit/assets/tiny``
    (rebuild it with ``python -m reasonkit.models``: about 45 minutes on a 2-core
    CPU); any other config, step count or seed is built on first use (about 0.5 s a
    step) and cached under ``cache_dir()/tiny-<key>``.
    """
    from reasonkit import tasks

    key = tiny_key(cfg, steps, seed)
    shipped = TINY_ASSET / "pretrain.json"
    if out_root is None and not force and shipped.is_file() and json.loads(
            shipped.read_text()).get("key") == key:
        return TINY_ASSET
    out = pathlib.Path(out_root or cache_dir()) / f"tiny-{key}"
    if (out / "model.safetensors").is_file() and not force:
        return out
    tok_records = tasks.generate_all(_TINY_TOKENIZER_RECORDS, seed=10_000 + seed)
    tok_path = train_tokenizer(tasks.corpus_texts(tok_records) + tiny_corpus(tok_records),
                               out / "tokenizer", cfg.vocab_size)
    tok = load_tokenizer(tok_path, vocab_size=cfg.vocab_size)
    records, excluded = tiny_pretraining_records(seed)
    docs = tiny_corpus(records)
    model = new_model(cfg, seed)
    losses = pretrain(model, tok, docs, steps=steps, seed=seed, seq_len=_TINY_SEQ_LEN)
    save_hf_checkpoint(model, cfg, out, tok_path)
    (out / "tokenizer.vocab").unlink(missing_ok=True)
    (out / "pretrain.json").write_text(json.dumps(
        {"key": key, "steps": steps, "seed": seed, "first_loss": losses[0],
         "final_loss": losses[-1], "documents": len(docs),
         "excluded_pool_prompts": excluded, "loss_every_50": losses[::50]}, indent=2))
    return out


_TINY_VERSION = 2  # bump when the tiny recipe changes, so caches rebuild


def pretrain(model: nnx.Module, tok: spm.SentencePieceProcessor, docs: list[str], *,
             steps: int, seed: int = 0, batch_size: int = 16, seq_len: int = 128,
             lr: float = 3e-3) -> list[float]:
    """Full-parameter next-token training (AdamW, warm-up + cosine); returns the losses."""
    import optax

    from reasonkit import masks

    ids = [[tok.bos_id()] + tok.EncodeAsIds(d) for d in docs]
    ids = [x[:seq_len] for x in ids]
    tokens = np.zeros((len(ids), seq_len), np.int32)
    for i, x in enumerate(ids):
        tokens[i, : len(x)] = x
    schedule = optax.warmup_cosine_decay_schedule(0.0, lr, max(1, steps // 10), steps, lr * 0.05)
    optimizer = nnx.Optimizer(model, optax.chain(optax.clip_by_global_norm(1.0),
                                                 optax.adamw(schedule, weight_decay=0.01)),
                              wrt=nnx.Param)

    @nnx.jit
    def step(model, optimizer, batch):
        def loss_fn(model):
            mask = batch != 0  # [B, S]
            logits, _ = model(batch, masks.positions_from_mask(mask), None, masks.causal_mask(mask))
            logp = jax.nn.log_softmax(logits[:, :-1].astype(jnp.float32))
            target = batch[:, 1:]
            nll = -jnp.take_along_axis(logp, target[..., None], axis=-1)[..., 0]
            weight = mask[:, 1:].astype(jnp.float32)
            return (nll * weight).sum() / weight.sum()

        loss, grads = nnx.value_and_grad(loss_fn)(model)
        optimizer.update(model, grads)
        return loss

    from tqdm.auto import tqdm

    rng = np.random.default_rng(seed)
    losses = []
    bar = tqdm(range(steps), desc="pretrain", leave=False, mininterval=5)
    for i in bar:
        batch = tokens[rng.integers(0, len(tokens), batch_size)]
        losses.append(float(step(model, optimizer, jnp.asarray(batch))))
        if i % 50 == 0:
            bar.set_postfix(loss=f"{losses[-1]:.3f}")
    return losses


if __name__ == "__main__":  # rebuild the shipped tiny checkpoint: python -m reasonkit.models
    import shutil
    import sys

    from reasonkit.config import get_preset

    built = build_tiny_checkpoint(get_preset("tiny").model, force=True,
                                  out_root=sys.argv[1] if len(sys.argv) > 1 else None)
    TINY_ASSET.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "model.safetensors", "tokenizer.model", "pretrain.json"):
        shutil.copy(built / name, TINY_ASSET / name)
    print(f"tiny checkpoint -> {TINY_ASSET}")
