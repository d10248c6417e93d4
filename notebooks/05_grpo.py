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
# directory. For Gemma a TPU (Kaggle *TPU v5e-8*, Cloud TPU v3-8, Colab *v5e-1*): GRPO spends
# most of its time generating. On this project's 2-core CPU machine the `tiny` preset
# trains in about 5 minutes (200 steps; GRPO needs that many to gain more than the spread
# between seeds); the training cell's progress bar gives the time on yours.

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
import dataclasses
import re

import matplotlib.pyplot as plt
from IPython.display import Markdown, display

from reasonkit import checks, data, evaluate, models, plots, rewards, train
from reasonkit.budget import memory_budget
from reasonkit.presets import get_preset
from reasonkit.runtime import hardware, mesh, runs, start_session
from reasonkit.runtime.runs import RunDir, start_from

mesh.init_distributed()  # a no-op on one host; joins the pod on several
session = start_session()  # earlier Kaggle runs restored, compiled programs kept, the deadline set
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
budget = memory_budget(preset, "grpo")
print(f"memory: about {hardware.format_bytes(budget.total)} per device of "
      f"{hardware.format_bytes(budget.capacity)} at the peak ({budget.phase} phase): "
      f"{'fits' if budget.fits else 'DOES NOT FIT'}")

# %% [markdown]
# ## The model we start from
# The base weights with the adapters of the stage before, restored from its checkpoints.

# %%
_, model, tok, _ = models.load_policy(preset, run, start, mesh=None)
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
#   `tunix_patches.grpo.patch_grpo_step` gives each step its own key from `grpo.seed` and the step
#   number, so a resumed run still samples what an uninterrupted one would.
# - **The loss variant is one config field**, `grpo.loss`: `"grpo"` (the default),
#   `"gspo-token"` (GSPO: sequence-level importance ratios), `"dapo"` (no KL term,
#   asymmetric clipping, token-mean loss) or `"dr-grpo"` (no length or std
#   normalisation), e.g. `get_preset(name, **{"grpo.loss": "dapo"})`.

# %% [markdown]
# ## One group, by the numbers
# What one GRPO step sees, before any training. The starting policy answers the first
# prompts of the first training batch `num_generations` times each, sampled the way the
# rollouts sample (a Tunix sampler at GRPO's temperature, top-p, top-k and lengths); the
# reward functions above score every answer; and each answer's advantage is computed as
# Tunix 0.1.7's GRPO computes it (`evaluate.group_advantages`; the tests check it against
# Tunix's own), with the group's sample standard deviation:
#
# $$A_i = \frac{r_i - \operatorname{mean}(r_1, \dots, r_G)}{\operatorname{std}(r_1, \dots, r_G) + 10^{-6}}$$
#
# A group's advantages sum to zero: the policy loss makes each token of an answer above
# its group's mean more likely and each token of an answer below it less likely, in
# proportion to $A_i$. The table shows the first group whose rewards differ.

# %%
G = preset.grpo.num_generations
groups = evaluate.rollout_groups(model, tok, batch, preset, reward_fns, seed=preset.grpo.seed,
                                 prompts=max(1, preset.eval.batch_size // G))  # one sampler batch
totals = groups["total"].reshape(-1, G)  # [prompts, G]
for i, row in enumerate(totals):
    print(f"prompt {i + 1}: total rewards {[round(float(r), 2) for r in row]}, mean {row.mean():.2f}, "
          f"std {row.std(ddof=1):.2f}")
shown = next((i for i, row in enumerate(totals) if row.std() > 0), 0)  # the first with a spread
part = slice(shown * G, (shown + 1) * G)
print(f"\nprompt {shown + 1} (gold answer {str(batch['answer'][shown])!r}), its {G} answers:")
display(Markdown(plots.advantage_table(groups["completions"][part], {
    name: values[part] for name, values in groups["rewards"].items()}, groups["advantages"][part])))

# %% [markdown]
# A group whose answers all score the same has a standard deviation of 0, so every
# advantage is 0 (the $10^{-6}$ is there for exactly this): the group adds nothing to the
# policy gradient, and only the KL term acts on it. That is common. On `tiny`, 8 answers
# of the SFT model at temperature 0.9 are all wrong on 33% of the GRPO prompts and all
# right on 6% (`docs/experiments.md`): on about 39% of the groups `answer_correct` cannot
# tell the answers apart, and unless the format or partial-credit rewards do, the group
# teaches nothing. Larger groups make such groups rarer; so do prompts of the right
# difficulty. A constructed one:

# %%
same = [5.0] * G  # every answer well-formed (format_exact 3 + format_approx 2) and wrong
print("rewards:   ", same)
print("advantages:", evaluate.group_advantages(same, G).tolist())
print(f"here: {sum(row.std() == 0 for row in totals)} of the {len(totals)} sampled groups have no spread")
del model
models.free()  # the trainer loads its own copy onto the GRPO mesh

# %% [markdown]
# ## Tunix's configs for GRPO
# Tunix's GRPO is two objects, as in its own GRPO example. An `RLCluster` holds three
# roles, each on a mesh: the **actor** (the policy that trains), the **reference** (the
# policy GRPO started from, frozen) and the **rollout** (a sampler that writes answers).
# A `GRPOLearner` takes the cluster, the reward functions and a `GRPOConfig`. Its
# `train(batches)` runs the loop: sample, score, compute advantages, update.
#
# Three configs say how. `RLTrainingConfig`: the actor's optimizer, the steps, where
# checkpoints and metrics go. `RolloutConfig`: how answers are sampled, and the ids they
# stop on. `GRPOConfig`: G, `beta`, `epsilon`, the KL estimator (`low_var_kl`, above) and
# the loss. `"dapo"` and `"dr-grpo"` are Tunix's `DAPOLearner` and `DrGRPOLearner`, with
# configs of their own: `train.grpo_algorithm` builds those.

# %%
from tunix import ClusterConfig, GRPOConfig, GRPOLearner, RLCluster, RLTrainingConfig, Role, RolloutConfig

cfg = preset.grpo
training_config = RLTrainingConfig(
    actor_optimizer=train.make_optimizer(cfg), max_steps=cfg.max_steps,
    eval_every_n_steps=cfg.max_steps + 1,  # the held-out checks below, not Tunix's
    mini_batch_size=cfg.batch_size, train_micro_batch_size=cfg.batch_size,
    **train.run_options(run, "grpo", cfg))  # checkpoints and metrics in runs/<run>/grpo
rollout_config = RolloutConfig(
    max_tokens_to_generate=cfg.max_generation_length, max_prompt_length=cfg.max_prompt_length,
    kv_cache_size=cfg.max_prompt_length + cfg.max_generation_length,  # a whole prompt and answer
    temperature=cfg.temperature, top_p=cfg.top_p, top_k=cfg.top_k, eos_tokens=models.stop_token_ids(tok))
if cfg.loss in ("grpo", "gspo-token"):
    algo_config = GRPOConfig(num_generations=cfg.num_generations, num_iterations=cfg.num_iterations,
                             beta=cfg.beta, epsilon=cfg.epsilon, kl_loss_mode=cfg.kl_loss_mode,
                             loss_algo=cfg.loss)
for part in (training_config, rollout_config, *([algo_config] if cfg.loss in ("grpo", "gspo-token") else [])):
    display(Markdown(f"`{type(part).__name__}`\n\n{plots.config_table(part)}"))

# %% [markdown]
# ## Train
# The cell below builds the cluster and the learner on the stage's models and trains them.
# `train.stage_run` opens the stage and gives the cell its parts:
#
# - `r.policy` and `r.reference`: two sets of adapters on one shared base, on GRPO's mesh
#   `r.mesh`. No second copy of the base is in memory.
# - `r.reward_fns`: the reward functions above, which Tunix sums unweighted.
#   `r.metric_fns(cluster)` logs the fraction of groups that teach nothing.
# - `r.patch(learner)`: the patches, each a call on the object Tunix built.
#   - The rollout's sampler traces the policy without remat (Tunix's sampler cannot decode
#     a remat model), and computes the prefill's output layer at the last position only.
#   - Each step samples with its own key, from `grpo.seed` and the step number (above).
#   - The preset's optimisations (`preset.optimisations`): each prompt prefilled once for
#     its G answers; each step padded to the smallest of `grpo.length_buckets` that holds
#     it; with `grpo.share_prompts`, each prompt's positions run once in the update;
#     log-probabilities a chunk of positions at a time, with no `[B, S, V]` float32 logits.
# - `r.batches(learner)`: the GRPO batches until the deadline. They also run the held-out
#   checks every `grpo.eval_every` steps (below).
#
# The `with` block keeps the run's lifecycle as in `03_sft`: checkpoints, resume, the
# settings record, the deadline. A finished stage is loaded (`r.trains` is False), not
# retrained, unless you set `RETRAIN = True`. When the deadline comes before the first
# step, nothing trains and the next session resumes. Scripts build the same objects with
# `train.grpo_learner`.

# %%
RETRAIN = False  # True: delete this run's GRPO checkpoints and metrics, and train again

# %%
with train.stage_run(preset, run, "grpo", retrain=RETRAIN, deadline=run.deadline()) as r:
    if r.trains:  # False: GRPO already finished, and its adapters were loaded instead
        cluster_config = ClusterConfig(
            role_to_mesh={Role.ACTOR: r.mesh, Role.REFERENCE: r.mesh, Role.ROLLOUT: r.mesh},
            rollout_engine="vanilla", offload_to_cpu=False,
            training_config=training_config, rollout_config=rollout_config)
        cluster = RLCluster(actor=r.policy, reference=r.reference, tokenizer=r.tokenizer,
                            cluster_config=cluster_config)
        if cfg.loss in ("grpo", "gspo-token"):
            learner = GRPOLearner(rl_cluster=cluster, reward_fns=r.reward_fns, algo_config=algo_config,
                                  metric_fns=r.metric_fns(cluster))
        else:  # Tunix's DAPOLearner or DrGRPOLearner, with its config
            Learner, variant_config = train.grpo_algorithm(preset)
            learner = Learner(rl_cluster=cluster, reward_fns=r.reward_fns, algo_config=variant_config,
                              metric_fns=r.metric_fns(cluster))
        learner = r.patch(learner)  # the sampler, fresh keys, the preset's optimisations
        learner.train(r.batches(learner))
result = r.result
finished = result.finished

# %% [markdown]
# The cluster and learner, part by part:

# %%
if r.trains:
    display(Markdown(plots.parts_table({
        "RL cluster": cluster, "learner": learner, "actor trainer": cluster.actor_trainer,
        "policy loss": cluster.actor_trainer.loss_fn,
        "reference log-probs": cluster.inference_worker.get_ref_per_token_logps,
        "rollout": cluster.rollout, "rollout sampling": cluster.rollout.generate})))

# %% [markdown]
# ## The curves
# One point per step (`batch_size` prompts x `num_generations` answers). Left: the mean
# of each reward over the step's answers; middle: their total; right: the KL. The same
# metrics, and more (`completions/train/mean_length`, `actor/train/pg_clipfrac`), are in
# TensorBoard; in Jupyter, Colab or Kaggle with the `tensorboard` package (not run here),
# a cell with `%load_ext tensorboard` and
# `%tensorboard --logdir {run.stage("grpo") / "tensorboard"}` shows them, and, placed
# before the training cell, keeps refreshing while GRPO trains.

# %%
fig = plots.plot_grpo(train.read_metrics(run, "grpo"), reward_fns, beta=preset.grpo.beta)
fig.savefig(run.stage("grpo") / "grpo_curves.png", dpi=120)
plt.show()

# %% [markdown]
# ## The truth during RL: held-out accuracy beside the reward
# The reward is what GRPO optimises; accuracy on prompts it never trains on is what we
# want. Every `grpo.eval_every` steps (and at the first and last) GRPO answers
# `grpo.eval_prompts` held-out prompts greedily, scored by the checker 06 uses. It keeps
# the adapters of the best check in `grpo/best` (`held_out.load_best(preset, run)`) beside
# the last, and prints a warning when the reward rose while the accuracy fell (a reward
# being gamed). One standard error on 32 prompts is about 8 points: read the trend.

# %%
from reasonkit.train import held_out

fig = plots.plot_held_out(train.read_metrics(run, "grpo"), held_out.best_info(run))
fig.savefig(run.stage("grpo") / "grpo_held_out.png", dpi=120)
plt.show()
p = held_out.progress(run)
if p["checks"]:
    print(f"held-out accuracy {p['accuracy'][0]:.1%} -> {p['accuracy'][1]:.1%} over {p['checks']} checks "
          f"(best {p['best']['accuracy']:.1%} at step {p['best']['step']}); answer_correct "
          f"{p['correct'][0]:.3f} -> {p['correct'][1]:.3f}; alarms at steps {p['alarms'] or 'none'}")

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
# is how `models.load_policy(preset, run, "grpo", mesh)` and `06_evaluation` load them.
# For everything outside JAX, `train.export` writes three directories:
# `grpo/adapter`, the adapters in PEFT's format (exact, applied to the base model; 100 MB
# for gemma3-1b), and `grpo/merged`, the base with the adapters merged in (2 GB for
# gemma3-1b): config, generation config (it stops at `<end_of_turn>`), tokenizer with the
# chat template, and a model card saying how to load it and which runtimes were checked;
# and, with `gguf="f16"`, `grpo/gguf`: the merged model as one GGUF file (2 GB for
# gemma3-1b; `"q8_0"` halves it) with an Ollama Modelfile, for llama.cpp, Ollama and LM
# Studio (`docs/exports.md`). Only the final stage is exported; `train.export(train.train_or_load(
# preset, run, "sft"), preset, run, merged=False)` exports another stage's adapters.

# %%
if not finished:
    print("not exported: GRPO has not finished")
else:
    exported = train.export_once(result, preset, run, again=RETRAIN, gguf="f16")  # already there: says so
    for kind, path in exported.items():
        print(f"{kind}: {path}\n  {sorted(p.name for p in path.iterdir())}")

# %% [markdown]
# ## Try it: format rewards only
# What does GRPO learn when its reward checks only the format? The cell below branches this
# run (`runs.branch`: a new run `<run>-format-only` beside it, starting with copies of its
# data, SFT and DPO stages; this run is left as it is) and trains GRPO there with
# `grpo.rewards` set to the two format rewards, for an eighth of the steps (25 on `tiny`,
# about a minute on 2 cores: its programs are the main run's, from the compilation cache).
# It runs when the time model (`python -m reasonkit plan`'s: steps x FLOPs per step /
# (peak x an assumed utilisation)) gives it under 5 minutes, or when you set
# `TRY_IT = True`; otherwise the cell says what it would cost and skips it.
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
TRY_IT = False  # True: run the branch whatever the time model says
fmt_preset = preset.replace(**{"grpo.rewards": FORMAT_ONLY,
                               "grpo.max_steps": max(1, preset.grpo.max_steps // 8)})
need = hardware.time_model(fmt_preset).seconds("grpo")  # loading and compiling not included
if not finished:
    print("skipped: GRPO has not finished (run this notebook again to resume it first)")
elif not (TRY_IT or need < 5 * 60):
    print(f"skipped: the time model gives this branch {hardware.format_duration(need)} "
          f"({fmt_preset.grpo.max_steps} GRPO steps); set TRY_IT = True above to run it")
else:
    print(f"the time model gives this branch {hardware.format_duration(need)}")
    fmt_run = runs.branch(run, f"{run.name}-format-only",
                          stages=[s for s in ("data", "sft", "dpo") if run.is_finished(s)])
    fmt = train.train_or_load(fmt_preset, fmt_run, "grpo", deadline=run.deadline())
    plots.plot_grpo(train.read_metrics(fmt_run, "grpo"), rewards.from_config(FORMAT_ONLY),
                    beta=preset.grpo.beta)
    plt.show()

# %% [markdown]
# ## Check: GRPO moved the policy, for the right answers
# The last cell calls `checks.check_grpo` on GRPO's own metrics, comparing the means of
# the first and the last quarter of its steps. It fails when GRPO did not do its job
# (a learning rate of 1e-12, adapters left at their start, a reward that does not pay
# for right answers), with these margins:
#
# - **The policy moved**: the KL to the reference (0 at the first step, where policy and
#   reference are the same) is at least 0.0001 in the last quarter, and above the first
#   quarter's.
# - **It was paid for right answers**: `answer_correct` is among the logged rewards.
#   The format rewards alone also move the policy and raise the KL; a run on them only
#   fails here.
# - **Right answers did not fall**: `answer_correct`'s last-quarter mean is no more than
#   three standard errors below the first quarter's (the step-to-step spread over a
#   quarter of the steps). A collapse (a learning rate too high, a reward the model
#   games) fails here.
#
# - **Held-out accuracy did not fall**: GRPO checks its greedy accuracy on
#   `grpo.eval_prompts` held-out prompts as it trains (`held_out/accuracy`); the last
#   check is no more than two binomial standard errors of that block below the first.
#
# Not asserted: that `answer_correct` or the held-out accuracy rises. On `tiny` their
# change over a run is smaller than their noise (the curves above;
# `docs/experiments.md`): GRPO's gain shows on thousands of held-out prompts, not in one
# run's training curve or a block of 32 (`docs/results.md`). The cell prints each change
# and its noise band.

# %%
if finished:
    print(checks.check_grpo(train.read_metrics(run, "grpo"), held_out_prompts=preset.grpo.eval_prompts))
else:
    print("GRPO has not finished: nothing to check yet")

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
#   add about a point on 5787 fresh held-out prompts, more than SFT's spread between
#   seeds, while 60 steps added a third of a point; one run on the 96 prompts of
#   `06_evaluation` cannot tell either from noise (`docs/results.md`).
#   To compare, run 02-06 again in a new run (`REASONKIT_RUN=...`) with
#   `REASONKIT_OVERRIDES='{"grpo.max_steps": 60}'` (4 minutes of GRPO).
# - What GRPO does here, and what it does not: the errors SFT leaves on `tiny` are mostly
#   facts (`13 - 2 = 7`), different in every prompt, and one right-or-wrong bit per answer
#   teaches those slowly. Where an error is a habit it gains: summarization, by no longer
#   counting an item twice. GRPO on prompts one step harder, kept only where the policy is
#   right 1 to 7 times of 8, and paid only for answers its reasoning supports, was tried as
#   the way to more (`grpo.difficulty`, `grpo.keep_contrast`, the `answer_verified`
#   reward): its training reward rose by half, its fresh hard prompts by one point (two
#   with Dr. GRPO's loss), in twice the time. SFT on the policy's own verified answers to
#   the same prompts gained as much there (`docs/results.md`, "GRPO on harder prompts").
#   To try it, a new run with `REASONKIT_OVERRIDES` set to `HARD` in
#   `benchmarks/grpo_hard.py`; `06_evaluation` then measures on its hard block.
