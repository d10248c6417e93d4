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
# **What you will do:** train the adapters by reinforcement learning. The model answers
# each GRPO prompt several times, Python functions score the answers, and the policy moves
# towards the better ones. Then plot rewards and KL, compare answers, export the model.
#
# **What you will learn:** how group advantages replace a learned critic, why each reward
# is logged alone, what the KL says, and how to switch the policy loss.
#
# **What you need:** the splits (`02_dataset_rebalance`) and, in the same run, the DPO
# adapters (`04_dpo`), or the SFT ones (`03_sft`). Gemma needs a TPU (Kaggle *TPU v5e-8*,
# Cloud TPU v3-8, Colab *v5e-1*): GRPO mostly generates. On this project's 2-core CPU,
# `tiny` trains 200 steps in about 5 minutes; the progress bar gives yours.

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

from reasonkit import data, models, notebook, rewards, train
from reasonkit.budget import memory_budget
from reasonkit.presets import get_preset
from reasonkit.runtime import RunDir, hardware, mesh, runs, start_from, start_session

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
# `num_generations` is the group size (answers per prompt), `beta` the KL penalty's
# weight, `epsilon` the clipping range. GRPO generates (a KV cache per answer), then
# trains; the memory line names the larger phase. Its mesh favours tensor parallelism:
# weights stay resident while generating token by token.

# %%
for key, value in dataclasses.asdict(preset.grpo).items():
    print(f"  {key:22s} {value}")
budget = memory_budget(preset, "grpo")
print(f"memory: about {hardware.format_bytes(budget.total)} per device of "
      f"{hardware.format_bytes(budget.capacity)} at the peak ({budget.phase} phase): "
      f"{'fits' if budget.fits else 'DOES NOT FIT'}")

# %% [markdown]
# ## The model we start from
# The base weights plus the previous stage's adapters (its checkpoints).

# %%
_, model, tok, _ = models.load_policy(preset, run, start, mesh=None)
print(f"{preset.model.num_params / 1e6:.1f}M base parameters + LoRA rank {preset.lora.rank} "
      f"adapters from {start}")

# %% [markdown]
# ## One training row, and the reward functions
# A GRPO row has no completion: the formatted prompt, gold answer and domain. A batch is a
# dict of 1-D numpy arrays, one per column.

# %%
rows = train.grpo_records(splits.grpo)
batches, _ = train.grpo_batches(rows, preset, tok)
batch = next(iter(batches))
print({k: (v.shape, v.dtype.kind) for k, v in batch.items()})
print(f"--- row 0: domain {str(batch['domain'][0])!r}, gold answer {str(batch['answer'][0])!r}, prompt:")
print(batch["prompts"][0])

# %% [markdown]
# A reward function is plain Python: `fn(prompts, completions, answer=..., domain=...,
# ...)`, every other column as a keyword, returns a float per completion. Tunix sums them.
# `grpo.rewards` pairs a `reasonkit.rewards` function with a weight, e.g.
# `get_preset(name, **{"grpo.rewards": [["format_exact", 1.0], ["answer_correct",
# 2.0]]})`. A weight other than 1 wraps it in `rewards.weighted`. The preset's five,
# unweighted:

# %%
reward_fns = rewards.from_config(preset.grpo.rewards)
for fn in reward_fns:  # the first line of each docstring, without its reST markup
    print(f"  {fn.__name__:15s} {re.sub(r':func:|`', '', fn.__doc__.strip().splitlines()[0])}")

# %% [markdown]
# ## Before: the starting model on three held-out questions
# The three held-out prompts of `03_sft` and `04_dpo`, greedy, scored by `evaluate.score`
# and by each reward function.

# %%
EXAMPLES = notebook.pick_examples(splits.eval)  # math, coding, summarization if present
before = notebook.show_completions(model, tok, EXAMPLES, preset.model, preset.eval, start.upper())

# %%
texts = [s["completion"] for s in before]
columns = {"answer": [r["answer"] for r in EXAMPLES], "domain": [r["domain"] for r in EXAMPLES]}
scored = {fn.__name__: fn(None, texts, **columns) for fn in reward_fns}
scored["sum"] = [sum(v) for v in zip(*scored.values(), strict=True)]
display(Markdown(notebook.reward_table(EXAMPLES, scored)))

# %% [markdown]
# ## How GRPO learns, and what it logs
# The policy samples a **group** of answers per prompt at `temperature`. An answer's
# **advantage** is how much its reward beat its group's (formula below). The group is the
# baseline: no learned value model (PPO's critic), no second large network in memory.
# Updates are clipped as in PPO, penalised by the KL.
#
# - **Each reward is logged alone** (`rewards/train/<name>`, total `rewards/train/sum`).
#   The total hides trade-offs: it can rise while `answer_correct` stays flat (the model
#   polishes its tags) or a format reward falls. Reward hacking shows here first.
# - **KL** (`actor/train/kl`): per token, how far the policy has moved from the reference
#   (the starting policy) on its answers. A steep climb is fast drift, often towards what
#   the rewards over-pay. The estimator is `low_var_kl` (`grpo.kl_loss_mode`), the GRPO
#   paper's `exp(ref - logp) - (ref - logp) - 1`. Tunix 0.1.7's default `kl`,
#   `logp - ref`, has a gradient free of the reference: it never pulls back.
# - **The loss**, `grpo.loss`: `"grpo"` (default), `"gspo-token"` (GSPO: sequence-level
#   importance ratios), `"dapo"` (no KL term, asymmetric clipping, token-mean loss) or
#   `"dr-grpo"` (no length or std normalisation). E.g. `get_preset(name, **{"grpo.loss":
#   "dapo"})`.

# %% [markdown]
# ## One group, by the numbers
# The starting policy answers the first batch's first prompts `num_generations` times
# each, sampled like the rollouts (a Tunix sampler, GRPO's temperature, top-p, top-k and
# lengths); the rewards score each. Advantages are Tunix 0.1.7's, with the group's sample
# standard deviation (`notebook.group_advantages`, tested against Tunix's own):
#
# $$A_i = \frac{r_i - \operatorname{mean}(r_1, \dots, r_G)}{\operatorname{std}(r_1, \dots, r_G) + 10^{-6}}$$
#
# They sum to zero in a group. The loss makes each token of an answer above the mean more
# likely, below it less, in proportion to $A_i$. The table shows the first group with
# differing rewards.

# %%
G = preset.grpo.num_generations
groups = notebook.rollout_groups(model, tok, batch, preset, reward_fns, seed=preset.grpo.seed,
                                 prompts=max(1, preset.eval.batch_size // G))  # one sampler batch
totals = groups["total"].reshape(-1, G)  # [prompts, G]
for i, row in enumerate(totals):
    print(f"prompt {i + 1}: total rewards {[round(float(r), 2) for r in row]}, mean {row.mean():.2f}, "
          f"std {row.std(ddof=1):.2f}")
shown = next((i for i, row in enumerate(totals) if row.std() > 0), 0)  # the first with a spread
part = slice(shown * G, (shown + 1) * G)
print(f"\nprompt {shown + 1} (gold answer {str(batch['answer'][shown])!r}), its {G} answers:")
display(Markdown(notebook.advantage_table(groups["completions"][part], {
    name: values[part] for name, values in groups["rewards"].items()}, groups["advantages"][part])))

# %% [markdown]
# If all answers score the same, the standard deviation and every advantage are 0 (hence
# the $10^{-6}$): only the KL term acts. That is common: on `tiny`, 8 SFT answers at
# temperature 0.9 are all wrong on 33% of GRPO prompts, all right on 6%
# (`docs/experiments.md`). In about 39% of groups `answer_correct` cannot tell answers
# apart; unless the format or partial-credit rewards do, they teach nothing. Larger groups
# and prompts of the right difficulty make this rarer. A constructed one:

# %%
same = [5.0] * G  # every answer well-formed (format_exact 3 + format_approx 2) and wrong
print("rewards:   ", same)
print("advantages:", notebook.group_advantages(same, G).tolist())
print(f"here: {sum(row.std() == 0 for row in totals)} of the {len(totals)} sampled groups have no spread")
del model
models.free()  # the trainer loads its own copy onto the GRPO mesh

# %% [markdown]
# ## Tunix's configs for GRPO
# As in Tunix's example, GRPO is two objects. An `RLCluster` puts three roles on meshes:
# the **actor** (trains), the **reference** (frozen) and the **rollout** (a sampler). A
# `GRPOLearner` takes the cluster, the reward functions and a `GRPOConfig`;
# `train(batches)` loops: sample, score, compute advantages, update.
#
# Three configs: `RLTrainingConfig` (the actor's optimizer, steps, checkpoints, metrics),
# `RolloutConfig` (sampling, stop ids) and `GRPOConfig` (G, `beta`, `epsilon`, KL
# estimator, loss). For `"dapo"` and `"dr-grpo"`, `train.grpo_algorithm` builds Tunix's
# `DAPOLearner` or `DrGRPOLearner` and its config.

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
    display(Markdown(f"`{type(part).__name__}`\n\n{notebook.config_table(part)}"))

# %% [markdown]
# ## Train
# `train.stage_run` opens the stage and gives the cell below:
#
# - `r.policy`, `r.reference`: two sets of adapters on one shared base, on GRPO's mesh
#   `r.mesh`.
# - `r.reward_fns`: the rewards above. `r.metric_fns(cluster)` logs the share of groups
#   that teach nothing.
# - `r.patch(learner)`: patches, each a call on Tunix's object.
#   - The rollout traces the policy without remat (Tunix's sampler cannot decode a remat
#     model). Prefill computes the output layer at the last position only.
#   - Fresh noise: with no rollout seed, Tunix 0.1.7 samples every step with `PRNGKey(0)`,
#     exploring the same few deviations. `tunix_patches.grpo.patch_grpo_step` keys each
#     step from `grpo.seed` and the step number, so a resume samples alike.
#   - `preset.optimisations`: each prompt prefilled once for its G answers. Steps padded
#     to the smallest fitting `grpo.length_buckets`. With `grpo.share_prompts`, a prompt's
#     positions run once in the update. Log-probabilities a chunk of positions at a time,
#     with no `[B, S, V]` float32 logits.
# - `r.batches(learner)`: GRPO batches until the deadline, plus held-out checks (below).
#
# The `with` block keeps `03_sft`'s lifecycle: checkpoints, resume, settings record,
# deadline, `RETRAIN`. A deadline before the first step trains nothing; the next session
# resumes. Scripts use `train.grpo_learner`.

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
    display(Markdown(notebook.parts_table({
        "RL cluster": cluster, "learner": learner, "actor trainer": cluster.actor_trainer,
        "policy loss": cluster.actor_trainer.loss_fn,
        "reference log-probs": cluster.inference_worker.get_ref_per_token_logps,
        "rollout": cluster.rollout, "rollout sampling": cluster.rollout.generate})))

# %% [markdown]
# ## The curves
# One point per step (`batch_size` prompts x `num_generations` answers). Left: each
# reward's mean. Middle: their total. Right: the KL. TensorBoard (`03_sft`'s
# `%tensorboard` cell, with `run.stage("grpo")`) adds `completions/train/mean_length`,
# `actor/train/pg_clipfrac` and more.

# %%
fig = notebook.plot_grpo(train.read_metrics(run, "grpo"), reward_fns, beta=preset.grpo.beta)
fig.savefig(run.stage("grpo") / "grpo_curves.png", dpi=120)
plt.show()

# %% [markdown]
# ## The truth during RL: held-out accuracy beside the reward
# Every `grpo.eval_every` steps, and at the first and last, GRPO answers
# `grpo.eval_prompts` held-out prompts greedily, scored by 06's checker. The best check's
# adapters stay in `grpo/best` (`held_out.load_best(preset, run)`) beside the last. A
# warning flags reward rising as accuracy falls: a gamed reward. One standard error on 32
# prompts is about 8 points: read the trend.

# %%
from reasonkit.train import held_out

fig = notebook.plot_held_out(train.read_metrics(run, "grpo"), held_out.best_info(run))
fig.savefig(run.stage("grpo") / "grpo_held_out.png", dpi=120)
plt.show()
p = held_out.progress(run)
if p["checks"]:
    print(f"held-out accuracy {p['accuracy'][0]:.1%} -> {p['accuracy'][1]:.1%} over {p['checks']} checks "
          f"(best {p['best']['accuracy']:.1%} at step {p['best']['step']}); answer_correct "
          f"{p['correct'][0]:.3f} -> {p['correct'][1]:.3f}; alarms at steps {p['alarms'] or 'none'}")

# %% [markdown]
# ## After: the same three questions
# With the GRPO adapters, greedy as before.

# %%
if finished:
    after = notebook.show_completions(result.policy, tok, EXAMPLES, preset.model, preset.eval, "GRPO")
    display(Markdown(notebook.before_after(EXAMPLES, before, after, (start.upper(), "GRPO"))))
else:
    print("GRPO stopped before max_steps (deadline): run this notebook again to resume.")

# %% [markdown]
# ## Export the final model
# `runs/<run>/grpo/checkpoints` holds Orbax checkpoints (adapters, optimizer state). As in
# `03_sft`, `models.load_policy(preset, run, "grpo", mesh)` and `06_evaluation` restore
# them. Outside JAX, `train.export` writes (sizes for gemma3-1b):
#
# - `grpo/adapter`: the adapters in PEFT's format, exact, on the base (100 MB).
# - `grpo/merged`: the merged model (2 GB), with config, generation config (stops at
#   `<end_of_turn>`), chat-template tokenizer and a model card (how to load it, which
#   runtimes were checked).
# - `grpo/gguf`, with `gguf="f16"`: one GGUF file (2 GB; `"q8_0"` halves it) and an Ollama
#   Modelfile, for llama.cpp, Ollama and LM Studio (`docs/exports.md`).
#
# Only the final stage is exported; `train.export(train.train_or_load(preset, run, "sft"),
# preset, run, merged=False)` exports another's.

# %%
if not finished:
    print("not exported: GRPO has not finished")
else:
    exported = train.export_once(result, preset, run, again=RETRAIN, gguf="f16")  # already there: says so
    for kind, path in exported.items():
        print(f"{kind}: {path}\n  {sorted(p.name for p in path.iterdir())}")

# %% [markdown]
# ## Try it: format rewards only
# The cell below branches this run (`runs.branch`) into `<run>-format-only`, copying its
# data, SFT and DPO stages; this run is untouched. There GRPO trains on the two format
# rewards for an eighth of the steps: 25 on `tiny`, about a minute on 2 cores, reusing the
# main run's compiled programs. It runs if `TRY_IT = True` or the time model gives under 5
# minutes; else it prints the cost. That model is `python -m reasonkit plan`'s: steps x
# FLOPs per step / (peak x assumed utilisation).
#
# Nothing pays for right answers, so format pass stays top and accuracy within noise of
# DPO's (`06_evaluation` adds a row). On `tiny` SFT already taught the format (about 98%
# of greedy answers), leaving little to pay for. In half or more groups all G answers
# score alike (right-hand curve); the rest reward odd samples that broke the format. That
# is reward hacking, a reward maxed without solving the task: harmless here, how GRPO
# games a leaky checker on a real model.

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
    notebook.plot_grpo(train.read_metrics(fmt_run, "grpo"), rewards.from_config(FORMAT_ONLY),
                    beta=preset.grpo.beta)
    plt.show()

# %% [markdown]
# ## Check: GRPO moved the policy, for the right answers
# The last cell's `notebook.check_grpo` compares the first and last quarter of GRPO's
# steps. It fails a GRPO that did not do its job:
#
# - **The policy moved**: the KL (0 at the first step) is at least 0.0001 in the last
#   quarter, and above the first quarter's. Adapters left at their start (a learning rate
#   of 1e-12) fail here.
# - **It was paid for right answers**: `answer_correct` is among the logged rewards. A
#   format-only run, which also moves the policy and KL, fails here.
# - **Right answers did not fall**: `answer_correct`'s last-quarter mean is at most three
#   standard errors (its step-to-step spread over a quarter) below the first's. A collapse
#   (too high a learning rate, a gamed reward) fails here.
# - **Held-out accuracy did not fall**: the last check is at most two *paired* standard
#   errors below the first, from each check's per-prompt verdicts (`grpo/held_out.jsonl`,
#   `train.held_out.first_and_last`). Runs predating those files fall back to two binomial
#   standard errors: about 17 points, far looser. `06_evaluation` compares, paired, on
#   every held-out prompt.
#
# Not asserted: a rise in `answer_correct` or held-out accuracy, below their noise over a
# `tiny` run (the curves; `docs/experiments.md`; "What next"). The cell prints each change
# and its noise band.
#
# **What GRPO did on the real Gemma 3 270M** (`benchmarks/results/real_270m_cpu.json`). It
# won back +2.2 ± 0.9 points over DPO, paired, to 42.1%. That is a repair, in the domains
# DPO hurt. It still ends below SFT: -2.6 ± 1.3 points, paired.

# %%
if finished:
    print(notebook.check_grpo(train.read_metrics(run, "grpo"), held_out_prompts=preset.grpo.eval_prompts,
                              held_out=train.held_out.first_and_last(run)))  # per prompt: paired
else:
    print("GRPO has not finished: nothing to check yet")

# %% [markdown]
# ## What next
# - Run `06_evaluation`: base, SFT, DPO and GRPO on the whole held-out set, same decoding.
#   Format pass, accuracy, pass@k, maj@k, regressions.
# - In new runs (`REASONKIT_RUN=...`), compare loss variants (`grpo.loss`).
# - Change `grpo.rewards`: reweigh them, add `["multi_domain", 1.0]` for the non-math
#   domains, or pass your own: `train.train_grpo(preset, run, reward_fns=[...])`.
# - Larger groups (`grpo.num_generations`) steady the advantages. More steps let the
#   accuracy reward move, not just format.
# - Expect a small gain on `tiny`: a million-parameter model learns its GRPO prompts but
#   carries little to new ones. Over seven seeds, 200 steps add about a point on 5787
#   fresh held-out prompts, more than SFT's seed spread; 60 steps add a third of one,
#   less. One run on 06's 96 prompts cannot tell either from noise (`docs/results.md`). To
#   compare, run 02-06 in a new run with `REASONKIT_OVERRIDES='{"grpo.max_steps": 60}'` (4
#   minutes of GRPO).
# - SFT's errors on `tiny` are mostly facts (`13 - 2 = 7`), new in every prompt, which one
#   right-or-wrong bit per answer teaches slowly. GRPO fixes habits: summarization stopped
#   counting an item twice. We tried prompts one step harder (`grpo.difficulty`), kept
#   where the policy is right 1 to 7 times of 8 (`grpo.keep_contrast`), paying only
#   answers its reasoning supports (`answer_verified`). Training reward rose by half,
#   fresh hard prompts by one point, in twice the time, and the pilot's stop rule fired. A
#   later control run with Dr. GRPO's loss gained two; SFT on the policy's own verified
#   answers, as much (`docs/results.md`, "GRPO on harder prompts"). To try: a new run with
#   `REASONKIT_OVERRIDES` = `HARD` from `benchmarks/grpo/grpo_hard.py`; `06_evaluation`
#   measures its hard block.
