# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 06 · Evaluation
#
# **What you will do:** score the base model and each finished stage (SFT, DPO, GRPO) on
# the same held-out prompts. See what each stage improved or regressed, by domain, failure
# reason and answer. Gemma presets also score GSM8K's test split.
#
# **What you will learn:** why only one fixed evaluation compares stages fairly, and what
# format pass, accuracy, pass@k and maj@k measure. And that a stage can help one thing and
# hurt another: in *Training Gemma 2 2B to Reason with Tunix*, which this pipeline
# follows, DPO cut format pass from 89.5% to 76.8%.
#
# **What you need:** the splits from `02_dataset_rebalance` and any finished `03_sft`,
# `04_dpo`, `05_grpo`. `tiny` runs on a CPU; Gemma presets need the TPU they trained on.

# %% [markdown]
# ## Setup
# The first cell is the same in every notebook. It finds reasonkit (installed, this
# checkout, `$REASONKIT_REPO`, a Kaggle input or `$REASONKIT_PIP`), or says where it
# looked. It installs the tested JAX, Tunix and transformers, and says if the runtime must
# restart. The next cell starts the session: it restores runs attached on Kaggle and sets
# the session's deadline. Kaggle and Colab, step by step: `docs/kaggle.md`.

# %%
import glob
import importlib.util
import os
import subprocess
import sys

# reasonkit_bootstrap.py: in this checkout, a clone here, or a Kaggle input (docs/kaggle.md)
KAGGLE = os.environ.get("REASONKIT_KAGGLE_INPUT") or "/kaggle/input"
PLACES = ["..", ".", "reasonkit", *(f"{KAGGLE}/{p}" for p in (
    "*", "*/*", "datasets/*/*", "datasets/*/*/*", "notebooks/*/*", "notebooks/*/*/*"))]
found = [p for where in PLACES for p in sorted(glob.glob(f"{where}/reasonkit_bootstrap.py"))]
missing = not found and not importlib.util.find_spec("reasonkit_bootstrap")
if missing and os.environ.get("REASONKIT_REPO"):  # e.g. Colab: clone the repository beside the notebook
    subprocess.check_call(["git", "clone", "--depth=1", os.environ["REASONKIT_REPO"], "reasonkit"])
    found = ["reasonkit/reasonkit_bootstrap.py"]
elif missing and os.environ.get("REASONKIT_PIP"):  # reasonkit's wheel brings reasonkit_bootstrap
    subprocess.check_call([sys.executable, "-m", "pip", "install", "--no-deps", os.environ["REASONKIT_PIP"]])
elif missing:
    raise FileNotFoundError(f"reasonkit_bootstrap.py is in none of {PLACES}: clone the repository, add it "
                            "on Kaggle, or set REASONKIT_REPO or REASONKIT_PIP above (docs/kaggle.md)")
sys.path[:0] = [os.path.dirname(os.path.abspath(found[0]))] if found else []
import reasonkit_bootstrap

source = reasonkit_bootstrap.setup()  # reasonkit and the tested JAX stack

# %%
import collections
import dataclasses

import matplotlib.pyplot as plt
from IPython.display import Markdown, display

from reasonkit import data, evaluate, models, notebook, template
from reasonkit.presets import get_preset
from reasonkit.runtime import NOTEBOOK_OF, RunDir, latest_step, mesh, start_session

mesh.init_distributed()  # a no-op on one host; joins the pod on several
session = start_session()  # earlier Kaggle runs restored, compiled programs kept, the deadline set
preset = get_preset()  # $REASONKIT_PRESET (default "auto": tiny on a CPU), $REASONKIT_OVERRIDES
run = RunDir.create()
splits, _ = data.read_splits(run.require("data"))
print(f"preset {preset.name!r}: {preset.description}")
print(f"run {run.path}, outputs go to {run.stage('eval')}")

# %% [markdown]
# ## Held-out prompts and decoding
# `02_dataset_rebalance` held these prompts out *before* rebalancing: no stage trained on
# them or a duplicate. Decoding is shared: **greedy** for format pass, accuracy and
# lengths; `num_samples` **sampled** completions per prompt (fixed seeds) for pass@k and
# maj@k.

# %%
per_domain = collections.Counter(r["domain"] for r in splits.eval)
print(f"{len(splits.eval)} held-out prompts:",
      ", ".join(f"{d} {n}" for d, n in sorted(per_domain.items())))
print("decoding:", ", ".join(f"{k}={v}" for k, v in dataclasses.asdict(preset.eval).items()))
example = splits.eval[0]
print(f"\n--- one held-out prompt ({example['domain']}, gold answer {example['answer']!r})")
print(template.format_prompt(example["prompt"]))

# %% [markdown]
# ## Which stages?
# The base, then each stage with a `finished.json`. A stage stopped early (deadline) has
# only checkpoints, not the adapters it set out to train, and is skipped. Rerun its
# notebook to resume.

# %%
stages = ["base"]
for name in ("sft", "dpo", "grpo"):
    if run.is_finished(name):
        info = run.finished_info(name)
        print(f"{name:5s} {info.get('steps')} steps from {info.get('started_from') or 'base'}, "
              f"finished {info.get('finished_at')}")
        stages.append(name)
    else:
        step = latest_step(run, name)
        partial = f" (checkpoint at step {step}, not finished)" if step else ""
        print(f"{name:5s} skipped: not finished{partial}; run notebooks/{NOTEBOOK_OF[name]}")
print("evaluating:", " -> ".join(stages))

# %% [markdown]
# ## Tunix's sampler
# Completions come from Tunix's `Sampler`, built as Tunix's examples do: model, tokenizer
# and a `CacheConfig` (a KV cache for prompt plus answer). It pads prompts to
# `max_prompt_length`, then decodes greedily (temperature 0) to a stop id or
# `max_generation_steps`, or samples with `temperature`, `top_p`, `top_k`. Here the last
# stage answers the prompt above. One patch, `train.without_remat`, passes the model with
# rematerialisation off (same arrays): the sampler's traced graph cannot decode with
# `model.remat` on (every Gemma preset). `evaluate` builds one per stage, for batches.

# %%
from tunix import CacheConfig, Sampler

from reasonkit.train import without_remat

model, tok = evaluate.load_stage(preset, run, stages[-1], mesh=None)  # the base, plus that stage's adapters
cache = CacheConfig(cache_size=preset.eval.max_prompt_length + preset.eval.max_generation_length,
                    num_layers=preset.model.num_layers, num_kv_heads=preset.model.num_kv_heads,
                    head_dim=preset.model.head_dim)
sampler = Sampler(transformer=without_remat(model), tokenizer=tok, cache_config=cache)
answer = sampler([template.format_prompt(example["prompt"])], max_prompt_length=preset.eval.max_prompt_length,
                 max_generation_steps=preset.eval.max_generation_length,
                 eos_tokens=models.stop_token_ids(tok))  # greedy: temperature 0
print(f"{stages[-1]}, greedy: {answer.text[0]!r}")
del sampler, model
models.free()

# %% [markdown]
# ## Generate and score
# Per stage: load the base plus its LoRA adapters, generate greedy and sampled completions
# for every prompt, score them with the GRPO rewards' answer extraction, free the model.
# It runs on GRPO's generation mesh (`mesh.stage_mesh(preset, "eval")`). Nothing is
# cached; re-runs recompute every row identically.

# %%
models.read_platform_secrets()  # Gemma weights: HF_TOKEN or KAGGLE_* secrets, never printed
eval_mesh = mesh.stage_mesh(preset, "eval")

# %%
# Per stage: evaluate.load_stage, evaluate.evaluate_model (greedy + sampled), then free it.
results, seconds = evaluate.evaluate_run(preset, run, stages, mesh=eval_mesh)

# %% [markdown]
# ## The stage table
# - **format pass**: the greedy completion is one `<reasoning>` block, one `<answer>`
#   block, nothing else.
# - **accuracy**: the `<answer>` tag's answer is right, even with the format otherwise off
#   (no reasoning block, say).
# - **lenient accuracy**: the tag's answer or, with no usable tag, the free text's final
#   one is right ("So the answer is 16", the last `\boxed{}` or number).
#   (lm-evaluation-harness's "flexible-extract" on GSM8K.) For a base (accuracy near 0),
#   this column shows what it knows.
# - **partial accuracy**: credit for near misses (numbers within 10%, overlapping items).
# - **pass@k**: one of k samples is right. **maj@k**: the most common sampled answer is
#   right.

# %%
k = preset.eval.num_samples
display(Markdown(notebook.stage_table(results, k=k)))
fig_stages = notebook.plot_stages(results, k=k)
plt.show()

# %% [markdown]
# Error bars: one binomial standard error. With a few hundred prompts, a couple of points
# is noise.
#
# **What SFT gains, and what it costs.** Compare the base's lenient accuracy with SFT's
# strict one. SFT gains the format: checkable answers, in one place, every time. The
# difference is the correctness gained, maybe negative: a base solving a task in its own
# words may solve fewer in tags.

# %%
if "base" in results and "sft" in results:
    base_o, sft_o = results["base"]["summary"]["overall"], results["sft"]["summary"]["overall"]
    gap = 100 * (sft_o["accuracy"] - base_o["lenient_accuracy"])
    noise = notebook.noise_points(base_o["lenient_accuracy"], sft_o["accuracy"], base_o["n"], sft_o["n"])
    print(f"base, read leniently (in its own prose): {base_o['lenient_accuracy']:.1%} right; "
          f"SFT, strictly (in the tags): {sft_o['accuracy']:.1%}, format pass {sft_o['format_rate']:.1%}")
    print(f"SFT - base: {gap:+.1f} points of accuracy "
          f"({'within' if abs(gap) <= noise else 'beyond'} two standard errors, {noise:.1f} points)")

# %% [markdown]
# ## pass@k and changed answers
# GRPO's pass@1 rising towards earlier stages' pass@k is GRPO turning *sometimes* into
# *reliably*; a large gap is its room. Then: greedy answers GRPO changed from its starting
# stage.
#
# With `grpo.difficulty` above the data's, GRPO trained one step harder (one more step or
# item; see `05_grpo`), and this section measures on the block `02_dataset_rebalance` held
# out at that difficulty; else on the held-out set.

# %%
hard = {s: results[s]["hard"] for s in results if "hard" in results[s]}
block, where = (hard, "the hard block") if hard else (results, "the held-out set")
if hard:
    display(Markdown(notebook.stage_table(hard, k=k)))
curves = {s: evaluate.pass_at_k_curve(block[s]["rows"]) for s in block if s != "base"}
n_block = len(next(iter(block.values()))["rows"])
fig_pass = notebook.plot_pass_at_k(curves, f"pass@k on {where} ({n_block} prompts)")
plt.show()
before = "dpo" if "dpo" in block else "sft"
if "grpo" in block and before in block:
    changed = notebook.changed_answers(block[before]["rows"], block["grpo"]["rows"], (before, "grpo"))
    display(Markdown(changed))

# %% [markdown]
# ## Try it: format-only GRPO
# `05_grpo`'s last section trains a GRPO branch, `<run>-format-only`, on format rewards
# alone; if run, it is a row here. GRPO knows the task only through its reward; here it
# meets the reward, not the task: reward hacking in miniature, and why `grpo.rewards` has
# answer rewards (`answer_correct`, `answer_close`, `numeric_backup`). On `tiny` short
# GRPO gains little: expect both GRPO rows within noise of DPO's accuracy. With Gemma and
# full steps, their gap is the lesson.

# %%
FORMAT_ONLY_ROW = "grpo, format rewards only"
fmt_run = RunDir(run.path.with_name(f"{run.name}-format-only"))
if not fmt_run.is_finished("grpo"):
    print(f"no finished GRPO in {fmt_run.path}: run the last section of 05_grpo to add this row")
else:
    fmt_results, _ = evaluate.evaluate_run(preset, fmt_run, ["grpo"], mesh=eval_mesh)
    display(Markdown(notebook.stage_table({**results, FORMAT_ONLY_ROW: fmt_results["grpo"]}, k=k)))
    compared = [s for s in (fmt_run.finished_info("grpo").get("started_from"), "grpo") if s in results]
    display(Markdown(notebook.bullets([x for s in compared for x in notebook.describe_changes(
        {s: results[s], FORMAT_ONLY_ROW: fmt_results["grpo"]})], "- nothing to compare it with")))

# %% [markdown]
# ## GSM8K test
# Unlike this run's held-out set, GSM8K's test split has published numbers: 1319
# grade-school problems, apart from the train split `02` may use. Each stage answers each
# once, greedily, as above. **strict**: the `<answer>` tag is right. **lenient**: the last
# `\boxed{}` or number anywhere is right. Prompts over `eval.max_prompt_length` count as
# wrong, ungenerated ("too long"). `docs/gsm8k.md` lists published numbers and their
# methods: a range, not like for like. `eval.gsm8k_test` picks the source (`"hf"` on Gemma
# presets); `tiny` skips it.

# %%
if any("gsm8k" in res for res in results.values()):
    display(Markdown(notebook.gsm8k_table(results)))
else:
    print(f"GSM8K test: skipped (preset {preset.name!r} sets no eval.gsm8k_test; "
          """REASONKIT_OVERRIDES='{"eval.gsm8k_test": "hf"}' turns it on)""")

# %% [markdown]
# ## Per domain
# Overall numbers average six domains that can move oppositely. Cells: *format pass /
# accuracy*, greedy.

# %%
display(Markdown(notebook.domain_table(results)))

# %%
fig_domains = notebook.plot_domains(results, metric="accuracy")
plt.show()
fig_domain_format = notebook.plot_domains(results, metric="format_rate")
plt.show()

# %% [markdown]
# ## Extraction failures
# Each completion counts under one reason. `ok`: answer extracted, maybe wrong.
# `no_answer_tag`: a base that never saw the tags. `unclosed_tag`: a stage that learned
# the tags but rambles past `max_generation_length`. `text_after_answer`: no stop after
# `</answer>`.

# %%
display(Markdown(notebook.failure_table(results)))

# %% [markdown]
# ## Answer lengths
# Greedy lengths in tokens. A pile-up at `max_generation_length` means answers cut before
# `</answer>`. A stage much shorter or longer than the last changed *how* the model
# answers, not only its correctness.

# %%
fig_lengths = notebook.plot_lengths(results, max_length=preset.eval.max_generation_length)
plt.show()
near = {s: sum(r["length"] >= 0.95 * preset.eval.max_generation_length for r in res["rows"])
        for s, res in results.items()}
print("completions at or near the length limit (likely cut off):",
      ", ".join(f"{s} {near[s]}" for s in evaluate.ordered(results)))

# %% [markdown]
# ## Side by side
# The first held-out prompt of three domains, cut to 160 characters. Each stage's greedy
# answer is marked right (✓) or wrong (✗) strictly (the tag) and leniently (prose counts).
# Read a few before trusting a table: metrics can improve for unwanted reasons. Raise `n`
# for more.

# %%
rows = results["base"]["rows"]
first = [rows.index(next(r for r in rows if r["domain"] == d)) for d in sorted(per_domain)]  # one each
picked = {s: {"rows": [res["rows"][i] for i in first]} for s, res in results.items()}
display(Markdown(notebook.side_by_side(picked, n=3)))

# %% [markdown]
# ## What improved, what regressed
# Each stage against the one before, on format pass and accuracy. A move counts only
# beyond 2 points and two standard errors; else it is "unchanged". Regressions: bold, with
# ⚠.

# %%
changes = notebook.describe_changes(results)
display(Markdown(notebook.bullets(changes, "- only the base model was evaluated: "
                                "nothing to compare yet (run 03_sft and come back)")))
print(f"{sum('REGRESSED' in x for x in changes)} regression(s) between consecutive stages")

# %% [markdown]
# Small steps can undo an earlier gain: the last stage against each stage before its
# predecessor.

# %%
last = evaluate.ordered(results)[-1]
net = [x for s in evaluate.ordered(results)[:-2]
       for x in notebook.describe_changes({s: results[s], last: results[last]})]
display(Markdown(notebook.bullets(net, "- nothing to add: fewer than three stages")))

# %% [markdown]
# The same per domain, moves only. A domain has a sixth of the prompts, so a move must
# also reach 10 points (16 prompts: one is 6 points).

# %%
moved = []  # stays empty with the base model alone
for d in sorted(per_domain):
    per = {s: {"summary": {"overall": results[s]["summary"]["per_domain"][d]}}
           for s in results if d in results[s]["summary"]["per_domain"]}
    moved += [f"{d}: {x}" for x in notebook.describe_changes(per, min_points=10)
              if "unchanged" not in x]
display(Markdown(notebook.bullets(moved, "- no domain moved beyond noise" if len(results) > 1
                                else "- nothing to compare yet")))

# %% [markdown]
# ## Optional: LLM judge
# Code checks format and accuracy, not reasoning *quality*. With a strong model, define
# `JUDGE` to score each greedy completion 1-10 for reasoning and answer. Off by default,
# it needs network and costs an API call per prompt and stage. For example:
#
# ```python
# import json
# from reasonkit import models
#
# models.read_platform_secrets(("OPENAI_API_KEY",))  # Kaggle / Colab secret -> env; never printed
#
# def JUDGE(prompt, completion, gold):
#     from openai import OpenAI  # or any client you like
#     ask = (f"Question:\n{prompt}\n\nReference answer: {gold}\n\nModel output:\n{completion}\n\n"
#            'Score it. Reply with JSON only: {"reasoning": <1-10>, "answer": <1-10>}')
#     reply = OpenAI().chat.completions.create(
#         model="gpt-4o-mini", messages=[{"role": "user", "content": ask}],
#         response_format={"type": "json_object"})
#     return json.loads(reply.choices[0].message.content)
# ```
#
# Scores outside 1-10 and calls that raise are skipped and counted, never averaged. All
# stages get the same first `JUDGE_MAX_ROWS` prompts.

# %%
JUDGE = None  # a function (prompt, completion, gold) -> {"reasoning": 1-10, "answer": 1-10}
JUDGE_MAX_ROWS = 100

if JUDGE is None:
    print("LLM judge: off (set JUDGE above to score reasoning and answers 1-10)")
else:
    judged = {s: notebook.judge(results[s]["rows"][:JUDGE_MAX_ROWS], JUDGE)
              for s in evaluate.ordered(results)}
    for s, scores in judged.items():
        results[s]["summary"]["judge"] = scores  # saved with results.json below
    display(Markdown(notebook.judge_table(judged)))

# %% [markdown]
# ## Exports and push
# `05_grpo` exported GRPO to `runs/<run>/grpo/`. Its `merged` safetensors load in
# transformers, vLLM or Tunix like any Gemma checkpoint;
# `models.load_model(run.stage("grpo") / "merged", preset.model)` loads them here. Every
# CI run reloads the merged model and reads the GGUF back: transformers gets the same
# logits from both, within 2e-3 (`benchmarks/exports/hf_parity.py`,
# `benchmarks/exports/gguf_export.py`). Ollama's Go template engine renders the
# Modelfile's template as the chat template. llama.cpp, Ollama and LM Studio themselves
# were not run (`docs/exports.md`).
#
# `models.push` uploads an export once, with model card and licence, to the Hugging Face
# Hub (`hf:<you>/<name>`) or Kaggle Models
# (`kaggle:<you>/<model>/<framework>/<variation>`). Here an offline dry run checks the
# export is complete and lists what goes where. To push, set `TO`, `DRY_RUN = False` and a
# notebook secret `HF_TOKEN` (or `KAGGLE_USERNAME`, `KAGGLE_KEY`).

# %%
TO = "hf:your-name/reasonkit-grpo"  # or "kaggle:your-name/reasonkit/transformers/tiny"
DRY_RUN = True
ready = [p for p in (run.stage("grpo") / kind for kind in ("gguf", "merged", "adapter")) if p.is_dir()]
if not ready:
    print("no GRPO export yet: 05_grpo writes it once GRPO has finished")
else:
    try:
        pushed = models.push(ready[0], TO, dry_run=DRY_RUN)  # prints what goes where
    except models.PushError as e:  # an incomplete export, or no credentials: says what to do
        print(e)

# %% [markdown]
# ## Save
# `runs/<run>/eval/` gets `results.json` (settings, every summary),
# `completions_<stage>.jsonl` (every scored row), `stage_table.md` and the plots. With
# GSM8K, also `gsm8k_table.md` and `gsm8k_completions_<stage>.jsonl`. Evaluation only
# reads checkpoints, so re-runs replace these files instead of refusing.

# %%
out = evaluate.save_run(run, preset, results, seconds, files={
    **notebook.eval_tables(results, k), "stages.png": fig_stages, "domains_accuracy.png": fig_domains,
    "domains_format.png": fig_domain_format, "lengths.png": fig_lengths})  # stale completions go
print(sorted(p.name for p in out.iterdir()))

# %% [markdown]
# ## Check: stages changed the model; SFT taught the format; the end is not below SFT
# The last cell asserts the rows exactly: the base and each finished stage, every held-out
# prompt, rates in [0, 1], mean lengths within `eval.max_generation_length`, the same rows
# in `stage_table.md`. Then `notebook.check_stages` fails a stage that did not do its job:
#
# - **Each stage differs from the one before it**: some held-out prompt gets another
#   greedy completion. Unmoved adapters (learning rate 1e-12, say) or a secret base model
#   repeat the answers before.
# - **SFT beats the base on format** by at least 20 points: a base does not write the
#   tags, nor would an SFT that learned nothing.
# - **The last stage does not end below SFT**: its accuracy is at most two paired standard
#   errors below SFT's (paired: a prompt both get right adds no noise). A series ending
#   worse than SFT fails here: keep SFT's adapters.
#
# Not asserted: GRPO beating SFT, within seed noise on `tiny` ("What next").
#
# **What the series did on the real Gemma 3 270M** (`benchmarks/results/real_270m_cpu.json`,
# 504 prompts). SFT took accuracy from 0.0% to 44.6%. DPO lost 4.8 ± 1.5 points, paired.
# GRPO won back 2.2 ± 0.9 and ended at 42.1%, below SFT: -2.6 ± 1.3. This check fails that run.

# %%
table = (out / "stage_table.md").read_text()
for name in stages:
    assert name in results, f"no results for {name}"
    o = results[name]["summary"]["overall"]
    assert o["n"] == len(splits.eval), (name, o["n"], len(splits.eval))
    assert all(0.0 <= o[m] <= 1.0 for m in evaluate.METRICS), (name, o)
    assert 0 < o["mean_length"] <= preset.eval.max_generation_length, (name, o["mean_length"])
    assert f"| {name} | {o['n']} |" in table, f"{name} is not in {out / 'stage_table.md'}"
print(f"{len(stages)} rows ({', '.join(stages)}), each over {len(splits.eval)} prompts, in range")
print(notebook.check_stages(results, stages))

# %% [markdown]
# ## What next
# - **A bigger preset.** `tiny` shows the mechanics; real numbers need Gemma:
#   `REASONKIT_PRESET=gemma3-1b` (Kaggle v5e-8) or `gemma3-270m` (Colab v5e-1). Rerun
#   01-06 under a new `REASONKIT_RUN=...` to keep both.
# - **More GRPO steps**, if pass@k is well above accuracy:
#   `REASONKIT_OVERRIDES='{"grpo.max_steps": 1600}'` and `RETRAIN = True` in `05_grpo`
#   retrain GRPO from its start (finished stages never extend silently). Or rerun 02-06
#   with it in a new run, keeping both.
# - **The loss variants**, in a new run: ORPO for DPO (`**{"dpo.algorithm": "orpo"}`), or
#   another `"grpo.loss"` (`"gspo-token"`, `"dapo"`, `"dr-grpo"`). Compare stage tables:
#   does format pass still drop after the preference stage?
# - **Tell a change from noise (tiny preset)**, where a seed moves accuracy a point or
#   two. `python -m benchmarks.grpo.seeds` trains the three stages for seven seeds, scored
#   on 1036 and 5787 held-out prompts (`docs/results.md`); `--seeds 0 1 2` for fewer.
