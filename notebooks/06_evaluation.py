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
# **What you will do:** evaluate the base model and every stage this run has finished
# (SFT, DPO, GRPO) on the same held-out prompts with the same decoding settings; look at
# the per-stage table, the per-domain breakdown, why answers failed to extract, and a few
# completions side by side; and read, in words, what each stage improved and what it
# regressed. On the Gemma presets every stage is also scored on GSM8K's test split, the
# number published results use. Results go to `runs/<run>/eval/`.
#
# **What you will learn:** why one fixed evaluation is the only fair way to compare
# stages; what format pass, accuracy, pass@k and maj@k each measure; and that a stage
# can make one thing better and another worse: in *Training Gemma 2 2B to Reason with
# Tunix*, the write-up this pipeline follows, DPO lowered format pass from 89.5% to 76.8%.
# This notebook is built to surface such things, not hide them.
#
# **What you need:** the data splits from `02_dataset_rebalance`, and whichever of
# `03_sft`, `04_dpo`, `05_grpo` you have run: stages that have not finished are skipped
# with a note, so with data alone you get the base model's row. The `tiny` preset runs
# on a CPU; the Gemma presets need the TPU they trained on.

# %% [markdown]
# ## Setup
# The first cell is the same in every notebook. It finds reasonkit: installed (locally
# `bash scripts/setup.sh` did it), a checkout of the repository (this folder's parent, a
# clone in `./reasonkit`, which it makes from `$REASONKIT_REPO` on Colab, or a Kaggle
# dataset made of it, in either of Kaggle's input layouts), the wheels dataset of
# `scripts/kaggle_dataset.py` attached on Kaggle, or `$REASONKIT_PIP`; finding none, it
# names the places it looked. It makes the JAX stack, Tunix and transformers the tested
# versions (installing what differs, with pip's output shown; it says when the runtime
# must restart), then starts the session: earlier runs attached on Kaggle are restored
# (it says what each holds), compiled programs are kept under `runs/`, and the session's
# deadline is set. Step by step for Kaggle and Colab: `docs/kaggle.md`.

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

source = reasonkit_bootstrap.setup()  # reasonkit, the tested JAX stack, this session's runs and deadline

# %%
import collections
import dataclasses

import matplotlib.pyplot as plt
from IPython.display import Markdown, display

from reasonkit import checks, data, evaluate, models, plots, template
from reasonkit.presets import get_preset
from reasonkit.runtime import mesh
from reasonkit.runtime.runs import NOTEBOOK_OF, RunDir, latest_step

mesh.init_distributed()  # a no-op on one host; joins the pod on several
preset = get_preset()  # $REASONKIT_PRESET (default "auto": tiny on a CPU), $REASONKIT_OVERRIDES
run = RunDir.create()
splits, _ = data.read_splits(run.require("data"))
print(f"preset {preset.name!r}: {preset.description}")
print(f"run {run.path}, outputs go to {run.stage('eval')}")

# %% [markdown]
# ## The held-out set and the decoding settings
# `02_dataset_rebalance` held these prompts out *before* rebalancing, so none of them
# (nor a duplicate) was trained on by any stage. Every stage is decoded the same way:
# **greedy** for format pass, accuracy and the lengths, plus `num_samples` **sampled**
# completions per prompt (fixed seeds) for pass@k and maj@k.

# %%
per_domain = collections.Counter(r["domain"] for r in splits.eval)
print(f"{len(splits.eval)} held-out prompts:",
      ", ".join(f"{d} {n}" for d, n in sorted(per_domain.items())))
print("decoding:", ", ".join(f"{k}={v}" for k, v in dataclasses.asdict(preset.eval).items()))
example = splits.eval[0]
print(f"\n--- one held-out prompt ({example['domain']}, gold answer {example['answer']!r})")
print(template.format_prompt(example["prompt"]))

# %% [markdown]
# ## Which stages are there?
# The base model always; then each stage whose `finished.json` exists. A stage that
# stopped early (a session deadline) has checkpoints but no `finished.json`: it is
# skipped too, because its adapters are not what the stage set out to train. Run its
# notebook again to resume it, then come back here.

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
# ## Tunix's sampler, on one prompt
# Every completion below comes from Tunix's `Sampler`, built as Tunix's examples build
# it: the model, its tokenizer and a `CacheConfig` (a KV cache long enough for a whole
# prompt and answer). Calling it with prompts pads them to `max_prompt_length` and
# decodes greedily (temperature 0) until a stop id or `max_generation_steps`; with
# `temperature`, `top_p` and `top_k` it samples.
# Here it answers the held-out prompt above with the last stage's model. One patch:
# `tunix_patches.sampling.without_remat` gives the sampler the model with
# rematerialisation off over the same arrays (Tunix's sampler traces the graph it is
# given, and with `model.remat` on, as in every Gemma preset, that graph cannot decode).
# `evaluate` builds the same sampler once per stage and calls it on batches of
# prompts.

# %%
from tunix import CacheConfig, Sampler

from reasonkit.tunix_patches.sampling import without_remat

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
# One stage at a time: load the base weights (plus the stage's LoRA adapters), generate
# greedy and sampled completions for every held-out prompt, score them with the same
# answer extraction the GRPO rewards use, then free the model before loading the next.
# Evaluation runs on the mesh GRPO uses (`mesh.stage_mesh(preset, "eval")`): it is
# generation, like GRPO's rollouts.
#
# Nothing here is cached: re-running recomputes every row from the checkpoints and gives
# the same numbers (greedy decoding is deterministic, and the samples use fixed seeds).

# %%
models.read_platform_secrets()  # Gemma weights: HF_TOKEN or KAGGLE_* secrets, never printed
eval_mesh = mesh.stage_mesh(preset, "eval")

# %%
# Per stage: evaluate.load_stage, evaluate.evaluate_model (greedy + sampled), then free it.
results, seconds = evaluate.evaluate_run(preset, run, stages, mesh=eval_mesh)

# %% [markdown]
# ## The stage table
# - **format pass**: the greedy completion is exactly one `<reasoning>` block then one
#   `<answer>` block, and nothing else;
# - **accuracy**: the answer in the greedy completion's `<answer>` tags is right (it
#   counts even when the rest of the format is off, e.g. no reasoning block, so the two
#   columns measure different things);
# - **lenient accuracy**: right either way: the tagged answer, or, when there is no
#   usable `<answer>` tag, the final answer of the free text ("So the answer is 16", the
#   last `\boxed{}` or number), as lm-evaluation-harness's "flexible-extract" reads GSM8K.
#   A base model never taught the tags answers in prose, so its accuracy is near 0
#   whatever it knows; this column is what it knows;
# - **partial accuracy**: credit for near misses (numbers within 10%, overlapping items);
# - **pass@k**: at least one of the k samples is right; **maj@k**: the most common
#   sampled answer is right. A large gap between them means the model *can* find the
#   answer but does not do so reliably: the room GRPO works in.

# %%
k = preset.eval.num_samples
display(Markdown(plots.stage_table(results, k=k)))
fig_stages = plots.plot_stages(results, k=k)
plt.show()

# %% [markdown]
# Error bars are one binomial standard error. With a few hundred prompts a difference of
# a couple of points is noise; the summary at the end of this notebook only calls a
# change when it is larger than two standard errors.
#
# **What SFT gains, and what it costs.** Read the base row's lenient accuracy against
# SFT's (strict) accuracy. SFT gains the format: answers a program can check, in one
# place, every time. Whether it also gains correctness is the difference between those
# two numbers, and it can be negative: a base that already solves a task in its own words
# may solve fewer once it must write them in the tags. The cell below says which it is
# here.

# %%
if "base" in results and "sft" in results:
    base_o, sft_o = results["base"]["summary"]["overall"], results["sft"]["summary"]["overall"]
    gap = 100 * (sft_o["accuracy"] - base_o["lenient_accuracy"])
    noise = evaluate.noise_points(base_o["lenient_accuracy"], sft_o["accuracy"], base_o["n"], sft_o["n"])
    print(f"base, read leniently (in its own prose): {base_o['lenient_accuracy']:.1%} right; "
          f"SFT, strictly (in the tags): {sft_o['accuracy']:.1%}, format pass {sft_o['format_rate']:.1%}")
    print(f"SFT - base: {gap:+.1f} points of accuracy "
          f"({'within' if abs(gap) <= noise else 'beyond'} two standard errors, {noise:.1f} points)")

# %% [markdown]
# ## pass@k, and the answers GRPO changed
# **pass@k**, from the samples: the chance that k sampled answers hold a right one. Where
# a stage's curve rises above its pass@1, it can find answers it does not give reliably:
# the room GRPO works in. GRPO's pass@1 moving up towards the earlier stages' pass@k is
# GRPO turning *sometimes* into *reliably*. Then the greedy answers that changed from the
# stage GRPO started from to GRPO.
#
# With `grpo.difficulty` above the data's, GRPO trained on prompts one step harder than
# SFT's gold traces (one more step or item), and only on those the policy got right
# *sometimes* (`grpo.keep_contrast`): a group all right or all wrong teaches nothing
# about correctness. `02_dataset_rebalance` then held out a block at that difficulty, and
# this section measures there, where GRPO trained; otherwise on the held-out set above.

# %%
hard = {s: results[s]["hard"] for s in results if "hard" in results[s]}
block, where = (hard, "the hard block") if hard else (results, "the held-out set")
if hard:
    display(Markdown(plots.stage_table(hard, k=k)))
curves = {s: evaluate.pass_at_k_curve(block[s]["rows"]) for s in block if s != "base"}
n_block = len(next(iter(block.values()))["rows"])
fig_pass = plots.plot_pass_at_k(curves, f"pass@k on {where} ({n_block} prompts)")
plt.show()
before = "dpo" if "dpo" in block else "sft"
if "grpo" in block and before in block:
    display(Markdown(plots.changed_answers(block[before]["rows"], block["grpo"]["rows"], (before, "grpo"))))

# %% [markdown]
# ## Try it: GRPO on format rewards only
# The last section of `05_grpo` trains GRPO once more in a branch of this run,
# `<run>-format-only`, from the same adapters but rewarded for the format alone. If it
# ran, here it is as one more row. GRPO knows the task only through its reward: with
# format rewards alone, every push goes towards well-formed answers, so format pass holds
# or rises while accuracy stays where the stage before left it, or drifts (nothing holds
# it up). The model satisfies the reward without getting better at the task: reward
# hacking in miniature, and why the answer rewards (`answer_correct`, `answer_close`,
# `numeric_backup`) are in `grpo.rewards`. On `tiny` expect both GRPO rows within noise
# of DPO's accuracy (its short GRPO gains little either way, as `05_grpo` says); with
# Gemma and the full steps, the gap between the two GRPO rows is the lesson.

# %%
FORMAT_ONLY_ROW = "grpo, format rewards only"
fmt_run = RunDir(run.path.with_name(f"{run.name}-format-only"))
if not fmt_run.is_finished("grpo"):
    print(f"no finished GRPO in {fmt_run.path}: run the last section of 05_grpo to add this row")
else:
    fmt_results, _ = evaluate.evaluate_run(preset, fmt_run, ["grpo"], mesh=eval_mesh)
    display(Markdown(plots.stage_table({**results, FORMAT_ONLY_ROW: fmt_results["grpo"]}, k=k)))
    compared = [s for s in (fmt_run.finished_info("grpo").get("started_from"), "grpo") if s in results]
    display(Markdown(plots.bullets([x for s in compared for x in evaluate.describe_changes(
        {s: results[s], FORMAT_ONLY_ROW: fmt_results["grpo"]})], "- nothing to compare it with")))

# %% [markdown]
# ## GSM8K test, strict / lenient
# The held-out set is a slice of this run's own data; nobody else has numbers on it.
# GSM8K's test split (1319 grade-school problems, apart from the train split `02` may
# draw on) has published ones. Each stage answers every problem once, greedily, with
# the prompt and settings above. **strict**: the answer in the `<answer>` tag is right
# (the held-out accuracy's rule). **lenient**: the last `\boxed{}` or number anywhere in
# the completion is right, tags or not, as lm-evaluation-harness's "flexible-extract"
# reads GSM8K: a base model that never saw the tags scores only here. A prompt over
# `eval.max_prompt_length` is not generated and counts as wrong ("too long").
# `docs/gsm8k.md` lists published numbers and how they were measured: they are a range
# to expect, not a like-for-like comparison. `eval.gsm8k_test` picks the
# source (`"hf"` on the Gemma presets); the tiny preset skips it.

# %%
if any("gsm8k" in res for res in results.values()):
    display(Markdown(plots.gsm8k_table(results)))
else:
    print(f"GSM8K test: skipped (preset {preset.name!r} sets no eval.gsm8k_test; "
          """REASONKIT_OVERRIDES='{"eval.gsm8k_test": "hf"}' turns it on)""")

# %% [markdown]
# ## Per domain
# The overall numbers average six domains that can move in opposite directions. Each
# cell is *format pass / accuracy* of the greedy completions.

# %%
display(Markdown(plots.domain_table(results)))

# %%
fig_domains = plots.plot_domains(results, metric="accuracy")
plt.show()
fig_domain_format = plots.plot_domains(results, metric="format_rate")
plt.show()

# %% [markdown]
# ## Why answers failed to extract
# A completion with no usable answer is counted under one reason (the same list the
# rewards use). `ok` means an answer was extracted; it may still be wrong. A base model
# that never saw the tags fails with `no_answer_tag`; a stage that learned the tags but
# rambles past `max_generation_length` shows up as `unclosed_tag`; `text_after_answer`
# means it did not stop after `</answer>`.

# %%
display(Markdown(plots.failure_table(results)))

# %% [markdown]
# ## How long are the answers?
# Greedy completion lengths in tokens. A pile-up at `max_generation_length` means
# completions were cut off before `</answer>`; a stage that got much shorter or longer
# than the one before changed *how* the model answers, not only whether it is right.

# %%
fig_lengths = plots.plot_lengths(results, max_length=preset.eval.max_generation_length)
plt.show()
near = {s: sum(r["length"] >= 0.95 * preset.eval.max_generation_length for r in res["rows"])
        for s, res in results.items()}
print("completions at or near the length limit (likely cut off):",
      ", ".join(f"{s} {near[s]}" for s in evaluate.ordered(results)))

# %% [markdown]
# ## Side by side
# The first held-out prompt of three domains, with each stage's greedy completion
# marked right (✓) or wrong (✗) twice: strictly (the answer tag) and leniently (an answer
# in prose counts too), cut to 160 characters. The base model's prose answers are right
# or wrong only leniently. Read a few before trusting any table: a
# metric can improve for reasons you would not want. Raise `n` to see more.

# %%
rows = results["base"]["rows"]
first = [rows.index(next(r for r in rows if r["domain"] == d)) for d in sorted(per_domain)]  # one each
picked = {s: {"rows": [res["rows"][i] for i in first]} for s, res in results.items()}
display(Markdown(plots.side_by_side(picked, n=3)))

# %% [markdown]
# ## What improved, what regressed
# Each stage against the one before it, on format pass and accuracy. A move counts only
# when it is larger than 2 points and two standard errors; otherwise it is reported as
# unchanged. Regressions are printed in bold with ⚠.

# %%
changes = evaluate.describe_changes(results)
display(Markdown(plots.bullets(changes, "- only the base model was evaluated: "
                                "nothing to compare yet (run 03_sft and come back)")))
print(f"{sum('REGRESSED' in x for x in changes)} regression(s) between consecutive stages")

# %% [markdown]
# A stage can undo what an earlier one gained while each step looks small. The net
# effect: the last stage against every stage before its predecessor.

# %%
last = evaluate.ordered(results)[-1]
net = [x for s in evaluate.ordered(results)[:-2]
       for x in evaluate.describe_changes({s: results[s], last: results[last]})]
display(Markdown(plots.bullets(net, "- nothing to add: fewer than three stages")))

# %% [markdown]
# The same, per domain, listing only what moved. A domain has a sixth of the prompts, so
# here a move must also be at least 10 points (with 16 prompts, one prompt is 6 points).

# %%
moved = []  # stays empty with the base model alone
for d in sorted(per_domain):
    per = {s: {"summary": {"overall": results[s]["summary"]["per_domain"][d]}}
           for s in results if d in results[s]["summary"]["per_domain"]}
    moved += [f"{d}: {x}" for x in evaluate.describe_changes(per, min_points=10)
              if "unchanged" not in x]
display(Markdown(plots.bullets(moved, "- no domain moved beyond noise" if len(results) > 1
                                else "- nothing to compare yet")))

# %% [markdown]
# ## Optional: an LLM judge
# Format and accuracy are checked by code; the *quality* of the reasoning is not. If you
# have access to a strong model, define `JUDGE` to score each greedy completion 1-10 for
# reasoning and for the answer. It is off by default: it costs API calls (one per prompt
# and stage, up to `JUDGE_MAX_ROWS` prompts each) and needs network. For example:
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
# Scores outside 1-10 and calls that raise are skipped and counted, never averaged in.
# Every stage is judged on the same first `JUDGE_MAX_ROWS` prompts.

# %%
JUDGE = None  # a function (prompt, completion, gold) -> {"reasoning": 1-10, "answer": 1-10}
JUDGE_MAX_ROWS = 100

if JUDGE is None:
    print("LLM judge: off (set JUDGE above to score reasoning and answers 1-10)")
else:
    judged = {s: evaluate.judge(results[s]["rows"][:JUDGE_MAX_ROWS], JUDGE)
              for s in evaluate.ordered(results)}
    for s, scores in judged.items():
        results[s]["summary"]["judge"] = scores  # saved with results.json below
    display(Markdown(plots.judge_table(judged)))

# %% [markdown]
# ## Use the model elsewhere: the exports, and a push
# `05_grpo` exported the GRPO model to `runs/<run>/grpo/`: `adapter` (PEFT), `merged`
# (transformers, vLLM, Tunix) and, with `gguf="f16"`, `gguf` (one GGUF file and an Ollama
# Modelfile, for llama.cpp, Ollama and LM Studio). What was checked, and how: reasonkit
# reloads the merged model and reads the GGUF file back (every CI run); transformers
# gives the same logits from the merged model and from an f16 GGUF file
# (`benchmarks/hf_parity.py`, `benchmarks/gguf_export.py`: within 2e-3); Go's template
# engine, Ollama's, renders the Modelfile's template as the chat template. llama.cpp,
# Ollama and LM Studio themselves were not run (`docs/exports.md`).
#
# `models.push` uploads an export to the Hugging Face Hub (`hf:<you>/<name>`) or Kaggle
# Models (`kaggle:<you>/<model>/<framework>/<variation>`) with its model card and licence
# file, once. Here it is a dry run: it checks the export is complete and lists what would
# go where, with no network. To push, set `TO` and `DRY_RUN = False`, and add `HF_TOKEN`
# (or `KAGGLE_USERNAME` and `KAGGLE_KEY`) as a notebook secret.

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
# `runs/<run>/eval/` gets `results.json` (settings and every summary), one
# `completions_<stage>.jsonl` per stage (every scored row, to grep), `stage_table.md`
# and the plots; with GSM8K, `gsm8k_table.md` and `gsm8k_completions_<stage>.jsonl`.
# Evaluation is derived from the checkpoints, not a training stage, so re-running this
# notebook replaces these files instead of refusing.

# %%
out = evaluate.save_run(run, preset, results, seconds, files={
    **plots.eval_tables(results, k), "stages.png": fig_stages, "domains_accuracy.png": fig_domains,
    "domains_format.png": fig_domain_format, "lengths.png": fig_lengths})  # stale completions go
print(sorted(p.name for p in out.iterdir()))

# %% [markdown]
# ## Check: every stage changed the model, and SFT taught the format
# The last cell asserts what this notebook delivers: a row for the base model and for
# every stage that finished, each scored on every held-out prompt, with every rate
# between 0 and 1 and a mean length within `eval.max_generation_length` tokens, and the
# same rows in the `stage_table.md` it saved. Those are exact. Then `checks.check_stages`
# fails when a stage did not do its job:
#
# - **Each stage differs from the one before it**: at least one held-out prompt gets
#   another greedy completion. Greedy decoding is deterministic, so a stage whose
#   adapters stayed where the stage before left them (a learning rate of 1e-12, say)
#   writes exactly the same answers, and a stage that is secretly the base model too.
# - **SFT beats the base on format**: its format pass is at least 20 points above the
#   base's. A base model does not write the tags; an SFT that learned nothing would not
#   either.
#
# Whether GRPO beat SFT is not asserted: on `tiny` a point or two on these prompts is
# noise (`docs/results.md`).

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
print(checks.check_stages(results, stages))

# %% [markdown]
# ## What next
# - **A bigger preset.** The `tiny` model shows the mechanics; real numbers need Gemma:
#   `REASONKIT_PRESET=gemma3-1b` (Kaggle v5e-8) or `gemma3-270m` (Colab v5e-1), then run
#   01-06 again under a new run name (`REASONKIT_RUN=...`) so both runs are kept.
# - **More GRPO steps.** If pass@k is well above accuracy, GRPO has room left:
#   `REASONKIT_OVERRIDES='{"grpo.max_steps": 1600}'` and `RETRAIN = True` in `05_grpo`
#   (a finished stage is never extended silently: this trains GRPO again from its
#   start), or the same overrides for 02-06 under a new run name to keep both.
# - **The loss variants.** ORPO instead of DPO (`**{"dpo.algorithm": "orpo"}`), or another
#   GRPO loss (`"grpo.loss"`: `"gspo-token"`, `"dapo"`, `"dr-grpo"`), in a new run; then
#   compare the stage tables, and whether format pass still drops after the preference stage.
# - **Tell a change from noise (tiny preset).** One run on these prompts cannot: a seed
#   moves accuracy by a point or two. `python benchmarks/seeds.py` trains the three stages
#   for seven seeds and scores them on 1036 and 5787 held-out prompts (`docs/results.md`);
#   `--seeds 0 1 2` for fewer.
# - **Use the model.** `05_grpo` merges the GRPO adapters into the base and saves them to
#   `runs/<run>/grpo/merged` (Hugging Face safetensors + tokenizer): load that directory
#   with `models.load_model(run.stage("grpo") / "merged", preset.model)`, or with
#   transformers, and generate with it like any Gemma checkpoint; or run the GGUF file with
#   llama.cpp or Ollama, and share it with the push above (`docs/exports.md`).
