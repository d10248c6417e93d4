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
# # 05 · Group relative policy optimisation (GRPO)
#
# **What you will do:** train the adapters further with reinforcement learning: the model
# writes several answers to each prompt of the GRPO split, plain Python functions score
# them (format and correctness against the gold answer), and the policy moves towards the
# better ones. You will look at one training row and the reward functions, score the
# starting model's answers with them, train with live metrics, plot each reward and the
# KL, compare answers before and after, and export the final model.
#
# **What you will learn:** how group-relative advantages replace a learned critic, why
# each reward is logged on its own, what the KL curve tells you, and how to switch the
# policy-loss variant (GRPO, GSPO, DAPO, Dr. GRPO) with one config field.
#
# **What you need:** the data splits (`02_dataset_rebalance`) and the DPO adapters
# (`04_dpo`), or the SFT adapters (`03_sft`) if you skipped DPO, in the same run
# directory. For Gemma a TPU (Kaggle *TPU v5e-8* / *v3-8*, Colab *v5e-1*): GRPO spends
# most of its time generating. On a 2-core CPU the `tiny` preset trains in about 11
# minutes (200 steps; GRPO needs that many to gain more than the spread between seeds).

# %% [markdown]
# ## Setup
# The first cell is the same in every notebook. It finds reasonkit: installed (locally
# `bash scripts/setup.sh` did it), a checkout of the repository (this folder's parent, or
# a Kaggle dataset made of it), the wheels dataset of `scripts/kaggle_dataset.py` attached
# on Kaggle, or `$REASONKIT_PIP`. It makes jax, flax, qwix, optax, orbax and tunix the
# tested versions (installing what differs, with pip's output shown; it says when the
# runtime must restart), then starts the session: earlier runs attached on Kaggle are
# restored, compiled programs are kept under `runs/`, and the session's deadline is set.

# %%
import glob
import importlib.util
import os
import subprocess
import sys

found = [p for where in ("..", "/kaggle/input/*", "/kaggle/input/*/*")
         for p in sorted(glob.glob(f"{where}/reasonkit_bootstrap.py"))]
sys.path[:0] = [os.path.dirname(os.path.abspath(found[0]))] if found else []
if not found and os.environ.get("REASONKIT_PIP") and not importlib.util.find_spec("reasonkit_bootstrap"):
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", os.environ["REASONKIT_PIP"]],
                   check=True)  # reasonkit's wheel brings reasonkit_bootstrap
import reasonkit_bootstrap  # not found: clone the repo, add it on Kaggle, or set REASONKIT_PIP (README)

source = reasonkit_bootstrap.setup()  # reasonkit, the tested JAX stack, this session's runs and deadline

# %%
import dataclasses
import re

import matplotlib.pyplot as plt
from IPython.display import Markdown, display

from reasonkit import data, evaluate, hardware, mesh, plots, rewards, runs, train
from reasonkit.config import get_preset
from reasonkit.runs import RunDir, start_from

mesh.init_distributed()  # a no-op on one host; joins the pod on several
preset = get_preset()  # $REASONKIT_PRESET (default "auto": tiny on a CPU), $REASONKIT_OVERRIDES
run = RunDir.create()
splits, _ = data.read_splits(run.require("data"))  # raises if 02 has not run: says so
start = start_from(run, "grpo")  # DPO's adapters, else SFT's; raises if neither finished
print(f"preset {preset.name!r}: {preset.description}")
print(f"run {run.path}: {len(splits.grpo)} GRPO prompts; GRPO starts from the "
      f"{start.upper()} adapters")

# %% [markdown]
# ## The stage's settings
# `num_generations` is the group size (answers per prompt), `beta` the weight of the KL
# penalty, `epsilon` the clipping range, `loss` the policy-loss variant. GRPO has two
# phases, generating (rollouts: a KV cache per answer) and training on what was
# generated; the memory line names the larger one. GRPO's mesh favours tensor
# parallelism, which keeps weights resident while generating token by token.

# %%
for key, value in dataclasses.asdict(preset.grpo).items():
    print(f"  {key:22s} {value}")
budget = hardware.memory_budget(preset, "grpo")
print(f"memory: about {hardware.format_bytes(budget.total)} per device of "
      f"{hardware.format_bytes(budget.capacity)} at the peak ({budget.phase} phase): "
      f"{'fits' if budget.fits else 'DOES NOT FIT'}")

# %% [markdown]
# ## The model we start from
# The base weights with the adapters of the stage before, restored from its checkpoints.

# %%
_, model, tok, _ = train.load_policy(preset, run, start, mesh=None)
print(f"{preset.model.num_params / 1e6:.1f}M base parameters + LoRA rank {preset.lora.rank} "
      f"adapters from {start}")

# %% [markdown]
# ## One training row, and the reward functions
# GRPO needs no completions in its data, only prompts and a way to check answers. Each
# row carries the formatted prompt, the gold answer and the domain. A batch is a dict of
# 1-D numpy arrays, one per column; Tunix passes every column except the prompts to the
# reward functions as keyword arguments.

# %%
rows = train.grpo_records(splits.grpo)
batches, _ = train.grpo_batches(rows, preset, tok)
batch = next(iter(batches))
print({k: (v.shape, v.dtype.kind) for k, v in batch.items()})
print(f"--- row 0: domain {str(batch['domain'][0])!r}, gold answer {str(batch['answer'][0])!r}, prompt:")
print(batch["prompts"][0])

# %% [markdown]
# Reward functions are plain Python functions, `fn(prompts, completions, answer=...,
# domain=..., ...) -> one float per completion`, passed to the trainer as a list. Tunix
# adds them up. Which ones, and their weights, is one config field, `grpo.rewards`: pairs
# of a function of `reasonkit.rewards` and its weight, e.g. `get_preset(name,
# **{"grpo.rewards": [["format_exact", 1.0], ["answer_correct", 2.0]]})` (a weight other
# than 1 wraps the function in `rewards.weighted`). The preset's five, unweighted:

# %%
reward_fns = rewards.from_config(preset.grpo.rewards)
for fn in reward_fns:  # the first line of each docstring, without its reST markup
    print(f"  {fn.__name__:15s} {re.sub(r':func:|`', '', fn.__doc__.strip().splitlines()[0])}")

# %% [markdown]
# ## Before: the starting model on three held-out questions
# The same three held-out prompts as in `03_sft` and `04_dpo`, greedy, scored by
# `evaluate.score`; then what each reward function gives those three answers.

# %%
EXAMPLES = evaluate.pick_examples(splits.eval)  # math, coding, summarization if present
before = evaluate.show_completions(model, tok, EXAMPLES, preset.model, preset.eval, start.upper())
del model
train.free()  # the trainer loads its own copy onto the GRPO mesh

# %%
texts = [s["completion"] for s in before]
columns = {"answer": [r["answer"] for r in EXAMPLES], "domain": [r["domain"] for r in EXAMPLES]}
scored = {fn.__name__: fn(None, texts, **columns) for fn in reward_fns}
scored["sum"] = [sum(v) for v in zip(*scored.values(), strict=True)]
display(Markdown(plots.reward_table(EXAMPLES, scored)))

# %% [markdown]
# ## How GRPO learns, and what it logs
# For every prompt of a batch the policy samples a **group** of `num_generations`
# answers at temperature `temperature`. Each answer's reward is the sum of the functions
# above, and its **advantage** is how much better it did than its own group:
# $A_i = (r_i - \text{mean}(r_{\text{group}})) / \text{std}(r_{\text{group}})$. The
# group is the baseline, so GRPO needs no learned value model (PPO's critic): no second
# large network to train and keep in memory. Answers better than their siblings are made more
# likely, worse ones less; a group whose answers all score the same teaches nothing.
# The update is clipped as in PPO (`epsilon`) and penalised by `beta` times the KL.
#
# - **Each reward is logged on its own** (`rewards/train/<name>`, plus their total
#   `rewards/train/sum`) because the total hides trade-offs: it can rise while
#   `answer_correct` stays flat, because the model is only polishing its tags, or
#   while a format reward falls. Reward hacking shows up here first.
# - **KL** (`actor/train/kl`) estimates, per token, how far the policy has moved from
#   the reference model on the answers it sampled. The reference is the policy GRPO
#   started from (the same adapters, frozen, on the same backbone: no second copy of the
#   base in memory), so the KL starts near 0 and measures how far GRPO alone has moved
#   the model; `beta` weighs it as a penalty in the loss. A KL that climbs steeply means
#   the policy is drifting fast, often towards something the rewards over-pay.
#   We use the `low_var_kl` estimator (`grpo.kl_loss_mode`, the GRPO paper's
#   `exp(ref - logp) - (ref - logp) - 1`): Tunix 0.1.7's default `kl` is `logp - ref`,
#   whose gradient does not depend on the reference at all, so it never pulls back.
# - **Every step samples with fresh noise.** Tunix 0.1.7's sampler falls back to
#   `PRNGKey(0)` when the rollout config has no seed, so every step would draw the same
#   random numbers and each group would explore the same few deviations forever.
#   `train.reseed_rollouts` gives each step its own key from `grpo.seed` and the step
#   number, so a resumed run still samples what an uninterrupted one would.
# - **The loss variant is one config field**, `grpo.loss`: `"grpo"` (the default),
#   `"gspo-token"` (GSPO: sequence-level importance ratios), `"dapo"` (no KL term,
#   asymmetric clipping, token-mean loss) or `"dr-grpo"` (no length or std
#   normalisation), e.g. `get_preset(name, **{"grpo.loss": "dapo"})`.
#
# Training resumes and refuses exactly as in `03_sft`: a finished stage is loaded, not
# retrained, unless you set `RETRAIN = True`; it stops cleanly before the session's
# deadline, and running the notebook again (in a new session) resumes it.

# %%
RETRAIN = False  # True: delete this run's GRPO checkpoints and metrics, and train again

# %%
result = train.train_or_load(preset, run, "grpo", retrain=RETRAIN,
                             deadline=run.deadline())
finished = result.finished

# %% [markdown]
# ## The curves
# One point per step (`batch_size` prompts x `num_generations` answers). Left: the mean
# of each reward over the step's answers; middle: their total; right: the KL.

# %%
fig = plots.plot_grpo(train.read_metrics(run, "grpo"), reward_fns, beta=preset.grpo.beta)
fig.savefig(run.stage("grpo") / "grpo_curves.png", dpi=120)
plt.show()

# %% [markdown]
# ## After: the same three questions
# Now with the GRPO adapters, greedy as before.

# %%
if finished:
    after = evaluate.show_completions(result.policy, tok, EXAMPLES, preset.model, preset.eval, "GRPO")
    display(Markdown(plots.before_after(EXAMPLES, before, after, (start.upper(), "GRPO"))))
else:
    print("GRPO stopped before max_steps (deadline): run this notebook again to resume.")

# %% [markdown]
# ## Export the final model
# `runs/<run>/grpo/checkpoints` holds Orbax checkpoints of the LoRA adapters (and
# optimizer state): Tunix's `CheckpointManager` restores them onto a LoRA model, which
# is how `train.load_policy(preset, run, "grpo", mesh)` and `06_evaluation` load them.
# For everything outside JAX, `train.export` writes two Hugging Face directories:
# `grpo/adapter`, the adapters in PEFT's format (exact, applied to the base model; 100 MB
# for gemma3-1b), and `grpo/merged`, the base with the adapters merged in (2 GB for
# gemma3-1b): config, generation config (it stops at `<end_of_turn>`), tokenizer with the
# chat template, and a README saying how to load it in `transformers`, vLLM or
# llama.cpp / Ollama. Only the final stage is exported; `train.export(train.train_or_load(
# preset, run, "sft"), preset, run, merged=False)` exports another stage's adapters.

# %%
if not finished:
    print("not exported: GRPO has not finished")
else:
    exported = train.export_once(result, preset, run, again=RETRAIN)  # already there: says so
    for kind, path in exported.items():
        print(f"{kind}: {path}\n  {sorted(p.name for p in path.iterdir())}")

# %% [markdown]
# ## Try it: format rewards only
# What does GRPO learn when its reward checks only the format? The cell below branches this
# run (`runs.branch`: a new run `<run>-format-only` beside it, starting with copies of its
# data, SFT and DPO stages; this run is left as it is) and trains GRPO there with
# `grpo.rewards` set to the two format rewards, for an eighth of the steps (25 on `tiny`,
# about two minutes on 2 cores).
#
# What to expect: nothing pays for a right answer any more, so nothing pushes accuracy
# up; `06_evaluation` shows the branch as one more row of its stage table. On `tiny` SFT
# has already taught the format (about 98% of greedy answers), so the format rewards have
# little left to pay for: in half or more of the groups all G answers score alike (the
# right-hand curve) and teach nothing; the rest reward the odd sampled answer that broke
# the format. Format pass stays at the top, accuracy within noise of DPO's. A reward the
# model can max out without solving the task is what reward hacking exploits: harmless
# here; with a real model and a checker with a loophole, it is how GRPO learns to game it.

# %%
FORMAT_ONLY = [["format_exact", 1.0], ["format_approx", 1.0]]
if not finished:
    print("skipped: GRPO has not finished (run this notebook again to resume it first)")
else:
    fmt_preset = preset.replace(**{"grpo.rewards": FORMAT_ONLY,
                                   "grpo.max_steps": max(1, preset.grpo.max_steps // 8)})
    fmt_run = runs.branch(run, f"{run.name}-format-only",
                          stages=[s for s in ("data", "sft", "dpo") if run.is_finished(s)])
    fmt = train.train_or_load(fmt_preset, fmt_run, "grpo", deadline=run.deadline())
    plots.plot_grpo(train.read_metrics(fmt_run, "grpo"), rewards.from_config(FORMAT_ONLY),
                    beta=preset.grpo.beta)
    plt.show()

# %% [markdown]
# ## What next
# - Run `06_evaluation` to compare base, SFT, DPO and GRPO on the whole held-out set with
#   the same decoding: format pass, accuracy, pass@k, maj@k, and what regressed.
# - Switch the loss variant: `get_preset(name, **{"grpo.loss": "dr-grpo"})` (or
#   `"gspo-token"`, `"dapo"`), in a new run (`REASONKIT_RUN=...`) to compare them.
# - Change the rewards: weigh them with `grpo.rewards` (`[["answer_correct", 2.0], ...]`),
#   try `["multi_domain", 1.0]` for the non-math domains, or pass functions of your own,
#   `train.train_grpo(preset, run, reward_fns=[...])`.
# - Larger groups (`grpo.num_generations`) give steadier advantages; more steps let the
#   accuracy reward move, not only the format ones.
# - Expect a small gain on `tiny`: a million-parameter model learns its training prompts
#   under GRPO but carries little of that to new ones. Over seven seeds these 200 steps
#   add under a point on 5787 fresh held-out prompts, more than SFT's spread between
#   seeds, while 60 steps added a third of a point; one run on the 96 prompts of
#   `06_evaluation` cannot tell either from noise (`docs/results.md`).
#   To compare, run 02-06 again in a new run (`REASONKIT_RUN=...`) with
#   `REASONKIT_OVERRIDES='{"grpo.max_steps": 60}'` (4 minutes of GRPO).
