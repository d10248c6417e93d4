"""Fakes shared by the tests and the benchmarks, in the real formats: no download, seconds on a CPU.

The tiny preset cut to a few steps (:data:`SMALL`), run directories and stage results
for the tiny path. For the real path nothing is downloaded or trained: a Hugging
Face-layout checkpoint of any
:class:`~reasonkit.config.ModelConfig` with random weights, and a SentencePiece model
padded to a real vocabulary size (Gemma's 262144 pieces) with unused pieces, built as a
proto from a small tokenizer. Encoding never produces an unused piece, so text encodes
exactly as with the small tokenizer, while the model, the sampler and the exports see
the real vocabulary.

>>> proto = _padded_proto(tiny.ASSET / "tokenizer.model", 600)
>>> len(proto.pieces), proto.pieces[512].piece, proto.pieces[599].type == _UNUSED
(600, '<unused0>', True)

>>> res = fake_results(base=(0.0, 0.1), sft=(0.9, 0.4))
>>> [res[s]["summary"]["overall"]["accuracy"] for s in ("base", "sft")]
[0.1, 0.4]
"""

from __future__ import annotations

import json
import os
import pathlib
from typing import Any

import jax.numpy as jnp
import numpy as np
from sentencepiece import sentencepiece_model_pb2 as spm_pb2

from reasonkit import evaluate, masks, models
from reasonkit.config import ModelConfig, Preset
from reasonkit.models import tiny
from reasonkit.presets import get_preset
from reasonkit.runtime import runs

__all__ = ["write_hf_checkpoint", "write_random_source", "base_differences", "SMALL",
           "small_preset", "make_run", "fake_results", "forward"]

_UNUSED = spm_pb2.ModelProto.SentencePiece.Type.UNUSED


def _unused_piece(i: int) -> str:
    """The name of the ``i``-th padding piece, as Gemma's tokenizer names its own."""
    return f"<unused{i}>"


def _padded_proto(tokenizer_model: str | os.PathLike, vocab_size: int) -> spm_pb2.ModelProto:
    """``tokenizer_model``'s ModelProto with unused pieces appended up to ``vocab_size``."""
    proto = spm_pb2.ModelProto()
    proto.ParseFromString(pathlib.Path(tokenizer_model).read_bytes())
    have = len(proto.pieces)
    if vocab_size < have:
        raise ValueError(f"vocab_size={vocab_size}: {tokenizer_model} already has {have} pieces")
    for i in range(vocab_size - have):
        proto.pieces.add(piece=_unused_piece(i), score=0.0, type=_UNUSED)
    proto.trainer_spec.vocab_size = vocab_size
    return proto


def _write_padded_tokenizer(tokenizer_model: str | os.PathLike, vocab_size: int,
                           out_dir: str | os.PathLike, *, hf_files: bool = True) -> pathlib.Path:
    """Write ``<out_dir>/tokenizer.model`` padded to ``vocab_size`` (and, with ``hf_files``,
    tokenizer.json, tokenizer_config.json, special_tokens_map.json to match).

    tokenizer.json is the small tokenizer's conversion (seconds) with the unused pieces
    added to its vocabulary: converting the padded model itself takes transformers
    minutes, which is why a real Gemma source ships its own tokenizer.json and exports
    copy it (:func:`reasonkit.models._tokenizer.export_tokenizer`).
    """
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "tokenizer.model"
    path.write_bytes(_padded_proto(tokenizer_model, vocab_size).SerializeToString())
    if hf_files:
        files = models.hf_tokenizer_files(tokenizer_model)
        backend = json.loads(files["tokenizer.json"])
        vocab = backend["model"]["vocab"]  # {piece: id}
        have = len(vocab)
        vocab.update({_unused_piece(i): have + i for i in range(vocab_size - have)})
        files["tokenizer.json"] = json.dumps(backend, ensure_ascii=False)
        for name, text in files.items():
            (out / name).write_text(text)
    return path


def _hf_config_fields(cfg: ModelConfig) -> dict[str, Any]:
    """The shape fields of a config.json for ``cfg`` (transformers fills in the rest)."""
    return {"model_type": "gemma3_text" if cfg.family == "gemma3" else "gemma2",
            "hidden_size": cfg.embed_dim, "intermediate_size": cfg.hidden_dim,
            "num_hidden_layers": cfg.num_layers, "num_attention_heads": cfg.num_heads,
            "num_key_value_heads": cfg.num_kv_heads, "head_dim": cfg.head_dim,
            "vocab_size": cfg.vocab_size, "sliding_window": cfg.sliding_window,
            "query_pre_attn_scalar": cfg.head_dim}  # transformers' default is 256


def write_hf_checkpoint(path: str | os.PathLike, cfg: ModelConfig,
                        tokenizer_path: str | os.PathLike | None, seed: int = 0, skip=(),
                        reshape=None, extra=None, std: float = 0.05,
                        keep: bool = True) -> dict[str, np.ndarray] | None:
    """Gemma 3 / Gemma 2 tensors with HF key names and random weights, written by hand.

    ``skip``: tensors left out; ``reshape``: ``{name: shape}`` written as zeros of another
    shape; ``extra``: more config.json fields (``...`` removes one); ``std``: the normal
    weights' scale. ``tokenizer_path`` is copied to ``tokenizer.model`` (None: the caller
    writes it). Returns the tensors, or None with ``keep=False`` (a real-size model's
    float32 tensors are a gigabyte: written one file, then dropped).
    """
    from safetensors.numpy import save_file

    path = pathlib.Path(path)
    rng = np.random.default_rng(seed)
    tensors = {}
    for k, shape in models.hf_shapes(cfg).items():
        if k not in skip:
            tensors[k] = rng.standard_normal(shape, np.float32)  # float32: half the memory and time
            tensors[k] *= np.float32(std)
    for k, shape in (reshape or {}).items():
        tensors[k] = np.zeros(shape, np.float32)
    path.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path / "model.safetensors"))
    text = {k: v for k, v in {**_hf_config_fields(cfg), **(extra or {})}.items() if v is not ...}
    (path / "config.json").write_text(json.dumps(text))
    if tokenizer_path is not None:
        (path / "tokenizer.model").write_bytes(pathlib.Path(tokenizer_path).read_bytes())
    return tensors if keep else None


def write_random_source(path: str | os.PathLike, cfg: ModelConfig, *, seed: int = 0,
                        std: float = 0.02) -> pathlib.Path:
    """A complete model source for ``cfg`` at its real shapes, as a Kaggle / HF download has it.

    config.json (:func:`reasonkit.models.hf_config`), random weights in model.safetensors
    (``std`` 0.02: a first loss near ln(vocab_size)) and the tiny tokenizer padded to
    ``cfg.vocab_size`` with its Hugging Face files (:func:`_write_padded_tokenizer`).
    Point ``model.source`` at the returned directory.
    """
    path = pathlib.Path(path)
    _write_padded_tokenizer(tiny.ASSET / "tokenizer.model", cfg.vocab_size, path)
    write_hf_checkpoint(path, cfg, None, seed=seed, std=std, keep=False, extra=models.hf_config(cfg))
    return path


def base_differences(model, cfg: ModelConfig, source: str | os.PathLike) -> list[str]:
    """The base tensors of ``model`` that differ from ``source``'s model.safetensors (HF names).

    One tensor at a time: a frozen base must come out of training bit for bit as loaded
    (a float32 model from a float32 checkpoint: the loader's transposes are exact).
    """
    from safetensors import safe_open

    ours = models.to_hf_tensors(model, cfg)
    differ = []
    with safe_open(pathlib.Path(source) / "model.safetensors", framework="numpy") as f:
        for key in f.keys():
            if key not in ours or not np.array_equal(f.get_tensor(key).astype(ours[key].dtype), ours[key]):
                differ.append(key)
    return differ


# The tiny preset cut to a few steps of each stage on a few records: every stage trains,
# checkpoints, resumes and hands off as in a full run, in seconds.
SMALL = {
    "sft.max_steps": 4, "sft.checkpoint_every": 2, "sft.batch_size": 4,
    "dpo.max_steps": 3, "dpo.checkpoint_every": 2, "dpo.batch_size": 2,
    "grpo.max_steps": 2, "grpo.checkpoint_every": 1, "grpo.batch_size": 2,
    "grpo.max_generation_length": 24,
    "data.num_records": 40, "data.eval_per_domain": 2, "data.train_size": 60,
}


def small_preset(**overrides: Any) -> Preset:
    """The tiny preset with :data:`SMALL`'s overrides, then ``overrides``."""
    return get_preset("tiny", **{**SMALL, **overrides})


def make_run(root: str | os.PathLike, name: str, preset: Preset) -> runs.RunDir:
    """A run directory whose data stage is done (the preset's sources: for tiny, synthetic tasks)."""
    run = runs.RunDir.create(name, root=root)
    tok = models.load_tokenizer(models.resolve_source(preset.model) / "tokenizer.model")
    runs.build_data(run, preset, models.token_counter(tok))
    return run


def fake_results(**stages: tuple[float, float]) -> dict[str, Any]:
    """Stage results as :func:`reasonkit.evaluate.evaluate_run` gives them, for 100 prompts
    per stage (math and general alternating): ``stage=(fmt, acc)`` answers a fraction
    ``acc`` right and ``fmt`` well formatted (the rest readable, without a reasoning block)."""
    out = {}
    for stage, (fmt, acc) in stages.items():
        rows = []
        for i in range(100):
            ans = "12" if i < 100 * acc else "13"
            text = (f"<reasoning>r</reasoning><answer>{ans}</answer>" if i < 100 * fmt
                    else f"<answer>{ans}</answer>")  # readable answer, no reasoning block
            rec = {"domain": ["math", "general"][i % 2], "answer": "12", "prompt": f"q{i}", "id": i}
            rows += evaluate.score_stage([rec], [text], [[text]])
        out[stage] = {"summary": evaluate.summarize(rows), "rows": rows}
    return out


def forward(model, tokens) -> np.ndarray:
    """Logits ``[B, S, V]`` of a Gemma model on ``tokens`` ``[B, S]`` (id 0 is padding)."""
    tokens = jnp.asarray(tokens)
    mask = tokens != 0  # [B, S]
    logits, _ = model(tokens, masks.positions_from_mask(mask), None, masks.causal_mask(mask))
    return np.asarray(logits)
