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
# # 02 · Dataset rebalance
#
# **What you will do:** load the preset's data sources into one record schema. Look at one
# example per domain as the model sees it, in text and tokens. Measure token lengths
# against each stage's budget. Filter and rebalance the six domains. Write the evaluation
# split and the SFT / DPO / GRPO training sets to `runs/<run>/data/`.
#
# **What you will learn:** why every stage uses one prompt template, and why the
# evaluation set is held out *before* rebalancing. How up- and down-sampling reach a
# target domain mix, and where they cannot. How many rows each filter dropped, and why.
#
# **What you need:** a CPU is enough. The `tiny` preset uses synthetic tasks and needs no
# network; the Gemma presets also read GSM8K from the Hugging Face Hub.

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
import matplotlib.pyplot as plt
from IPython.display import Markdown, display

from reasonkit import data, models, notebook, template
from reasonkit.presets import get_preset
from reasonkit.runtime import RunDir, finish_data, start_session

session = start_session()  # earlier Kaggle runs restored, compiled programs kept, the deadline set
preset = get_preset()  # $REASONKIT_PRESET (default "auto": tiny on a CPU), $REASONKIT_OVERRIDES
run = RunDir.create()
print(f"preset {preset.name!r}: {preset.description}")
print(f"sources {preset.data.sources}, outputs go to {run.stage('data')}")

# %% [markdown]
# ## The tokenizer
# Lengths are budgets in *tokens*, so we count them with the model's own tokenizer. For
# `tiny` it ships with the repo, or is built on first use. For Gemma it comes with the
# weights, from Kaggle or Hugging Face. Attach `HF_TOKEN` or `KAGGLE_USERNAME` /
# `KAGGLE_KEY` as notebook secrets; `read_platform_secrets` copies them without printing.

# %%
models.read_platform_secrets()
model_dir = models.resolve_source(preset.model)
tok = models.load_tokenizer(model_dir / "tokenizer.model", vocab_size=preset.model.vocab_size)
count_tokens = models.token_counter(tok)  # text -> number of tokens (no BOS)
print(f"{tok.GetPieceSize()} pieces, from {model_dir}")
for tag in template.SPECIAL_TOKENS:
    print(f"{tag:16s} -> {tok.EncodeAsPieces(tag)}")

# %% [markdown]
# The tiny tokenizer keeps every tag as one piece, so the model writes `<answer>` in one
# step. Gemma's has `<start_of_turn>` / `<end_of_turn>` as single tokens (ids 105, 106 in
# Gemma 3; 106, 107 in Gemma 2). Its other tags are plain text, a few pieces each. That
# works too, at the cost of a few tokens. The cell above shows what this preset's
# tokenizer does.
#
# ## Load the sources
# Each source turns its rows into one schema (`id`, `domain`, `source`, `prompt`,
# `reasoning`, `answer`). It reports what it read, kept and dropped, by reason.

# %%
records, source_reports = data.load_sources(preset.data)
for report in source_reports:
    print(f"{report.source}: read {report.read}, kept {report.kept}, "
          f"dropped {report.drops.counts or 'none'}")
    for note in report.notes:
        print("   ", note)
print(f"{len(records)} records in all")

# %% [markdown]
# ## One example per domain
# Every stage formats a record with the same template. `format_prompt` wraps the question
# in a Gemma user turn that asks for the tagged answer. `format_completion` is what the
# model learns to write. With one template, GRPO's rewards and the evaluation parse
# exactly what SFT taught.

# %%
first = {}
for r in records:
    first.setdefault(r["domain"], r)
for domain, r in first.items():
    print(f"--- {domain} ({r['source']}, id {r['id']})")
    print(template.format_prompt(r["prompt"]) + template.format_completion(r["reasoning"], r["answer"]))

# %% [markdown]
# The same completion as the model sees it: token ids, each decoded on its own. Joined
# back, the pieces give the text exactly, so nothing is lost.

# %%
example = next(iter(first.values()))
completion = template.format_completion(example["reasoning"], example["answer"])
ids = tok.EncodeAsIds(completion)
print(f"{count_tokens(template.format_prompt(example['prompt']))} prompt tokens, "
      f"{len(ids)} completion tokens:")
print("  ".join(f"{i}:{tok.IdToPiece(i)!r}" for i in ids))
assert tok.DecodeIds(ids) == completion

# %% [markdown]
# ## Token lengths against the budgets
# Each stage has a token budget from the preset. SFT trains on prompt + completion up to
# `sft.max_target_length`. DPO and GRPO cap the response; every stage caps the prompt. A
# record over a budget is dropped from that stage and counted, never cut. A truncated
# completion would teach the model to stop before `</answer>`.

# %%
limits = data.stage_limits(preset)
lengths = {key: {d: [] for d in first} for key in ("prompt", "completion", "prompt + completion")}
for r in records:
    p = count_tokens(template.format_prompt(r["prompt"])) + 1  # + BOS: the budgets count it
    c = count_tokens(template.format_completion(r["reasoning"], r["answer"]))
    for key, n in (("prompt", p), ("completion", c), ("prompt + completion", p + c)):
        lengths[key][r["domain"]].append(n)
cuts = {}  # (panel, tokens) -> stages with that budget
for stage, lim in limits.items():
    for key, n in (("prompt", lim.prompt), ("completion", lim.completion),
                   ("prompt + completion", lim.total)):
        if n:
            cuts.setdefault((key, n), []).append(stage)
for (key, n), stages in cuts.items():
    print(f"{key:20s} budget {n:5d} tokens: {', '.join(stages)}")

# %%
fig_lengths = notebook.plot_token_lengths(lengths, cuts, len(records))
plt.show()

# %% [markdown]
# ## Filter, hold out, rebalance
# `build_splits` does it in this order:
# 1. drop malformed records and duplicate prompts;
# 2. hold out `eval_per_domain` records per domain **before** rebalancing, so no eval
#    prompt is ever repeated into training; drop training records whose prompt is an eval
#    prompt;
# 3. per stage, drop what does not fit (too long; for GRPO, a gold answer that cannot be
#    checked). Then sample `train_size` records in the target mix: down-sample large
#    domains, repeat small ones at most `max_repeats` times;
# 4. turn the DPO set into preference pairs: a right, well-formatted answer against a
#    wrong answer or a broken format.

# %%
splits, report = data.build_splits(records, preset.data, count_tokens=count_tokens,
                                   limits=limits, source_reports=source_reports)
print("records per split:", splits.sizes())
display(Markdown(notebook.data_table(report)))

# %% [markdown]
# ### GRPO's prompts, one step harder
# SFT and DPO learn from gold traces. GRPO needs only a prompt and its answer. It can only
# teach what the policy already does *sometimes*. A prompt it always gets right, or never,
# gives a whole group the same reward, so no answer beats its group. With
# `grpo.difficulty` above `data.difficulty`, `data.harder_grpo` draws GRPO's set afresh
# from the synthetic tasks at that difficulty (one more step or item), apart from every
# other split. It also holds out an `eval_hard` block beside it, where GRPO's held-out
# checks and `06_evaluation` measure. At the data's own difficulty it returns the splits
# as they are.

# %%
splits = data.harder_grpo(splits, report, preset.data, preset.grpo.difficulty,
                          count_tokens=count_tokens, limits=limits)
print(f"GRPO's prompts at difficulty {preset.grpo.difficulty}; records per split:", splits.sizes())
if splits.eval_hard:
    one = splits.grpo[0]
    print(f"--- grpo ({one['domain']}): {one['prompt']!r} -> {one['answer']!r}")

# %% [markdown]
# ### The drop report
# Every row left out of a set is counted under its step and reason, with the first few ids
# (or `file:line`) to look at. Notes name the domains that missed their target, and why.

# %%
display(Markdown(notebook.drop_table(report)))
print("\n".join(report.notes) or "no shortfalls: every domain reached its target")

# %% [markdown]
# ## The domain mix, before and after
# Before: the records the sources gave, per domain. After: each stage's set. The black
# marks are the target mix from `data.domain_weights`.

# %%
fig_mix = notebook.plot_mix(report, f"domain mix, {preset.name} preset")
plt.show()

# %% [markdown]
# ## Write the splits
# `runs/<run>/data/` gets `eval.jsonl`, `sft.jsonl`, `dpo.jsonl`, `grpo.jsonl` (and
# `eval_hard.jsonl`), `data_report.json` and the two plots. `finished.json` marks the
# stage done; the next notebooks read from here. A finished data stage is never replaced
# silently: this cell reads it back instead, and says so. Set `REBUILD = True` to replace
# it.

# %%
REBUILD = False  # True: replace splits an earlier run of this notebook wrote
splits, report = finish_data(run, preset, splits, report, rebuild=REBUILD, files={
    "token_lengths.png": fig_lengths, "domain_mix.png": fig_mix})  # finished: read back instead
print(sorted(p.name for p in run.stage("data").iterdir()))

# %% [markdown]
# ## What the next stages read
# One SFT record, as SFT will train on it, and one DPO pair: the same prompt with a chosen
# and a rejected completion. Look at *why* the rejected one is worse (`rejected_kind`): a
# wrong answer, missing tags, or the answer outside its tag.

# %%
sft = splits.sft[0]
print(f"--- sft ({sft['domain']}, id {sft['id']})")
print(template.format_prompt(sft["prompt"]) + template.format_completion(sft["reasoning"], sft["answer"]))
pair = splits.dpo[0]
print(f"\n--- dpo ({pair['domain']}, id {pair['id']}), rejected_kind={pair['rejected_kind']!r}")
print(template.format_prompt(pair["prompt"]), end="")
print("chosen:  ", pair["chosen"])
print("rejected:", pair["rejected"])

# %% [markdown]
# ## Try it: a lopsided input
# The tiny preset's tasks are already balanced, so the chart above barely moves. Real
# mixes are not: GSM8K alone adds 7,473 math problems. Here, in memory only (nothing is
# written), we keep 30 summarization records and ask for more math and coding. Large
# domains are down-sampled. Summarization cannot reach its target without repeating each
# record more than `max_repeats` times, and the notes say so. Its set is then smaller than
# `train_size`, so the other domains' shares end up a little above target.

# %%
lopsided = [r for r in records if r["domain"] != "summarization"]
lopsided += [r for r in records if r["domain"] == "summarization"][:30]
weights = {"math": 3, "coding": 2, "science": 1, "instruction": 1, "summarization": 1,
           "general": 1}
config = preset.replace(**{"data.domain_weights": weights}).data
_, demo = data.build_splits(lopsided, config, count_tokens=count_tokens, limits=limits)
notebook.plot_mix(demo, "lopsided input, weights 3:2:1:1:1:1")
plt.show()
print("\n".join(demo.notes))

# %% [markdown]
# ## Check: every row accounted for, every domain in every split
# The last cell asserts what this notebook promises the next ones, on the splits it wrote
# or read back. Every domain with a weight above 0 is in the evaluation split and in each
# training set. No row went missing without a reason. Each source kept or dropped (with a
# reason) every row it read. For the SFT and GRPO sets, every record read is held out for
# evaluation, dropped with a reason, or available to rebalancing. DPO is left out of that
# sum: its pairs are made after rebalancing, so its drops count pairs as well. These are
# exact counts; no margin is needed.

# %%
weighted = {d for d, w in report.settings["domain_weights"].items() if w > 0}
for name in ("eval", "sft", "dpo", "grpo"):
    missing = weighted - {r["domain"] for r in getattr(splits, name)}
    assert not missing, f"the {name} split has no {sorted(missing)} record"
for s in report.sources:
    assert s["kept"] + sum(s["dropped"].values()) == s["read"], s
read = sum(report.input.values())
for stage in ("sft", "grpo"):
    steps = ("clean", "eval", stage)
    dropped = sum(report.drops[step].total for step in steps if step in report.drops)
    available = sum(report.stages[stage]["available"].values())
    assert sum(report.eval.values()) + dropped + available == read, (stage, read, dropped, available)
print(f"checked: {len(weighted)} domains in every split; {read} records read, each kept or dropped")

# %% [markdown]
# ## What next
# - Run `03_sft` to teach the format on `runs/<run>/data/sft.jsonl`.
# - Add GSM8K to the tiny run: `get_preset("tiny", **{"data.sources": ("gsm8k:hf",
#   "tasks")})`. GSM8K is public: it needs network, not `HF_TOKEN`. Its math problems are
#   longer than the tiny budgets, so watch the "too long" drops.
# - Change the mix: `get_preset(name, **{"data.domain_weights": {"math": 2, ...}})`; a
#   domain with weight 0 is left out. Then run this notebook with `REBUILD = True`, or
#   under another run name (`REASONKIT_RUN=...`) to keep both.
# - Your own data: `"jsonl:/path/file.jsonl"` (records or `instruction`/`output` rows),
#   `"prefs:/path/pairs.jsonl"` (DPO pairs), `"hf:<dataset>"`.
