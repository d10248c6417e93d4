"""plots: every table and figure the notebooks show. Run: pytest -q tests/test_plots.py"""

import numpy as np
import pytest

from reasonkit import budget, evaluate, notebook
from reasonkit.config import DOMAINS
from reasonkit.data import DataReport
from reasonkit.data._records import Drops
from reasonkit.presets import get_preset
from reasonkit.runtime import hardware
from reasonkit.testing import fake_results


def test_markdown_table_refuses_a_row_of_another_width():
    assert notebook.markdown_table(["a"], []) == "| a |\n|---|"
    with pytest.raises(ValueError, match=r"row 1 has 1 cells, the head 2: \['x'\]"):
        notebook.markdown_table(["a", "b"], [[1, 2], ["x"]])


def test_stage_table_in_pipeline_order_and_an_empty_stage():
    res = fake_results(grpo=(0.95, 0.75), base=(0.0, 0.1), dpo=(0.7, 0.5), sft=(0.9, 0.4))
    lines = notebook.stage_table(res, k=1).splitlines()
    assert "| pass@1 | maj@1 |" in lines[0]
    assert [line.split("|")[1].strip() for line in lines[2:]] == ["base", "sft", "dpo", "grpo"]
    assert lines[3].startswith("| sft | 100 | 90.0% | 40.0% |")
    empty = {"base": {"summary": evaluate.summarize([]), "rows": []}, **fake_results(sft=(0.5, 0.5))}
    assert "| base | 0 | - | - | - | - | - | - | - |" in notebook.stage_table(empty, k=1).splitlines()
    assert list(notebook.eval_tables(empty)) == ["stage_table.md"]  # no GSM8K: no GSM8K table


def test_evaluation_tables():
    res = fake_results(base=(0.0, 0.1), sft=(0.9, 0.4))
    assert notebook.domain_table(res).splitlines()[2:] == [
        "| general | 50 | 0% / 10% | 90% / 40% |", "| math | 50 | 0% / 10% | 90% / 40% |"]
    assert notebook.failure_table(res).splitlines() == ["| reason | base | sft |", "|---|---|---|",
                                                     "| ok | 100 | 100 |"]
    scores = {"base": {"judged": 2, "skipped": 1, "answer": 6.0}}
    assert notebook.judge_table(scores).splitlines()[2] == "| base | 2 | 1 | - | 6.00 |"
    side = notebook.side_by_side(res, n=2)
    assert side.startswith("**math** · 'q0' · gold `12`")
    assert "- sft (strict ✓, lenient ✓): `<reasoning>r" in side
    assert notebook.bullets([], "- nothing") == "- nothing"


def test_data_and_training_tables():
    report = DataReport(input={"math": 4}, eval={"math": 1}, stages={"sft": {"count": {"math": 3}}},
                        drops={"sft": Drops({"too long": 2}, {"too long": ["a:1", "a:2", "a:3"]})})
    lines = notebook.data_table(report).splitlines()
    assert lines[0] == "| domain | input | eval | sft |" and len(lines) == 2 + len(DOMAINS)
    assert "| math | 4 | 1 | 3 |" in lines
    assert notebook.drop_table(report).splitlines()[2] == "| sft | too long | 2 | a:1, a:2 |"
    assert notebook.drop_table(DataReport()) == "nothing was dropped"
    records = [{"domain": "math"}, {"domain": "coding"}]
    assert notebook.reward_table(records, {"fmt": [1.0, 0.5]}).splitlines()[::2] == [
        "| reward | math | coding |", "| fmt | 1.00 | 0.50 |"]


def test_budget_table_drops_empty_columns():
    rows = budget.budget_table(get_preset("gemma3-1b"), hardware.from_name("tpu-v5e-8"))
    lines = notebook.budget_table(rows).splitlines()
    assert lines[0].startswith("| stage | mesh | base params") and len(lines) == 6
    assert "| KV cache |" in lines[0] and "| sft | 8x1 |" in lines[2]


def test_every_figure_draws(tmp_path):
    res = fake_results(base=(0.0, 0.1), sft=(0.9, 0.4))
    figs = {"stages": notebook.plot_stages(res, k=4), "domains": notebook.plot_domains(res),
            "lengths": notebook.plot_lengths(res, max_length=8)}
    assert "pass@4" in [t.get_text() for t in figs["stages"].axes[0].get_xticklabels()]
    assert figs["lengths"].axes[0].get_title().endswith("(8)")
    steps = ([1, 2, 3], [0.7, 0.6, 0.5])
    events = ["train/loss", "eval/loss", "train/learning_rate", "rewards/train/fmt", "rewards/train/sum",
              "actor/train/kl", *(f"train/rewards/{e}" for e in ("chosen", "rejected", "margin", "accuracy"))]
    m = {e: steps for e in events}

    def fmt():
        pass

    figs |= {"sft": notebook.plot_sft(m), "dpo": notebook.plot_dpo(m),
             "grpo": notebook.plot_grpo(m, [fmt], 0.04)}
    assert len(figs["grpo"].axes) == 3  # a run from before frac_zero_std was logged
    figs["grpo_zero_std"] = notebook.plot_grpo({**m, "rewards/train/frac_zero_std": steps}, [fmt], 0.04)
    assert figs["grpo_zero_std"].axes[3].get_title() == "groups with all G rewards equal"
    batch = {"input_tokens": np.array([[2, 5, 6, 0]]), "input_mask": np.array([[0, 0, 1, 0]], bool)}
    figs["mask"] = notebook.plot_loss_mask(batch, pad_id=0)
    rows = budget.budget_table(get_preset("tiny"), hardware.from_name("cpu-1"))
    figs["memory"] = notebook.plot_memory(rows, "tiny")
    lengths = {"prompt": {"math": [3, 4], "coding": [5]}, "completion": {"math": [9], "coding": [7]}}
    figs["token_lengths"] = notebook.plot_token_lengths(lengths, {("prompt", 4): ["sft", "dpo"]}, 3)
    report = DataReport(input={"math": 4, "coding": 2}, stages={"sft": {"count": {"math": 3}}},
                        settings={"domain_weights": {"math": 1.0, "coding": 1.0}})
    figs["mix"] = notebook.plot_mix(report, "mix")
    for name, fig in figs.items():
        fig.savefig(tmp_path / f"{name}.png", dpi=40)
        assert (tmp_path / f"{name}.png").stat().st_size > 500, name


# --- what a stage is made of (03-05, "Under the hood") ------------------------------------


def test_config_table_lists_what_differs_from_tunix_defaults():
    from tunix.rl.grpo.grpo_learner import GRPOConfig
    from tunix.rl.rollout.base_rollout import RolloutConfig

    table = notebook.config_table(GRPOConfig(num_generations=8, beta=0.04, kl_loss_mode="low_var_kl"))
    assert table.splitlines()[2:] == ["| num_generations | 8 | 2 |", "| kl_loss_mode | 'low_var_kl' | 'kl' |"]
    rollout = notebook.config_table(RolloutConfig(max_prompt_length=96, eos_tokens=[1, 106]))
    assert "| eos_tokens | [1, 106] | None |" in rollout and "temperature" not in rollout
    assert notebook.config_table(GRPOConfig()) == "every field at its default"
    with pytest.raises(TypeError, match="dict is not a dataclass instance"):
        notebook.config_table({"beta": 0.1})


def test_parts_table_names_wrappers_and_bound_methods():
    import functools

    class Worker:
        def logps(self):
            return 1

    def chunked(fn):
        @functools.wraps(fn)
        def wrapped(*args):
            return fn(*args)
        return wrapped

    worker = Worker()
    table = notebook.parts_table({"worker": worker, "log-probs": chunked(worker.logps), "a | b": np.mean})
    here = f"{__name__}.test_parts_table_names_wrappers_and_bound_methods"
    assert f"| worker | `{here}.<locals>.Worker` |" in table
    assert f"| log-probs | `{here}.<locals>.chunked({here}.<locals>.Worker.logps)` |" in table
    assert "| a \\| b | `numpy.mean` |" in table


def test_advantage_table_shows_each_answer_and_its_advantage():
    texts = ["<reasoning>r</reasoning><answer>4</answer>", "<reasoning>r</reasoning><answer>5</answer>"]
    table = notebook.advantage_table(texts, {"format_exact": [3.0, 3.0], "answer_correct": [3.0, 0.0]},
                                  notebook.group_advantages([6.0, 3.0], 2))
    assert table.splitlines()[2:] == [
        "| 1 | `<reasoning>r</reasoning><answer>4</answ…` | `4` | 3.00 | 3.00 | 6.00 | +0.71 |",
        "| 2 | `<reasoning>r</reasoning><answer>5</answ…` | `5` | 3.00 | 0.00 | 3.00 | -0.71 |"]


def test_reward_and_held_out_accuracy_share_one_figure(tmp_path):
    import matplotlib.pyplot as plt

    steps = list(range(40))
    m = {"rewards/train/sum": (steps, [5.0 + 0.02 * s for s in steps]),
         "held_out/accuracy": ([0, 20, 39], [0.30, 0.40, 0.25]),
         "held_out/alarm": ([0, 20, 39], [0.0, 0.0, 1.0])}
    fig = notebook.plot_held_out(m, {"step": 20, "accuracy": 0.40})
    ax, right = fig.axes
    labels = [line.get_label() for line in ax.get_lines() + right.get_lines()]
    assert labels == ["reward (each step)", "reward (mean of 2 steps)", "held-out accuracy (greedy)",
                      "alarm: reward up, accuracy down", "best: step 20, 40.0%"]
    assert list(right.get_lines()[0].get_ydata()) == pytest.approx([30.0, 40.0, 25.0])  # percent
    assert ax.get_title() == "GRPO: reward and held-out accuracy"
    fig.savefig(tmp_path / "held_out.png", dpi=40)
    # a run without checks (grpo.eval_every=0) still draws its reward, and says why no accuracy
    bare = notebook.plot_held_out({"rewards/train/sum": m["rewards/train/sum"]})
    assert "no held-out checks" in bare.axes[0].get_title()
    # GRPO's figure draws the right-or-wrong zero-std fraction beside the summed one
    grpo = notebook.plot_grpo({"rewards/train/f": (steps, steps), "rewards/train/sum": (steps, steps),
                            "rewards/train/frac_zero_std": (steps, [0.25] * 40),
                            "rewards/train/frac_zero_std/correct": (steps, [0.4] * 40)},
                           [type("f", (), {"__name__": "f"})], 0.04)
    assert [line.get_label() for line in grpo.axes[3].get_lines()] == ["summed reward",
                                                                     "right or wrong alone"]
    plt.close("all")


def test_a_base_that_answers_in_prose_is_measured_as_it_answers():
    recs = [{"domain": "math", "answer": "12", "prompt": f"q{i}", "id": i} for i in range(4)]
    prose = ["So the answer is 12.", "So the answer is 12.", "It is 13.", "I do not know."]
    tagged = [f"<reasoning>r</reasoning>\n<answer>{a}</answer>" for a in (12, 13, 13, 13)]
    res = {}
    for stage, texts in (("base", prose), ("sft", tagged)):
        rows = evaluate.score_stage(recs, texts, [[t] for t in texts])
        res[stage] = {"summary": evaluate.summarize(rows), "rows": rows}
    lines = notebook.stage_table(res).splitlines()
    assert "| accuracy | lenient accuracy |" in lines[0]
    assert lines[2].startswith("| base | 4 | 0.0% | 0.0% | 50.0% |")  # strict 0, lenient 2 of 4
    assert lines[3].startswith("| sft | 4 | 100.0% | 25.0% | 25.0% |")
    assert "- base (strict ✗, lenient ✓): `So the answer is 12.`" in notebook.side_by_side(res, n=1)
    fig = notebook.plot_stages(res)
    assert "lenient accuracy" in [t.get_text() for t in fig.axes[0].get_xticklabels()]
