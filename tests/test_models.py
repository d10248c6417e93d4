import dataclasses
import json
import pathlib
import re
import sys
import types

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from safetensors.numpy import save_file

from reasonkit import masks, models, template
from reasonkit.config import LoraConfig, ModelConfig
from reasonkit.models import _architecture as models_architecture
from reasonkit.models import _checkpoint as models_checkpoint
from reasonkit.models import _export as models_export
from reasonkit.models import _gguf_file as gguf_file
from reasonkit.models import _tokenizer as models_tokenizer
from reasonkit.models._architecture import _quiet_transformers
from reasonkit.testing import forward, write_hf_checkpoint

G3 = ModelConfig(family="gemma3", source="unused", num_layers=2, vocab_size=512, embed_dim=32,
                 hidden_dim=64, num_heads=2, head_dim=16, num_kv_heads=1, sliding_window=16,
                 dtype="float32")
G2 = dataclasses.replace(G3, family="gemma2", num_heads=4, num_kv_heads=2)
LORA = LoraConfig(rank=4, alpha=8.0)


TOKENS = np.array([[2, 17, 40, 5, 99, 7, 0, 0], [2, 300, 12, 8, 9, 11, 13, 21]])


# --- the package ------------------------------------------------------------------------

MODULES = ("_architecture", "_tokenizer", "_checkpoint", "_gguf_file", "_tiny", "_sources", "_lora",
           "_adapters", "_export", "_publish")  # import order


def test_models_is_a_package_of_small_modules_importing_one_way():
    import ast
    import importlib
    import pathlib

    import reasonkit

    root = pathlib.Path(models.__file__).parent
    assert sorted(p.stem for p in root.glob("*.py")) == sorted([*MODULES, "__init__", "__main__"])
    assert not (pathlib.Path(reasonkit.__file__).parent / "models.py").exists()
    face = {"tiny"}
    for i, name in enumerate(MODULES):
        module = importlib.import_module(f"reasonkit.models.{name}")
        source = (root / f"{name}.py").read_text()
        assert len(source.splitlines()) < 600, name
        assert module.__doc__ and module.__doc__.strip(), name
        assert module.__all__ and all(hasattr(module, n) for n in module.__all__), name
        froms = [node for node in ast.walk(ast.parse(source)) if isinstance(node, ast.ImportFrom)]
        imported = {node.module.removeprefix("reasonkit.models.") for node in froms
                    if (node.module or "").startswith("reasonkit.models.")}
        imported |= {a.name for node in froms if node.module == "reasonkit.models" for a in node.names}
        assert imported <= set(MODULES[:i]), f"{name} imports {imported - set(MODULES[:i])}: not before it"
        if name != "_tiny":  # the recipe is models.tiny, its names are not the face's
            face |= set(module.__all__)
    # the face: a few of the modules' public names, each the module's own object
    assert len(set(models.__all__)) == len(models.__all__) and set(models.__all__) <= face
    for public in models.__all__:
        owner = next(m for m in MODULES if public in importlib.import_module(f"reasonkit.models.{m}").__all__
                     or public == m.removeprefix("_"))
        assert getattr(models, public) is getattr(importlib.import_module(f"reasonkit.models.{owner}"),
                                                  public, models.tiny), public
    assert models.tiny.ASSET == pathlib.Path(reasonkit.__file__).parent / "assets" / "tiny"
    assert (models.tiny.ASSET / "model.safetensors").is_file()


# --- tokenizer -------------------------------------------------------------------------

def test_tokenizer_is_gemma_shaped_and_byte_exact(tokenizer_path):
    tok = models.load_tokenizer(tokenizer_path, vocab_size=512)
    assert (tok.pad_id(), tok.eos_id(), tok.bos_id(), tok.unk_id()) == (0, 1, 2, 3)
    for sym in template.SPECIAL_TOKENS:
        assert tok.EncodeAsPieces(sym) == [sym]
    text = template.format_prompt("Sort 3  1 2.") + template.format_completion("1 < 2 < 3.", "1 2 3")
    assert tok.DecodeIds(tok.EncodeAsIds(text)) == text  # newlines and double spaces survive
    assert models.stop_token_ids(tok) == [1, tok.PieceToId(template.END_OF_TURN)]


def test_tokenizer_vocab_mismatch_and_garbage(tokenizer_path, tmp_path):
    with pytest.raises(models.CheckpointError, match="512 pieces but the model's vocab_size"):
        models.load_tokenizer(tokenizer_path, vocab_size=262144)
    bad = tmp_path / "tokenizer.model"
    bad.write_bytes(b"not a model")
    with pytest.raises(models.CheckpointError, match="not a SentencePiece model"):
        models.load_tokenizer(bad)
    with pytest.raises(FileNotFoundError):
        models.load_tokenizer(tmp_path / "missing.model")


# --- the real loading path on a checkpoint written here, in HF's layout ---------------

@pytest.mark.parametrize("cfg", [G3, G2], ids=["gemma3", "gemma2"])
def test_loader_places_every_hf_tensor(tmp_path, tokenizer_path, cfg):
    tensors = write_hf_checkpoint(tmp_path / "ckpt", cfg, tokenizer_path)
    model = models.load_model(tmp_path / "ckpt", cfg)
    flat = models.base_params(model)
    d, n, h = cfg.embed_dim, cfg.num_heads, cfg.head_dim
    np.testing.assert_array_equal(flat["embedder.input_embedding"], tensors["model.embed_tokens.weight"])
    q = tensors["model.layers.1.self_attn.q_proj.weight"]  # [N*H, D]
    q_nnx = flat.get("layers.1.attn.q_einsum.w")
    if q_nnx is None:  # fused qkv when num_heads == num_kv_heads
        q_nnx = flat["layers.1.attn.qkv_einsum.w"][0]
    np.testing.assert_array_equal(q_nnx, q.reshape(n, h, d).transpose(0, 2, 1))  # [N, D, H]
    np.testing.assert_array_equal(flat["layers.0.mlp.down_proj.kernel"],
                                  tensors["model.layers.0.mlp.down_proj.weight"].T)
    # ...and writing it back gives the very same file contents.
    back = models.to_hf_tensors(model, cfg)
    assert back.keys() == tensors.keys()
    for k in tensors:
        np.testing.assert_array_equal(back[k], tensors[k], err_msg=k)


def test_config_from_hf_reads_multimodal_gemma3(tmp_path):
    cfg_json = {"model_type": "gemma3", "text_config": {
        "hidden_size": 2560, "intermediate_size": 10240, "num_hidden_layers": 34,
        "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
        "vocab_size": 262208, "sliding_window": 1024}}
    (tmp_path / "config.json").write_text(json.dumps(cfg_json))
    got = models_architecture.config_from_hf(tmp_path / "config.json")
    assert (got.family, got.num_layers, got.embed_dim, got.vocab_size) == ("gemma3", 34, 2560, 262208)


@pytest.mark.parametrize("text, match", [
    ("[1, 2]", "config.json holds a list, not an object"),
    ('{"model_type": "gemma3", "text_config": "x"}', "text_config is a str, not an object"),
    ("{", "cannot read config.json"),
])
def test_config_json_that_is_not_an_object(tmp_path, text, match):
    (tmp_path / "config.json").write_text(text)
    with pytest.raises(models.CheckpointError, match=match):
        models_architecture.config_from_hf(tmp_path / "config.json")


# --- config.json's architecture fields: honoured through Tunix's config, or refused -----

def config_json(path, family="gemma3", **fields):
    """A config.json of G3's / G2's shapes plus ``fields`` (``...`` removes one); returns its path."""
    cfg = G3 if family == "gemma3" else G2
    text = {"model_type": "gemma3_text" if family == "gemma3" else "gemma2",
            "hidden_size": cfg.embed_dim, "intermediate_size": cfg.hidden_dim,
            "num_hidden_layers": cfg.num_layers, "num_attention_heads": cfg.num_heads,
            "num_key_value_heads": cfg.num_kv_heads, "head_dim": cfg.head_dim,
            "vocab_size": cfg.vocab_size, "sliding_window": cfg.sliding_window,
            "query_pre_attn_scalar": cfg.head_dim, **fields}
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({k: v for k, v in text.items() if v is not ...}))
    return path / "config.json"


G3_BY_EMBED = dataclasses.replace(G3, embed_dim=48)  # hidden / heads = 24, head_dim 16
SCALE = "QueryPreAttentionNormalisation.BY_ONE_OVER_SQRT"


@pytest.mark.parametrize("family, fields, want", [
    ("gemma3", {}, {"global_scale_factor": 1.0, "local_scale_factor": 1.0, "global_base_frequency": 1e6,
                    "local_base_frequency": 1e4, "query_pre_attn_norm": f"{SCALE}_HEAD_DIM",
                    "sliding_window_size": 16}),
    # Gemma 3 4B / 12B / 27B: linear x8 on the full-attention layers.
    ("gemma3", {"rope_scaling": {"rope_type": "linear", "factor": 8.0}},
     {"global_scale_factor": 8.0, "local_scale_factor": 1.0}),
    ("gemma3", {"rope_theta": 500_000.0, "rope_local_base_freq": 20_000.0},
     {"global_base_frequency": 5e5, "local_base_frequency": 2e4}),
    # transformers 5's own layout: one RoPE per layer type.
    ("gemma3", {"rope_parameters": {
        "full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 2e6},
        "sliding_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 3e4}}},
     {"global_scale_factor": 4.0, "local_scale_factor": 2.0, "global_base_frequency": 2e6,
      "local_base_frequency": 3e4}),
    ("gemma3", {"layer_types": ["sliding_attention"] * 2}, {}),  # Tunix's own pattern, spelled out
    ("gemma3", {"sliding_window_pattern": 6, "sliding_window": 7}, {"sliding_window_size": 7}),
    ("gemma2", {}, {"final_logit_softcap": 30.0, "attn_logits_soft_cap": 50.0,
                    "attention_types": ("LOCAL_SLIDING", "GLOBAL")}),
    ("gemma2", {"final_logit_softcapping": 12.0, "attn_logit_softcapping": None,
                "layer_types": ["full_attention", "full_attention"], "rope_theta": 10_000.0},
     {"final_logit_softcap": 12.0, "attn_logits_soft_cap": None, "attention_types": ("GLOBAL", "GLOBAL")}),
    ("gemma2", {"final_logit_softcapping": None, "layer_types": ["full_attention", "sliding_attention"]},
     {"final_logit_softcap": None, "attn_logits_soft_cap": 50.0,
      "attention_types": ("GLOBAL", "LOCAL_SLIDING")}),
], ids=["gemma3-defaults", "rope-linear-x8", "rope-thetas", "rope_parameters", "layer_types",
        "window", "gemma2-defaults", "gemma2-caps-types", "gemma2-no-final-cap"])
def test_config_fields_reach_tunix(tmp_path, family, fields, want):
    path = config_json(tmp_path, family, **fields)
    cfg = models_architecture.config_from_hf(path)
    got = models_architecture.tunix_config(dataclasses.replace(cfg, dtype="float32"),
                                           models_architecture.read_config_json(path))
    for name, value in want.items():
        found = getattr(got, name)
        if name == "attention_types":
            found = tuple(a.name for a in found)
        assert (str(found) if name == "query_pre_attn_norm" else found) == value, name


def test_query_scalar_of_hidden_over_heads_is_honoured(tmp_path):
    # Gemma 3 27B: query_pre_attn_scalar 168 = 5376 / 32 heads, head_dim 128.
    path = config_json(tmp_path, hidden_size=48, query_pre_attn_scalar=24)
    cfg = models_architecture.config_from_hf(path, expect=G3_BY_EMBED)
    got = models_architecture.tunix_config(cfg, models_architecture.read_config_json(path))
    assert str(got.query_pre_attn_norm) == f"{SCALE}_EMBED_DIM_DIV_NUM_HEADS"


@pytest.mark.parametrize("family, fields, match", [
    ("gemma3", {"query_pre_attn_scalar": 20}, r"query_pre_attn_scalar=20: .*head_dim=16\) or .*=16\) only"),
    # transformers' default (256) when the file leaves the field out, as transformers loads it
    ("gemma3", {"query_pre_attn_scalar": ...}, r"query_pre_attn_scalar=256: .*leaves it out"),
    ("gemma3", {"rope_scaling": {"rope_type": "yarn", "factor": 8.0}}, r"rope_scaling=.*'yarn'"),
    ("gemma3", {"rope_scaling": {"rope_type": "linear", "factor": 0.5}}, "a factor >= 1"),
    ("gemma3", {"rope_scaling": {"type": "linear", "factor": 8.0}}, r"rope_type 'default' and type 'linear'"),
    ("gemma3", {"rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                                    "sliding_attention": {"rope_type": "dynamic", "factor": 2.0,
                                                          "rope_theta": 1e4}}},
     r"rope_parameters\['sliding_attention'\]=.*'dynamic'"),
    ("gemma3", {"rope_scaling": {"rope_type": "linear", "factor": 2.0, "partial_rotary_factor": 0.5}},
     "partial_rotary_factor"),
    ("gemma3", {"final_logit_softcapping": 30.0}, "final_logit_softcapping=30.0: .*no softcapping"),
    ("gemma3", {"attn_logit_softcapping": 50.0}, "attn_logit_softcapping=50.0"),
    ("gemma3", {"layer_types": ["full_attention", "sliding_attention"]},
     r"layer_types=\['full_attention', 'sliding_attention'\]: .*5 sliding"),
    ("gemma3", {"sliding_window_pattern": 1}, "sliding_window_pattern=1: .*5 sliding"),
    ("gemma3", {"layer_types": ["sliding_attention"] * 3}, r"(?s)Gemma3TextConfig: .*`layer_types` \(3\)"),
    ("gemma3", {"layer_types": ["chunked_attention"] * 2}, "each one of"),
    ("gemma3", {"sliding_window": None}, r"sliding_window=None"),
    ("gemma3", {"hidden_activation": "gelu"}, "hidden_activation='gelu'"),
    ("gemma3", {"rms_norm_eps": 1e-5}, "rms_norm_eps=1e-05"),
    ("gemma3", {"attention_bias": True}, "attention_bias=True"),
    ("gemma3", {"tie_word_embeddings": False}, "tie_word_embeddings=False"),
    ("gemma3", {"use_bidirectional_attention": True}, "use_bidirectional_attention=True"),
    ("gemma3", {"num_hidden_layers": "2"}, "cannot read it as Gemma3TextConfig"),
    ("gemma2", {"query_pre_attn_scalar": 24}, r"query_pre_attn_scalar=24: .*Gemma 2 .*head_dim=16\) only"),
    ("gemma2", {"rope_theta": 20_000.0}, "rope_theta=20000.0: .*base at 10000"),
    ("gemma2", {"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, "rope_scaling=.*no RoPE scaling"),
    ("gemma2", {"layer_types": ["sliding_attention"]}, r"(?s)Gemma2Config: .*`layer_types` \(1\)"),
    ("gemma2", {"model_type": "gemma"}, "model_type 'gemma' is not Gemma 2 or Gemma 3"),
])
def test_config_fields_tunix_cannot_represent_are_refused(tmp_path, family, fields, match):
    path = config_json(tmp_path, family, **fields)
    with pytest.raises(models.CheckpointError, match=match) as e:
        models_architecture.config_from_hf(path)
    assert str(path) in str(e.value)


# The text configs of real checkpoints (their shapes and the fields that change the numbers).
REAL = {
    "gemma-3-270m": {"model_type": "gemma3_text", "hidden_size": 640, "intermediate_size": 2048,
                     "num_hidden_layers": 18, "num_attention_heads": 4, "num_key_value_heads": 1,
                     "head_dim": 256, "vocab_size": 262144, "sliding_window": 512,
                     "query_pre_attn_scalar": 256, "rope_scaling": None, "rope_theta": 1e6,
                     "rope_local_base_freq": 1e4, "max_position_embeddings": 32768,
                     "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 3},
    "gemma-3-1b": {"model_type": "gemma3_text", "hidden_size": 1152, "intermediate_size": 6912,
                   "num_hidden_layers": 26, "num_attention_heads": 4, "num_key_value_heads": 1,
                   "head_dim": 256, "vocab_size": 262144, "sliding_window": 512,
                   "sliding_window_pattern": 6, "query_pre_attn_scalar": 256, "rope_scaling": None,
                   "rope_theta": 1e6, "rope_local_base_freq": 1e4, "max_position_embeddings": 32768},
    "gemma-3-4b": {"model_type": "gemma3", "text_config": {
        "model_type": "gemma3_text", "hidden_size": 2560, "intermediate_size": 10240,
        "num_hidden_layers": 34, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
        "vocab_size": 262208, "sliding_window": 1024, "query_pre_attn_scalar": 256,
        "rope_scaling": {"factor": 8.0, "rope_type": "linear"}}},
    "gemma-3-27b": {"model_type": "gemma3", "text_config": {
        "model_type": "gemma3_text", "hidden_size": 5376, "intermediate_size": 21504,
        "num_hidden_layers": 62, "num_attention_heads": 32, "num_key_value_heads": 16,
        "head_dim": 128, "vocab_size": 262208, "sliding_window": 1024, "query_pre_attn_scalar": 168,
        "rope_scaling": {"factor": 8.0, "rope_type": "linear"}}},
    "gemma-2-2b": {"model_type": "gemma2", "hidden_size": 2304, "intermediate_size": 9216,
                   "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4,
                   "head_dim": 256, "vocab_size": 256000, "sliding_window": 4096,
                   "query_pre_attn_scalar": 256, "final_logit_softcapping": 30.0,
                   "attn_logit_softcapping": 50.0, "rope_theta": 10000.0, "hidden_act": "gelu_pytorch_tanh",
                   "hidden_activation": "gelu_pytorch_tanh"},
    "gemma-2-27b": {"model_type": "gemma2", "hidden_size": 4608, "intermediate_size": 36864,
                    "num_hidden_layers": 46, "num_attention_heads": 32, "num_key_value_heads": 16,
                    "head_dim": 128, "vocab_size": 256000, "sliding_window": 4096,
                    "query_pre_attn_scalar": 144, "final_logit_softcapping": 30.0,
                    "attn_logit_softcapping": 50.0},
}


@pytest.mark.parametrize("name, want", [
    ("gemma-3-270m", (1.0, f"{SCALE}_HEAD_DIM")),
    ("gemma-3-1b", (1.0, f"{SCALE}_HEAD_DIM")),
    ("gemma-3-4b", (8.0, f"{SCALE}_HEAD_DIM")),
    ("gemma-3-27b", (8.0, f"{SCALE}_EMBED_DIM_DIV_NUM_HEADS")),
    ("gemma-2-2b", (50.0, 30.0)),
    ("gemma-2-27b", "query_pre_attn_scalar=144: .*head_dim=128"),
])
def test_real_checkpoint_configs(tmp_path, name, want):
    (tmp_path / "config.json").write_text(json.dumps(REAL[name]))
    if isinstance(want, str):
        with pytest.raises(models.CheckpointError, match=want):
            models_architecture.config_from_hf(tmp_path / "config.json")
        return
    cfg = models_architecture.config_from_hf(tmp_path / "config.json")
    got = models_architecture.tunix_config(cfg, REAL[name])
    if cfg.family == "gemma3":
        assert (got.global_scale_factor, str(got.query_pre_attn_norm)) == want
        rope = (got.local_scale_factor, got.global_base_frequency, got.local_base_frequency)
        assert rope == (1.0, 1e6, 1e4)
    else:
        assert (got.attn_logits_soft_cap, got.final_logit_softcap) == want


def test_loader_builds_the_model_config_json_describes(tmp_path, tokenizer_path):
    cfg = dataclasses.replace(G3_BY_EMBED, num_layers=6)
    write_hf_checkpoint(tmp_path / "c", cfg, tokenizer_path, extra={
        "query_pre_attn_scalar": 24, "rope_scaling": {"rope_type": "linear", "factor": 8.0}})
    model = models.load_model(tmp_path / "c", cfg)
    attn = [layer.attn for layer in model.layers]
    assert [a.rope_scale_factor for a in attn] == [1.0] * 5 + [8.0]  # the full-attention layer
    assert attn[0].query_pre_attn_scalar == pytest.approx(24 ** -0.5)
    # A preset's fresh model is what hf_config writes, and reads back the same way.
    fresh = models_architecture.tunix_config(cfg)
    assert (fresh.global_scale_factor, str(fresh.query_pre_attn_norm)) == (1.0, f"{SCALE}_HEAD_DIM")
    assert fresh == models_architecture.tunix_config(cfg, models.hf_config(cfg))


@pytest.mark.parametrize("problem, match", [
    ("no_config", "missing config.json"),
    ("no_tokenizer", "missing tokenizer.model"),
    ("no_weights", r"missing \*.safetensors"),
    ("missing_tensor", "tensors missing.*layers.1.mlp.up_proj"),
    ("bad_shape", r"shape mismatch.*embed_tokens.*\(10, 32\)"),
    ("other_model", "does not match the preset's model: num_layers: preset 2 vs checkpoint 3"),
])
def test_bad_checkpoint_dirs_say_what_is_wrong(tmp_path, tokenizer_path, problem, match):
    path = tmp_path / "ckpt"
    write_hf_checkpoint(
        path, G3, tokenizer_path,
        skip=("model.layers.1.mlp.up_proj.weight",) if problem == "missing_tensor" else (),
        reshape={"model.embed_tokens.weight": (10, 32)} if problem == "bad_shape" else None)
    if problem == "no_config":
        (path / "config.json").unlink()
    if problem == "no_tokenizer":
        (path / "tokenizer.model").unlink()
    if problem == "no_weights":
        (path / "model.safetensors").unlink()
    if problem == "other_model":
        cfg = json.loads((path / "config.json").read_text())
        (path / "config.json").write_text(json.dumps({**cfg, "num_hidden_layers": 3}))
    with pytest.raises(models.CheckpointError, match=match):
        models.load_model(path, G3)


def test_sharded_checkpoint_loads_and_a_missing_shard_is_named(tmp_path, tokenizer_path):
    path = tmp_path / "ckpt"
    tensors = write_hf_checkpoint(path, G3, tokenizer_path)
    (path / "model.safetensors").unlink()
    keys = sorted(tensors)
    shards = {f"model-0000{i + 1}-of-00002.safetensors": keys[i::2] for i in range(2)}
    for name, names in shards.items():
        save_file({k: tensors[k] for k in names}, str(path / name))
    (path / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {k: name for name, names in shards.items() for k in names}}))
    flat = models.base_params(models.load_model(path, G3))
    np.testing.assert_array_equal(flat["final_norm.scale"], tensors["model.norm.weight"])
    (path / "model-00002-of-00002.safetensors").unlink()  # an interrupted download
    named = r"missing model-00002-of-00002.safetensors \(named in model.safetensors.index.json"
    with pytest.raises(models.CheckpointError, match=named):
        models.load_model(path, G3)


def test_bf16_checkpoint_loads_and_mixed_dtypes_are_refused(tmp_path, tokenizer_path):
    import ml_dtypes

    path = tmp_path / "ckpt"
    tensors = write_hf_checkpoint(path, G3, tokenizer_path)
    save_file({k: v.astype(ml_dtypes.bfloat16) for k, v in tensors.items()}, str(path / "model.safetensors"))
    flat = models.base_params(models.load_model(path, G3))  # cast to the preset's float32
    want = tensors["model.embed_tokens.weight"].astype(ml_dtypes.bfloat16).astype(np.float32)
    np.testing.assert_array_equal(flat["embedder.input_embedding"], want)
    # Tunix 0.1.7 reads a file with the first tensor's item size: mixing dtypes in one file
    # failed deep inside it ("cannot reshape array of size 8192 into shape (512,32)").
    save_file({k: v if "norm" in k else v.astype(ml_dtypes.bfloat16) for k, v in tensors.items()},
              str(path / "model.safetensors"))
    with pytest.raises(models.CheckpointError, match=r"model.safetensors mixes dtypes \['BF16', 'F32'\]"):
        models.load_model(path, G3)


def test_tokenizer_vocab_must_match_checkpoint(tmp_path, tokenizer_path):
    cfg = dataclasses.replace(G3, vocab_size=640)
    write_hf_checkpoint(tmp_path / "c", cfg, tokenizer_path)
    with pytest.raises(models.CheckpointError, match="512 pieces but the model's vocab_size.* 640"):
        models.load_model(tmp_path / "c", cfg)


@pytest.mark.slow
@pytest.mark.parametrize("cfg", [G3, G2], ids=["gemma3", "gemma2"])
def test_save_load_round_trip_keeps_logits(tmp_path, tokenizer_path, cfg):
    model = models.new_model(cfg, seed=3)
    models_checkpoint.save_hf_checkpoint(model, cfg, tmp_path / "out", tokenizer_path)
    again = models.load_model(tmp_path / "out", cfg)
    np.testing.assert_array_equal(forward(model, TOKENS), forward(again, TOKENS))


# --- sources --------------------------------------------------------------------------

def test_resolve_source_kaggle_hf_local_and_bad(tmp_path, monkeypatch):
    calls = []
    kagglehub = types.SimpleNamespace(model_download=lambda h: calls.append(("kaggle", h)) or str(tmp_path))
    hub = types.SimpleNamespace(snapshot_download=lambda r, allow_patterns: calls.append(
        ("hf", r, tuple(allow_patterns))) or str(tmp_path))
    monkeypatch.setitem(sys.modules, "kagglehub", kagglehub)
    monkeypatch.setitem(sys.modules, "huggingface_hub", hub)
    k = dataclasses.replace(G3, source="kaggle:google/gemma-3/transformers/gemma-3-1b-it")
    assert models.resolve_source(k) == tmp_path
    assert models.resolve_source(dataclasses.replace(G3, source="hf:google/gemma-3-1b-it")) == tmp_path
    assert calls[0] == ("kaggle", "google/gemma-3/transformers/gemma-3-1b-it")
    assert calls[1][:2] == ("hf", "google/gemma-3-1b-it")
    patterns = calls[1][2]  # what loading and exporting need, and nothing else
    assert {"config.json", "generation_config.json", "*.safetensors", "tokenizer.model", "tokenizer.json",
            "tokenizer_config.json", "special_tokens_map.json"} <= set(patterns)
    assert "*.json" not in patterns and "*" not in patterns
    assert models.resolve_source(dataclasses.replace(G3, source=str(tmp_path))) == tmp_path
    with pytest.raises(models.CheckpointError, match="'nowhere' is not 'tiny'"):
        models.resolve_source(dataclasses.replace(G3, source="nowhere"))


@pytest.mark.parametrize("source", ["kaggle:google/gemma-3/transformers/gemma-3-1b-it",
                                    "hf:google/gemma-3-1b-it"])
def test_failed_download_says_what_to_do(monkeypatch, source):
    def offline(*args, **kwargs):  # what both clients raise with no network and no cache
        raise OSError("Failed to resolve 'api.kaggle.com' ([Errno -2] Name or service not known)")

    monkeypatch.setitem(sys.modules, "kagglehub", types.SimpleNamespace(model_download=offline))
    monkeypatch.setitem(sys.modules, "huggingface_hub", types.SimpleNamespace(snapshot_download=offline))
    with pytest.raises(models.CheckpointError) as e:
        models.resolve_source(dataclasses.replace(G3, source=source))
    msg = str(e.value)
    assert f"cannot download {source!r}" in msg and "Name or service not known" in msg
    assert "internet" in msg and "licence" in msg and '"model.source"' in msg


def test_platform_secrets_are_set_not_printed(monkeypatch, capsys):
    for name in ("HF_TOKEN", "KAGGLE_USERNAME", "KAGGLE_KEY"):
        monkeypatch.delenv(name, raising=False)

    class Client:
        def get_secret(self, name):
            if name != "HF_TOKEN":
                raise KeyError(name)
            return "hf_secret_value"

    monkeypatch.setitem(sys.modules, "kaggle_secrets", types.SimpleNamespace(UserSecretsClient=Client))
    assert models.read_platform_secrets() == ["HF_TOKEN"]
    import os
    assert os.environ["HF_TOKEN"] == "hf_secret_value"
    out = capsys.readouterr()
    assert "hf_secret_value" not in out.out + out.err


# --- LoRA ------------------------------------------------------------------------------

@pytest.mark.slow
def test_lora_training_step_moves_adapters_only():
    model = models.apply_lora(models.new_model(G3, seed=0), LORA)
    base0, lora0 = models.base_params(model), models.lora_params(model)
    assert lora0 and all("lora" in k for k in lora0)
    opt = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.LoRAParam)

    @nnx.jit
    def step(model, opt, tokens):
        def loss(model):
            mask = tokens != 0
            logits, _ = model(tokens, masks.positions_from_mask(mask), None, masks.causal_mask(mask))
            return -jnp.mean(jax.nn.log_softmax(logits)[:, :-1].max(-1))
        value, grads = nnx.value_and_grad(loss, argnums=nnx.DiffState(0, nnx.LoRAParam))(model)
        opt.update(model, grads)
        return value

    for _ in range(3):
        step(model, opt, jnp.asarray(TOKENS))
    lora1, base1 = models.lora_params(model), models.base_params(model)
    assert any(not np.array_equal(lora0[k], lora1[k]) for k in lora0)
    for k in base0:
        np.testing.assert_array_equal(base0[k], base1[k], err_msg=k)


@pytest.mark.slow
@pytest.mark.parametrize("family", ["gemma3", "gemma2"])
def test_a_remat_model_samples_with_remat_off(family, tokenizer_path):
    # Tunix's sampler on a model with remat on (every Gemma preset) raises flax's
    # TraceContextError while decoding; sampling_graphdef turns remat off for it.
    import tunix

    from reasonkit.tunix_patches import sampling

    cfg = dataclasses.replace(G3 if family == "gemma3" else G2, remat=True)
    model = models.apply_lora(models.new_model(cfg), LORA)
    tok = models.load_tokenizer(tokenizer_path)
    cache = tunix.CacheConfig(cache_size=32, num_layers=cfg.num_layers, num_kv_heads=cfg.num_kv_heads,
                              head_dim=cfg.head_dim)
    with pytest.raises(Exception, match="different trace level"):
        tunix.Sampler(transformer=model, tokenizer=tok, cache_config=cache)(
            ["apple pear"], max_generation_steps=3, max_prompt_length=16)
    sampler = tunix.Sampler(transformer=sampling.without_remat(model), tokenizer=tok, cache_config=cache)
    assert len(sampler(["apple pear"], max_generation_steps=3, max_prompt_length=16).tokens[0]) == 3
    # the model itself keeps remat (training wants it), and the sampler shares its arrays
    assert {layer.attn.remat_config.name for layer in model.layers} == {"BLOCK"}
    np.testing.assert_array_equal(forward(sampling.without_remat(model), TOKENS), forward(model, TOKENS))


@pytest.mark.slow
def test_flat_lora_delta_equals_qwixs_and_takes_bs_gradient_without_copying_the_cotangent(monkeypatch):
    from qwix._src.providers import lora as qwix_lora

    from reasonkit.tunix_patches import lora_delta

    models.use_optimisations(("flat LoRA delta",))  # what a preset with it puts in place
    assert qwix_lora._compute_lora_delta is lora_delta.flat_lora_delta
    qwix_own = lora_delta.qwix_own()
    assert qwix_own is not None and qwix_own.__module__ == qwix_lora.__name__
    k = jax.random.split(jax.random.key(0), 4)
    x, a = jax.random.normal(k[0], (4, 256, 64)), jax.random.normal(k[1], (64, 8))
    b, g = jax.random.normal(k[2], (8, 128)), jax.random.normal(k[3], (4, 256, 128))

    def loss(delta):  # a Linear's [B, T, in] x [in, out], as qwix calls it
        return lambda x, a, b: jnp.sum(delta(x, a, b, (2,), (), (64,), (), (128,), 8) * g)

    flat, own = loss(lora_delta.flat_lora_delta), loss(qwix_own)
    np.testing.assert_allclose(flat(x, a, b), own(x, a, b), rtol=1e-6)
    grads = [jax.grad(f, argnums=(0, 1, 2))(x, a, b) for f in (flat, own)]
    for got, want in zip(*grads, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4 * float(jnp.abs(want).max()))

    def copies_cotangent(f):  # an instruction holding g transposed: [out, tokens]
        hlo = jax.jit(jax.grad(f, argnums=2)).lower(x, a, b).compile().as_text()
        return "f32[128,1024]" in hlo
    assert copies_cotangent(own) and not copies_cotangent(flat)
    # several devices (the real-shape compiles stand for a TPU's program): qwix's own
    monkeypatch.setattr(jax, "device_count", lambda: 8)
    assert copies_cotangent(flat)
    monkeypatch.undo()
    # contracted axes other than the last ones go to qwix's own
    mid = lora_delta.flat_lora_delta(jnp.ones((3, 64, 5)), a, b, (1,), (), (64,), (), (128,), 8)
    np.testing.assert_allclose(mid, qwix_own(jnp.ones((3, 64, 5)), a, b, (1,), (), (64,), (), (128,), 8))


def test_lora_targets_that_match_nothing():
    with pytest.raises(ValueError, match="matched no module"):
        models.apply_lora(models.new_model(G3), LoraConfig(rank=2, alpha=2.0, module_path=".*nope"))


def lora_model_with_delta(cfg, lora=LORA, seed=1):
    """A LoRA model whose adapters change the logits (they start at b = 0)."""
    model = models.apply_lora(models.new_model(cfg, seed=seed), lora)
    for path, v in nnx.iter_graph(model):
        if isinstance(v, nnx.LoRAParam) and str(path[-1]).endswith("lora_b"):
            v[...] = 0.05 * jax.random.normal(jax.random.key(len(path)), v.shape)
    return model


def source_dir(path, cfg, tokenizer_path, seed=1):
    """The base checkpoint a LoRA model of ``new_model(cfg, seed)`` was trained from."""
    return models_checkpoint.save_hf_checkpoint(models.new_model(cfg, seed=seed), cfg, path, tokenizer_path)


@pytest.mark.slow
@pytest.mark.parametrize("cfg", [G3, G2], ids=["gemma3", "gemma2"])
def test_merged_export_reloads_to_the_lora_models_logits(tmp_path, tokenizer_path, cfg):
    model = lora_model_with_delta(cfg)
    want = forward(model, TOKENS)
    src = source_dir(tmp_path / "src", cfg, tokenizer_path)
    out = models.export_merged(model, cfg, LORA, tmp_path / "merged", src)
    np.testing.assert_array_equal(forward(model, TOKENS), want)  # the LoRA model is untouched
    got = forward(models.load_model(out, cfg), TOKENS)
    plain = forward(models.new_model(cfg, seed=1), TOKENS)
    assert np.abs(plain - want).max() > 1e-2  # the adapters matter...
    np.testing.assert_allclose(got, want, atol=1e-4)  # ...and the export carries them


@pytest.mark.slow
@pytest.mark.parametrize("cfg", [G3, G2], ids=["gemma3", "gemma2"])
def test_qlora_merged_export_dequantizes_the_nf4_base(tmp_path, tokenizer_path, cfg):
    # README: `**{"lora.qlora": True}`; the base weights are then qwix NF4 arrays, which
    # the merge must dequantize (it raised TypeError: 'WithAux' + 'ArrayImpl').
    qlora = dataclasses.replace(LORA, qlora=True, tile_size=16)
    model = lora_model_with_delta(cfg, qlora)
    want = forward(model, TOKENS)
    src = source_dir(tmp_path / "src", cfg, tokenizer_path)
    out = models.export_merged(model, cfg, qlora, tmp_path / "merged", src)
    np.testing.assert_array_equal(forward(model, TOKENS), want)  # still the QLoRA model
    got = forward(models.load_model(out, cfg), TOKENS)
    np.testing.assert_allclose(got, want, atol=1e-4)
    # The adapters alone export as they do without NF4 (PEFT applies them to the source).
    tensors, _ = models_export.peft_tensors(model)
    assert tensors.keys() == models_export.peft_tensors(lora_model_with_delta(cfg))[0].keys()


# --- exports that load and chat in the Hugging Face ecosystem --------------------------

def hf_tokenizer(path):
    """transformers' AutoTokenizer on a directory (no PyTorch needed for tokenizers)."""
    with _quiet_transformers():
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(path)


QUESTION = "Sort 3  1 2 from smallest to largest."  # no surrounding whitespace: see test_chat_template


def test_merged_export_is_a_complete_directory(tmp_path, tokenizer_path):
    # A source as a Gemma checkpoint comes: its config says more than the shapes.
    src = tmp_path / "src"
    fields = {"rope_scaling": {"rope_type": "linear", "factor": 8.0}, "max_position_embeddings": 32768,
              "torch_dtype": "bfloat16", "eos_token_id": [1], "transformers_version": "4.50.0"}
    write_hf_checkpoint(src, G3, tokenizer_path, extra=fields)
    source_config = json.loads((src / "config.json").read_text())
    # (The weights do not matter here: the exported logits are the tests above and below.)
    model = lora_model_with_delta(G3)
    out = models.export_merged(model, G3, LORA, tmp_path / "merged", src, name="run x, stage grpo")

    config = json.loads((out / "config.json").read_text())
    assert config == {**source_config, "torch_dtype": "float32", "architectures": ["Gemma3ForCausalLM"]}
    tok = models.load_tokenizer(out / "tokenizer.model")
    eot = tok.PieceToId(template.END_OF_TURN)
    gen = json.loads((out / "generation_config.json").read_text())
    assert gen == {"eos_token_id": [1, eot], "bos_token_id": 2, "pad_token_id": 0}
    names = {p.name for p in out.iterdir()}
    assert names == {"config.json", "generation_config.json", "model.safetensors", "tokenizer.model",
                     "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                     "README.md", "NOTICE"}
    readme = (out / "README.md").read_text()
    assert readme.startswith("---\nlicense: gemma\n") and "\nlibrary_name: transformers\n" in readme
    assert "\n# run x, stage grpo\n" in readme and "AutoModelForCausalLM" in readme
    assert "eager" not in readme and "convert_hf_to_gguf" not in readme  # reasonkit writes the GGUF
    checked = readme.split("## Checked")[1].split("## ")[0]  # what read it, and what was not run
    assert "transformers" in checked and "Not run by reasonkit: vLLM" in checked
    notice = models_export.GEMMA_NOTICE
    assert notice in readme and (out / "NOTICE").read_text() == notice + "\n"
    assert repr(template.INSTRUCTION) in readme  # how to prompt it
    assert models_checkpoint.check_checkpoint_dir(out, G3) == G3  # loadable: files, shapes, fields
    assert models_architecture.tunix_config(G3, config).global_scale_factor == 8.0  # still rope x8


def test_tokenizer_files_of_a_model_without_an_unknown_piece(tmp_path, tokenizer_path):
    """A SentencePiece model may have no unknown piece (unk_id -1, as one rebuilt from a
    GGUF file's control pieces can): its Hugging Face files leave unk_token out and load."""
    from sentencepiece import sentencepiece_model_pb2 as pb

    proto = pb.ModelProto()
    proto.ParseFromString(pathlib.Path(tokenizer_path).read_bytes())
    proto.pieces[3].type = pb.ModelProto.SentencePiece.Type.CONTROL
    (tmp_path / "tokenizer.model").write_bytes(proto.SerializeToString())
    assert models.load_tokenizer(tmp_path / "tokenizer.model").unk_id() == -1
    files = models.hf_tokenizer_files(tmp_path / "tokenizer.model")
    assert "unk_token" not in json.loads(files["special_tokens_map.json"])
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    assert hf_tokenizer(tmp_path)("sort 3 1")["input_ids"][0] == 2  # BOS, then the pieces


def test_chat_template_and_tokenizer_of_the_export_match_reasonkit(tmp_path, tokenizer_path):
    src = source_dir(tmp_path / "src", G3, tokenizer_path)
    out = models.export_merged(lora_model_with_delta(G3), G3, LORA, tmp_path / "merged", src)
    hf, sp = hf_tokenizer(out), models.load_tokenizer(out / "tokenizer.model")
    want = [sp.bos_id()] + sp.EncodeAsIds(template.format_prompt(QUESTION))  # reasonkit's prompt
    messages = [{"role": "user", "content": f"{template.INSTRUCTION}\n{QUESTION}"}]
    # Gemma's template trims the message; format_prompt(q) equals it for a q without
    # surrounding whitespace.
    text = hf.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert text == hf.bos_token + template.format_prompt(QUESTION)
    ids = list(hf.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)["input_ids"])
    assert ids == want and ids.count(sp.bos_id()) == 1
    assert hf(template.format_prompt(QUESTION))["input_ids"] == want  # plain encoding adds the BOS too
    # A whole turn: the tags are text, the turn markers special (dropped by skip_special_tokens).
    completion = template.format_completion("1 < 2 < 3.", "1 2 3")
    assert hf(completion, add_special_tokens=False)["input_ids"] == sp.EncodeAsIds(completion)
    assert hf.decode(sp.EncodeAsIds(completion), skip_special_tokens=True) == completion.removesuffix(
        template.END_OF_TURN)
    turns = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": " hi "},
             {"role": "assistant", "content": "yo"}, {"role": "user", "content": "x"}]
    assert hf.apply_chat_template(turns, tokenize=False) == (
        f"{hf.bos_token}<start_of_turn>user\nBe brief.\n\nhi<end_of_turn>\n"
        "<start_of_turn>model\nyo<end_of_turn>\n<start_of_turn>user\nx<end_of_turn>\n")
    with pytest.raises(Exception, match="alternate"):
        hf.apply_chat_template(turns[1:2] * 2, tokenize=False)
    with _quiet_transformers():
        from transformers import GenerationConfig

        stops = GenerationConfig.from_pretrained(out).eos_token_id
    assert stops == [sp.eos_id(), sp.PieceToId(template.END_OF_TURN)] == models.stop_token_ids(sp)


def test_export_copies_the_sources_tokenizer_files_and_generation_config(
        tmp_path, tokenizer_path, monkeypatch):
    src = source_dir(tmp_path / "src", G2, tokenizer_path)
    for name, text in models.hf_tokenizer_files(src / "tokenizer.model").items():
        (src / name).write_text(text)
    marker = json.loads((src / "tokenizer_config.json").read_text()) | {"chat_template": "{{ 'own' }}"}
    (src / "tokenizer_config.json").write_text(json.dumps(marker))
    (src / "generation_config.json").write_text(json.dumps({"eos_token_id": [1, 7], "top_k": 64}))
    (src / "special_tokens_map.json").unlink()  # written without converting tokenizer.model again
    with _quiet_transformers():
        import transformers
    monkeypatch.setattr(transformers, "GemmaTokenizer", None)  # (for 262k pieces: minutes)
    out = models.export_merged(lora_model_with_delta(G2), G2, LORA, tmp_path / "merged", src)
    for name in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model"):
        assert (out / name).read_bytes() == (src / name).read_bytes(), name
    assert json.loads((out / "special_tokens_map.json").read_text())["bos_token"] == "<s>"
    eot = models.load_tokenizer(src / "tokenizer.model").PieceToId(template.END_OF_TURN)
    gen = json.loads((out / "generation_config.json").read_text())
    assert gen == {"eos_token_id": [1, 7, eot], "top_k": 64, "bos_token_id": 2, "pad_token_id": 0}
    assert 'attn_implementation="eager"' in (out / "README.md").read_text()  # Gemma 2's softcap


def test_export_of_a_multimodal_source_is_its_text_model(tmp_path):
    text = {**REAL["gemma-3-4b"]["text_config"], "rope_local_base_freq": 10000.0}
    (tmp_path / "config.json").write_text(json.dumps(
        {"model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"], "text_config": text,
         "vision_config": {"hidden_size": 1152}, "eos_token_id": [1, 106], "torch_dtype": "bfloat16",
         "mm_tokens_per_image": 256}))
    cfg = models_architecture.config_from_hf(tmp_path / "config.json")
    got = models_export.export_config(tmp_path, cfg)
    assert got == {**text, "model_type": "gemma3_text", "architectures": ["Gemma3ForCausalLM"],
                   "eos_token_id": [1, 106], "torch_dtype": "bfloat16"}
    # ...and it reads back as the same model, rope x8 included.
    written = json.loads((tmp_path / "config.json").read_text())
    assert models_architecture.tunix_config(cfg, got) == models_architecture.tunix_config(cfg, written)


def test_tiny_exports_say_they_hold_no_gemma_weights(tmp_path, tokenizer_path):
    cfg = dataclasses.replace(G3, source="tiny")
    src = source_dir(tmp_path / "src", cfg, tokenizer_path)
    out = models.export_adapter(lora_model_with_delta(cfg), cfg, LORA, tmp_path / "adapter", src)
    readme = (out / "README.md").read_text()
    assert "no Gemma weights" in readme and models_export.GEMMA_NOTICE not in readme
    assert readme.startswith("---\nlicense: apache-2.0\n") and "library_name: peft" in readme
    assert not (out / "NOTICE").exists()
    assert "Apache License" in (out / "LICENSE").read_text()  # reasonkit's, which the model shares


@pytest.mark.slow
@pytest.mark.parametrize("cfg", [G3, G2, dataclasses.replace(G3, num_kv_heads=2)],
                         ids=["gemma3", "gemma2", "gemma3-fused-qkv"])
def test_adapter_export_is_peft_and_exact(tmp_path, tokenizer_path, cfg):
    from safetensors.numpy import load_file

    model = lora_model_with_delta(cfg)
    src = source_dir(tmp_path / "src", cfg, tokenizer_path)
    adapter = models.export_adapter(model, cfg, LORA, tmp_path / "adapter", src)
    merged = models.export_merged(model, cfg, LORA, tmp_path / "merged", src)
    config = json.loads((adapter / "adapter_config.json").read_text())
    assert (config["peft_type"], config["task_type"], config["r"], config["lora_alpha"]) == (
        "LORA", "CAUSAL_LM", LORA.rank, LORA.alpha)
    assert config["target_modules"] == sorted(
        ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    assert config["base_model_name_or_path"] == str(src)
    assert "PeftModel" in (adapter / "README.md").read_text()
    lora = load_file(str(adapter / "adapter_model.safetensors"))
    assert len(lora) == 2 * 7 * cfg.num_layers and all(v.dtype == np.float32 for v in lora.values())
    # PEFT computes W + alpha / r * B @ A on the source's weights: that is the merged export,
    # for every weight (float32, so only summation order differs).
    base, want = load_file(str(src / "model.safetensors")), load_file(str(merged / "model.safetensors"))
    for key, w in want.items():
        module = "base_model.model." + key.removesuffix(".weight")
        if f"{module}.lora_A.weight" in lora:
            a, b = lora[f"{module}.lora_A.weight"], lora[f"{module}.lora_B.weight"]
            assert a.shape == (LORA.rank, w.shape[1]) and b.shape == (w.shape[0], LORA.rank)
            np.testing.assert_allclose(base[key] + LORA.alpha / LORA.rank * b @ a, w, atol=1e-6, err_msg=key)
        else:
            assert "proj" not in key, key  # every projection is adapted
            np.testing.assert_array_equal(base[key], w, err_msg=key)
    assert (adapter / "adapter_model.safetensors").stat().st_size < 0.2 * (merged / "model.safetensors"
                                                                         ).stat().st_size


def test_adapter_export_of_some_layers_names_them_exactly(tmp_path, tokenizer_path):
    lora = dataclasses.replace(LORA, module_path=r"layers.1.*(q_einsum|gate_proj)")
    model = lora_model_with_delta(G3, lora)
    src = source_dir(tmp_path / "src", G3, tokenizer_path)
    out = models.export_adapter(model, G3, lora, tmp_path / "adapter", src)
    targets = json.loads((out / "adapter_config.json").read_text())["target_modules"]
    names = [f"model.layers.{i}.{m}" for i in range(G3.num_layers)
             for m in ("self_attn.q_proj", "self_attn.k_proj", "mlp.gate_proj", "mlp.up_proj")]
    assert [n for n in names if re.fullmatch(targets, n)] == ["model.layers.1.self_attn.q_proj",
                                                              "model.layers.1.mlp.gate_proj"]


# --- the GGUF export: llama.cpp, Ollama, LM Studio ---------------------------------------

def gguf_fields(path):
    reader = gguf_file.read_gguf(path)
    return {k: f.contents() for k, f in reader.fields.items() if not k.startswith("GGUF.")}, reader


@pytest.mark.parametrize("cfg, kind, tol", [
    pytest.param(G3, "f16", 2e-3, id="gemma3-f16"),
    pytest.param(G2, "q8_0", 2e-2, id="gemma2-q8_0", marks=pytest.mark.slow)])
def test_gguf_export_reads_back_as_the_merged_model(tmp_path, tokenizer_path, cfg, kind, tol):
    """reasonkit's GGUF reader gives back the merged export's weights (to the type's rounding);
    the file says what llama.cpp needs: chat template, turn end, layer pattern."""
    from safetensors.numpy import load_file

    model = lora_model_with_delta(cfg)
    src = source_dir(tmp_path / "src", cfg, tokenizer_path)
    out = models.export_gguf(model, cfg, LORA, tmp_path / "gguf", src, name="run x, stage grpo", kind=kind)
    file = out / f"model-{kind}.gguf"
    assert {p.name for p in out.iterdir()} == {file.name, "Modelfile", "README.md", "NOTICE"}
    back = gguf_file.convert_gguf(file, cfg, tmp_path / "cache")
    want = models_export._merged_tensors(model, cfg, LORA)  # what export_merged writes
    got = load_file(back / "model.safetensors")
    for name, value in want.items():
        assert np.abs(got[name] - value).max() <= tol * np.abs(value).max(), name

    fields, reader = gguf_fields(file)
    tok = models.load_tokenizer(src / "tokenizer.model")
    eot = tok.PieceToId(template.END_OF_TURN)
    assert fields["tokenizer.chat_template"] == models_tokenizer.CHAT_TEMPLATE  # the source has none
    assert fields["tokenizer.ggml.eot_token_id"] == eot and fields["tokenizer.ggml.eos_token_id"] == 1
    assert (fields["general.name"], fields["general.license"]) == ("run x, stage grpo", "gemma")
    arch = cfg.family
    assert fields["general.architecture"] == arch and fields[f"{arch}.attention.key_length"] == cfg.head_dim
    if arch == "gemma3":  # llama.cpp's Gemma 3 reads the period and the sliding layers' RoPE base
        assert fields["gemma3.attention.sliding_window_pattern"] == 6
        assert fields["gemma3.rope.freq_base_swa"] == 10_000.0
    assert {t.tensor_type.name for t in reader.tensors if len(t.shape) == 2} == {kind.upper()}
    readme = (out / "README.md").read_text()
    assert readme.startswith("---\nlicense: gemma\n") and "- gguf\n" in readme
    assert f"llama-cli -m {file.name}" in readme and "ollama create" in readme
    assert "Not run by reasonkit: llama.cpp" in readme.split("## Checked")[1]
    assert (out / "NOTICE").read_text().startswith("Gemma")


@pytest.mark.slow
def test_gguf_export_reloads_to_the_lora_models_logits(tmp_path, tokenizer_path):
    model = lora_model_with_delta(G3)
    src = source_dir(tmp_path / "src", G3, tokenizer_path)
    out = models.export_gguf(model, G3, LORA, tmp_path / "gguf", src, kind="f16")
    back = gguf_file.convert_gguf(out / "model-f16.gguf", G3, tmp_path / "cache")
    got, want = forward(models.load_model(back, G3), TOKENS), forward(model, TOKENS)
    assert np.linalg.norm(got - want) <= 2e-3 * np.linalg.norm(want)  # f16's rounding of the weights
    assert (got.argmax(-1) == want.argmax(-1)).mean() >= 0.99


def test_gguf_export_of_a_sources_own_chat_template_and_rope_scaling(tmp_path, tokenizer_path):
    """A Gemma source's tokenizer_config.json template goes into the file, and its global
    layers' linear RoPE scaling (Gemma 3 4B and up) as llama.cpp's rope.scaling keys."""
    src = source_dir(tmp_path / "src", G3, tokenizer_path)
    config = json.loads((src / "config.json").read_text())
    config["rope_scaling"] = {"rope_type": "linear", "factor": 8.0}
    (src / "config.json").write_text(json.dumps(config))
    (src / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ 'own' }}"}))
    out = models.export_gguf(lora_model_with_delta(G3), G3, LORA, tmp_path / "gguf", src, kind="f16")
    fields, _ = gguf_fields(out / "model-f16.gguf")
    assert fields["tokenizer.chat_template"] == "{{ 'own' }}"
    assert (fields["gemma3.rope.scaling.type"], fields["gemma3.rope.scaling.factor"]) == ("linear", 8.0)
    back = gguf_file.gguf_hf_config(gguf_file.read_gguf(out / "model-f16.gguf"), out)
    assert back["rope_scaling"] == {"rope_type": "linear", "factor": 8.0}  # and reads back as such


def test_tiny_gguf_export_carries_reasonkits_licence(tmp_path, tokenizer_path):
    cfg = dataclasses.replace(G3, source="tiny")
    src = source_dir(tmp_path / "src", cfg, tokenizer_path)
    out = models.export_gguf(lora_model_with_delta(cfg), cfg, LORA, tmp_path / "gguf", src, kind="q8_0")
    assert {p.name for p in out.iterdir()} == {"model-q8_0.gguf", "Modelfile", "README.md", "LICENSE"}
    fields, _ = gguf_fields(out / "model-q8_0.gguf")
    assert fields["general.license"] == "apache-2.0" and fields["general.name"] == "reasonkit export"
    assert "Apache-2.0" in (out / "Modelfile").read_text()
    with pytest.raises(ValueError, match=r"kind='q4_0': must be one of \('f32', 'f16', 'q8_0'\)"):
        models.export_gguf(lora_model_with_delta(cfg), cfg, LORA, tmp_path / "x", src, kind="q4_0")


def test_ollama_modelfile_names_the_file_the_turn_format_and_the_stop():
    text = models_export.ollama_modelfile("model-f16.gguf", G3)
    lines = text.splitlines()
    assert "FROM ./model-f16.gguf" in lines and 'PARAMETER stop "<end_of_turn>"' in lines
    assert f'LICENSE """{models_export.GEMMA_NOTICE}"""' in lines
    template_text = text.split('TEMPLATE """')[1].split('"""')[0]
    assert template_text == models_export.OLLAMA_TEMPLATE
    # Go's text/template: balanced actions, the turn markers as text, the model's turn opened
    # last, and no BOS (Ollama adds it, as the file's add_bos_token says).
    assert template_text.count("{{") == template_text.count("}}")
    assert template_text.endswith(f"{template.START_OF_TURN}model\n") and "<bos>" not in template_text
    assert template_text.count(template.END_OF_TURN) == 1
