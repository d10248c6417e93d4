"""tiny: the tiny base model's pretraining. Run: pytest -q tests/test_tiny.py"""

import dataclasses
import json

import numpy as np
import pytest

from reasonkit import models, tasks, template
from reasonkit.models import _checkpoint as models_checkpoint
from reasonkit.models import _sources as models_sources
from reasonkit.models import tiny
from reasonkit.presets import get_preset
from reasonkit.testing import forward

TOKENS = np.array([[2, 17, 40, 5, 99, 7, 0, 0], [2, 300, 12, 8, 9, 11, 13, 21]])


def test_shipped_tiny_base_model_is_the_current_recipe(tiny_dir):
    cfg = get_preset("tiny").model
    assert tiny_dir == tiny.ASSET  # shipped, not rebuilt: it matches config + recipe
    assert models_checkpoint.check_checkpoint_dir(tiny_dir, cfg).vocab_size == cfg.vocab_size
    log = json.loads((tiny_dir / "pretrain.json").read_text())
    assert log["key"] == tiny.key(cfg)
    assert log["final_loss"] < 0.1 * log["first_loss"]  # it learned the corpus
    model, tok, _ = models.load_base(cfg)
    assert model.num_embed == tok.GetPieceSize() == cfg.vocab_size
    for sym in template.SPECIAL_TOKENS:  # tags and turn markers are single pieces
        assert tok.EncodeAsPieces(sym) == [sym]


@pytest.mark.parametrize("change", [{"remat": True}, {"attention": "tunix"}, {"attention": "dense"}])
def test_how_it_computes_does_not_rebuild_the_tiny_base_model(change):
    # remat trades memory for compute (budget.py suggests it), the attention choice
    # computes the same numbers: same weights, so the shipped checkpoint serves them
    # instead of a ~45-minute rebuild.
    cfg = dataclasses.replace(get_preset("tiny").model, **change)
    assert tiny.key(cfg) == tiny.key(get_preset("tiny").model)
    assert models.resolve_source(cfg) == tiny.ASSET


def test_tiny_pretraining_never_sees_the_presets_data_pool():
    records, excluded = tiny.pretraining_records()
    cfg = get_preset("tiny").data
    pool = {template.normalize_prompt(r["prompt"])
            for r in tasks.generate_all(cfg.num_records, seed=cfg.seed, difficulty=cfg.difficulty)}
    seen = {template.normalize_prompt(r["prompt"]) for r in records}
    assert excluded > 0 and not pool & seen
    assert len(records) + excluded == 6 * tiny.DOCS_PER_DOMAIN


@pytest.mark.slow
def test_tiny_build_script_runs_and_is_deterministic(tmp_path):
    cfg = get_preset("tiny").model
    a = models_sources.build_tiny_checkpoint(cfg, steps=3, out_root=tmp_path / "a")
    b = models_sources.build_tiny_checkpoint(cfg, steps=3, out_root=tmp_path / "b")
    assert a.name == b.name == f"tiny-{tiny.key(cfg, steps=3)}"
    pieces = [[t.IdToPiece(i) for i in range(t.GetPieceSize())]
              for t in (models.load_tokenizer(d / "tokenizer.model") for d in (a, b))]
    assert pieces[0] == pieces[1]  # (the files differ only in the recorded output path)
    np.testing.assert_array_equal(forward(models.load_model(a, cfg), TOKENS),
                                  forward(models.load_model(b, cfg), TOKENS))
    assert models_sources.build_tiny_checkpoint(cfg, steps=3, out_root=tmp_path / "a") == a  # cached


def test_python_m_reasonkit_models_rebuilds_the_shipped_files(tmp_path, monkeypatch):
    """``python -m reasonkit.models [out_root]`` (README): build with force, copy into ASSET."""
    import importlib.util

    from reasonkit.models import __main__ as rebuild

    assert importlib.util.find_spec("reasonkit.models.__main__") is not None
    built = tmp_path / "built"
    built.mkdir()
    for name in rebuild.SHIPPED:
        (built / name).write_text(name)
    calls = []
    monkeypatch.setattr(rebuild, "build_tiny_checkpoint", lambda cfg, **kw: calls.append((cfg, kw)) or built)
    monkeypatch.setattr(tiny, "ASSET", tmp_path / "asset")
    rebuild.main(["out"])
    assert calls == [(get_preset("tiny").model, {"force": True, "out_root": "out"})]
    assert {"config.json", "model.safetensors", "tokenizer.model"} <= set(rebuild.SHIPPED)
    assert all((tmp_path / "asset" / name).read_text() == name for name in rebuild.SHIPPED)
