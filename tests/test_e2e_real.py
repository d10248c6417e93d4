"""gemma3-270m at its real shapes through every stage: 02 -> SFT -> DPO -> GRPO -> 06 -> export.

The preset's own model config (262144-piece vocabulary, 18 layers), random weights written
here in Hugging Face layout, the tiny tokenizer padded to the real vocabulary as a
SentencePiece proto, and short lengths and batches (:mod:`benchmarks.real_270m.e2e_real`'s ``SHORT``,
which runs the same :func:`pipeline` at the preset's own lengths, by hand).
"""

import dataclasses
import json
import math

import numpy as np
import pytest

from benchmarks.real_270m import e2e_real
from reasonkit import data, rewards, train
from reasonkit.config import TRAIN_STAGES
from reasonkit.presets import get_preset
from reasonkit.runtime import runs

STAGES = TRAIN_STAGES
pytestmark = pytest.mark.slow  # one Gemma-shaped run of every stage, shared by the tests here


@pytest.fixture(scope="module")
def e2e(tmp_path_factory):
    root = tmp_path_factory.mktemp("e2e")
    preset = e2e_real.prepare(root, quick=True)
    # the real rewards plus one on which a group's two random completions differ: GRPO moves
    fns = [*rewards.from_config(preset.grpo.rewards), e2e_real.distinct]
    return preset, e2e_real.pipeline(preset, root, reward_fns=fns)


def test_the_model_is_the_presets_real_one(e2e):
    preset, out = e2e
    real = get_preset("gemma3-270m").model
    # the preset's model but for where it comes from and the dtype (SHORT says why)
    assert preset.model == dataclasses.replace(real, source=preset.model.source, dtype="float32")
    assert (preset.model.vocab_size, preset.model.num_layers, preset.model.remat) == (262144, 18, True)
    tok = out["tokenizer"]
    assert tok.GetPieceSize() == 262144 and tok.IdToPiece(262143) == f"<unused{262143 - 512}>"
    lengths = data.stage_limits(preset)
    assert lengths["grpo"].completion == 16 and preset.eval.max_generation_length == 8
    assert preset.grpo.num_generations == 2


def test_every_stage_finished(e2e):
    preset, out = e2e
    run = out["run"]
    for stage in ("data", *STAGES, "eval"):
        assert run.is_finished(stage), stage
    for stage in STAGES:
        assert out[stage]["finished"] and out[stage]["steps"] == getattr(preset, stage).max_steps
        assert runs.latest_step(run, stage) == out[stage]["steps"]
        assert out[stage]["compiles"]["after_warmup"] in (0, None), stage  # one shape a stage
    assert (out["dpo"]["started_from"], out["grpo"]["started_from"]) == ("sft", "dpo")


def test_losses_are_finite_and_start_where_a_random_model_should(e2e):
    _, out = e2e
    run = out["run"]
    sft, dpo, grpo = (train.read_metrics(run, s) for s in STAGES)
    losses = sft["train/loss"][1] + sft["eval/loss"][1]
    assert len(sft["train/loss"][1]) == 2 and all(map(math.isfinite, losses))
    # a random model is about uniform over the 262144 pieces: the first loss is about ln(V)
    assert abs(sft["eval/loss"][1][0] - math.log(262144)) < 0.5
    assert abs(sft["train/loss"][1][0] - math.log(262144)) < 0.5
    # DPO starts with the policy equal to its reference (SFT's adapters): loss ln 2
    assert dpo["train/loss"][1][0] == pytest.approx(math.log(2), abs=1e-3)
    # GRPO's reference is the DPO policy it starts from: no divergence before the first update
    assert abs(grpo["actor/train/kl"][1][0]) < 1e-3
    assert all(math.isfinite(v) for k, (_, vs) in grpo.items() if k.startswith("actor/") for v in vs)
    assert "rewards/train/distinct" in grpo and "rewards/train/answer_correct" in grpo


def test_adapters_moved_and_the_base_did_not(e2e):
    _, out = e2e
    lora = out["lora"]
    # fresh adapters start with lora_b = 0 (the model equals the base): SFT moved them
    assert max(np.abs(v).max() for k, v in lora["sft"].items() if k.endswith("lora_b")) > 0
    for before, after in (("sft", "dpo"), ("dpo", "grpo")):
        assert lora[after].keys() == lora[before].keys()
        assert max(np.abs(lora[before][k] - lora[after][k]).max() for k in lora[after]) > 0, after
    # each trained policy's base, tensor by tensor, is the checkpoint's, bit for bit
    assert out["base_differences"] == {stage: [] for stage in STAGES}


def test_evaluation_wrote_four_prompts(e2e):
    _, out = e2e
    folder = out["run"].stage("eval")
    results = json.loads((folder / "results.json").read_text())
    assert list(results["stages"]) == ["grpo"] and results["stages"]["grpo"]["overall"]["n"] == 4
    rows = [json.loads(line) for line in (folder / "completions_grpo.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(isinstance(r["completion"], str) for r in rows)
    assert {r["prompt"] for r in rows} == {r["prompt"] for r in out["splits"].eval}
    assert (folder / "stage_table.md").is_file()


def test_export_loads_back_with_the_policys_logits(e2e):
    _, out = e2e
    merged = out["export"]["merged"]
    assert (out["export"]["adapter"] / "adapter_model.safetensors").is_file()
    assert (merged / "tokenizer.json").is_file()  # the source's, copied: not converted (minutes)
    want, got = out["logits"], out["export_logits"]  # the GRPO policy's; the export's, reloaded
    assert want.shape == (2, 8, 262144) and np.isfinite(want).all()
    np.testing.assert_allclose(got, want, atol=1e-3)
