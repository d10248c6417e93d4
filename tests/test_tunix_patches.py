"""The patch package: its table, its one switch, and each patch against the library's own result.

The patches that need a model to check (attention, log-probs, sampling, the GRPO step) have
their own test files; here are the table, the switch, the reach-in rule, and the small ones.
"""

import ast
import pathlib

import numpy as np
import pytest

from reasonkit import tunix_patches
from reasonkit.tunix_patches import grpo, logprobs, loss_swap, private, sharding

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_rollouts_get_a_fresh_key_per_step_and_call_and_the_same_after_resume():
    """Tunix 0.1.7 samples with PRNGKey(0) whenever RolloutConfig.seed is None."""
    from tunix.rl.rollout import base_rollout

    class Cluster:  # the two attributes the reseeding touches
        def __init__(self, step):
            self.global_steps, self.rollout, self.seen = step, self, []

        def generate(self, prompts, rollout_config, **kwargs):
            self.seen.append(np.asarray(rollout_config.seed).tolist())  # a raw uint32 key
            return prompts

    def reseed(cluster, seed):  # no buckets, no groups: the learner is left alone
        grpo.patch_grpo_step(cluster, None, seed=seed, max_prompt=8, max_answer=4)

    config = base_rollout.RolloutConfig(max_tokens_to_generate=4)
    assert config.seed is None  # what the fix is for
    whole = Cluster(0)
    reseed(whole, seed=3)
    for step in range(3):
        whole.global_steps = step
        assert whole.rollout.generate(["p"], config) == ["p"]
        whole.rollout.generate(["q"], config)  # a second micro-batch in the same step
    assert len({tuple(k) for k in whole.seen}) == 6  # every call draws new noise
    resumed = Cluster(2)  # a new process that restored step 2
    reseed(resumed, seed=3)
    resumed.rollout.generate(["p"], config)
    assert resumed.seen[0] == whole.seen[4]
    other = Cluster(2)
    reseed(other, seed=4)
    other.rollout.generate(["p"], config)
    assert other.seen[0] != whole.seen[4]  # the preset's seed matters


def test_a_missing_tunix_private_attribute_names_itself_and_the_versions(monkeypatch):
    """Tunix renamed something reasonkit reaches into: say what, where, and which Tunix."""
    class Sampler:
        _transformer_graphdef = "graph"

    class Rollout:
        _sampler = Sampler()

    rollout = Rollout()
    assert private.tunix_private(rollout, "_sampler._transformer_graphdef") == "graph"
    private.set_tunix_private(rollout, "_sampler._transformer_graphdef", "ours")
    assert rollout._sampler._transformer_graphdef == "ours"
    monkeypatch.setattr(private, "tunix_version", lambda: "0.2.0")
    with pytest.raises(AttributeError) as missing:
        private.tunix_private(rollout, "_sampler._compiled_decode_fn")
    assert str(missing.value) == (
        "Tunix private attribute '_sampler._compiled_decode_fn' not found: a "
        "test_tunix_patches.Sampler (reached from a Rollout) has no '_compiled_decode_fn'. reasonkit "
        "reaches into this private part of Tunix as google-tunix 0.1.7 has it; installed: "
        "google-tunix 0.2.0. Install google-tunix==0.1.7 (requirements.txt), or update "
        "reasonkit for this version.")
    # Setting one Tunix does not have would change nothing Tunix reads: refused alike.
    with pytest.raises(AttributeError, match=r"'_ref_model_exists' not found: a test_tunix_patches\.Rollout "
                                             r"has no '_ref_model_exists'.*installed: google-tunix 0\.2\.0"):
        private.set_tunix_private(rollout, "_ref_model_exists", False)
    assert not hasattr(rollout, "_ref_model_exists")
    monkeypatch.undo()  # the pin the helper names is the one installed and required
    requirements = (ROOT / "requirements.txt").read_text()
    assert private.tunix_version() == private.TUNIX_PINNED
    assert f"google-tunix=={private.TUNIX_PINNED}\n" in requirements


def test_grpo_shares_prompts_only_for_rows_checked_to_be_groups():
    """The update's loss is compiled to run each prompt once per group: the step patch stops
    the run on an example whose rows are not groups. The reference's forward, called from
    Python, shares them only when its rows are groups (checked there, row by row)."""
    from types import SimpleNamespace

    from tunix.rl import common

    class Cluster:  # what the step patch touches when it only checks the groups
        global_steps = 0

        def __init__(self):
            self.rollout = self

        def generate(self, prompts, rollout_config, **kwargs):
            return prompts

        def pad_id(self):
            return 0

    class Learner:
        def __init__(self, prompt_ids):
            self.prompt_ids = prompt_ids

        def _generate_and_compute_advantage(self, training_input, mode=None):
            return SimpleNamespace(prompt_ids=self.prompt_ids)

    grouped = np.repeat(np.array([[0, 5, 6], [7, 8, 9]]), 4, axis=0)
    learner = Learner(grouped)
    grpo.patch_grpo_step(Cluster(), learner, seed=0, max_prompt=8, max_answer=4, group=4)
    assert learner._generate_and_compute_advantage({"prompts": []}).prompt_ids is grouped
    learner = Learner(np.roll(grouped, 1, axis=0))
    grpo.patch_grpo_step(Cluster(), learner, seed=0, max_prompt=8, max_answer=4, group=4)
    with pytest.raises(RuntimeError, match="8 prompt rows are not groups of 4"):
        learner._generate_and_compute_advantage({"prompts": []})

    installed = lambda prompt_tokens, completion_tokens: common.compute_per_token_logps  # noqa: E731
    forward = loss_swap.chunked_if_grouped(installed, 4)
    assert forward(grouped, None).keywords == {"group": 4}
    assert forward(prompt_tokens=np.roll(grouped, 1, axis=0), completion_tokens=None) is \
        logprobs.grpo_compute_per_token_logps
    assert common.compute_per_token_logps is not logprobs.grpo_compute_per_token_logps  # put back


def test_grpo_bucket_choice_and_answer_width():
    assert [grpo.fit_bucket(n, (48, 80), 96) for n in (1, 48, 49, 80, 81, 96, 97)] == \
        [48, 48, 80, 80, 96, 96, 96]  # longer than every bucket: the max, as without buckets
    assert grpo.fit_bucket(50, (), 64) == 64 and grpo.fit_bucket(50, (64, 72), 64) == 64
    assert grpo.used_width(np.array([[3, 4, 0, 5, 0, 0], [6, 0, 0, 0, 0, 0]]), 0) == 4
    assert grpo.used_width(np.zeros((2, 5), np.int32), 0) == 0


def test_chunked_log_probs_restore_tunix_afterwards():
    from tunix.rl import algo_core, common
    from tunix.sft.dpo import dpo_trainer

    before = (common.compute_per_token_logps, dpo_trainer.compute_logps,
              algo_core.compute_entropy_from_logits)
    with pytest.raises(KeyError):
        with loss_swap.chunked_log_probs():
            assert common.compute_per_token_logps is not before[0]
            raise KeyError("a failing trace")
    assert (common.compute_per_token_logps, dpo_trainer.compute_logps,
            algo_core.compute_entropy_from_logits) == before


def test_tpu_sharding_constraints_are_scoped():
    from tunix.models.gemma import model as gemma2
    from tunix.utils import sharding_utils

    before = sharding_utils.shard, gemma2.shard
    with sharding.tpu_sharding_constraints():
        assert sharding_utils.shard is sharding.constrain
    assert (sharding_utils.shard, gemma2.shard) == before


LIBS = ("tunix", "qwix", "flax", "jax", "jaxlib", "orbax")


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_reaches(path: pathlib.Path) -> list[str]:
    """Every reach into a private name of Tunix, qwix, Flax, JAX or Orbax in one file."""
    tree = ast.parse(path.read_text())
    lib_names, found = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in LIBS:
                    lib_names.add(a.asname or a.name.split(".")[0])
                    if any(_private(part) for part in a.name.split(".")):
                        found.append(f"{path}:{node.lineno} import {a.name}")
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            if node.module.split(".")[0] in LIBS:
                for a in node.names:
                    lib_names.add(a.asname or a.name)
                    if _private(a.name) or any(_private(p) for p in node.module.split(".")):
                        found.append(f"{path}:{node.lineno} from {node.module} import {a.name}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in lib_names:
                found.append(f"{path}:{node.lineno} {ast.unparse(node)}")
        if isinstance(node, ast.Call) and len(node.args) > 1:
            fn = ast.unparse(node.func)
            arg = node.args[1]
            if ("getattr" in fn or "setattr" in fn or "private" in fn or "patch.object" in fn) and \
                    isinstance(arg, ast.Constant) and isinstance(arg.value, str) and _private(arg.value):
                found.append(f"{path}:{node.lineno} {fn}(..., {arg.value!r})")
    return found


def test_no_module_outside_the_patch_package_reaches_into_a_librarys_private_names(tmp_path):
    outside = [p for p in sorted((ROOT / "reasonkit").rglob("*.py")) if "tunix_patches" not in p.parts]
    assert [r for p in outside for r in private_reaches(p)] == []
    notebooks = [p for p in sorted((ROOT / "notebooks").glob("*.py"))]
    assert [r for p in notebooks for r in private_reaches(p)] == []
    # the check itself finds each kind of reach
    bad = tmp_path / "bad.py"
    bad.write_text("import qwix\nfrom jax._src import xla_bridge\nfrom tunix.rl import rl_cluster as rl\n"
                   "from flax.nnx import _graph\nqwix._x = 1\nrl.RLCluster._y\n"
                   "getattr(rl, '_z')\nsetattr(obj, '_w', 1)\n")
    assert len(private_reaches(bad)) == 6


def test_every_patch_names_its_module_and_a_test_that_exists():
    names = [p.name for p in tunix_patches.PATCHES]
    assert len(names) == len(set(names))
    for patch in tunix_patches.PATCHES:
        assert (ROOT / "reasonkit" / "tunix_patches" / f"_{patch.module}.py").is_file(), patch.name
        file, _, test = patch.test.partition("::")
        assert f"\ndef {test}(" in (ROOT / file).read_text(), patch.test
        assert patch.written_for and patch.replaces and patch.why
    with pytest.raises(KeyError, match="no patch 'nope'"):
        tunix_patches.by_name("nope")


def test_one_preset_field_switches_the_optimisations_and_keeps_the_needed_patches():
    from reasonkit.config import OPTIMISATIONS
    from reasonkit.presets import get_preset

    assert tuple(p.name for p in tunix_patches.PATCHES if p.optimisation) == OPTIMISATIONS
    assert get_preset("tiny").optimisations == OPTIMISATIONS  # every optimisation in force by default
    assert tunix_patches.in_force(OPTIMISATIONS, "attention")
    assert not tunix_patches.in_force((), "attention")
    assert tunix_patches.in_force((), "reseeded rollouts")  # a stage needs it: never off
    plain = get_preset("tiny", optimisations=[])
    assert plain.optimisations == () and plain.model.attention == "tunix"  # Tunix's own attention
    with pytest.raises(ValueError, match=r"Preset.optimisations=\['fast'\]: \['fast'\] unknown"):
        get_preset("tiny", optimisations=["fast"])
    with pytest.raises(ValueError, match="must be a list of names"):
        get_preset("tiny", optimisations="attention")
    for patch in tunix_patches.PATCHES:  # each says when it can go, and where it was reported
        assert patch.remove_when and patch.upstream, patch.name


def test_the_qwix_patch_follows_the_presets_optimisations():
    from qwix._src.providers import lora as qwix_lora

    from reasonkit import models
    from reasonkit.tunix_patches import lora_delta

    models.use_optimisations(("flat LoRA delta",))
    assert qwix_lora._compute_lora_delta is lora_delta.flat_lora_delta
    assert "already installed" in lora_delta.install()
    models.use_optimisations(())  # a preset without it: qwix's own
    assert qwix_lora._compute_lora_delta is not lora_delta.flat_lora_delta
    models.use_optimisations(("flat LoRA delta",))
    assert qwix_lora._compute_lora_delta is lora_delta.flat_lora_delta


def test_the_progress_bar_shows_recent_values_to_3_significant_digits(capsys):
    from tunix.sft import metrics_logger, progress_bar

    from reasonkit.tunix_patches import progress

    logger = metrics_logger.MetricsLogger()  # no backends: the history only
    for step in range(1, 21):  # a GRPO-like run: a loss near 0, a small decaying learning rate
        logger.log("actor", "loss", np.float32(0.5 if step <= 10 else -0.002), "train", step)
        logger.log("actor", "perplexity", np.float32(1.0), "train", step)
        logger.log("actor", "learning_rate", np.float32(2.5e-4 / step), "train", step)
        logger.log("rewards", "sum", np.float32(step), "train", step)
    names = ["loss", "perplexity", "learning_rate"]
    tunix_bar = progress_bar.ProgressBar("actor", logger, 0, 20, "Actor Training")
    tunix_bar.update_metrics(names, "train")
    assert tunix_bar.metrics == {"actor_train_loss": 0.249, "actor_train_perplexity": 1.0,
                                 "actor_train_learning_rate": 0.0}  # the whole run's means, rounded

    bar = progress.RecentProgressBar("actor", logger, 19, 20, "Actor Training", window=10, every=5,
                                     extra=[("rewards", "sum", "reward")], label="GRPO")
    bar.update_metrics(names, "train")
    bar.update()
    assert bar.metrics == pytest.approx({"loss": -0.002, "lr": 1.25e-5, "reward": 15.5})  # last 10; lr now
    assert capsys.readouterr().out == "GRPO step 20/20: loss -0.002, lr 1.25e-05, reward 15.5\n"
    with pytest.raises(ValueError, match="window=0 must be an int >= 1"):
        progress.RecentProgressBar("actor", logger, 0, 20, window=0)

    class Trainer:  # what show_recent reads of a Tunix trainer
        metrics_prefix, metrics_logger, train_steps, _pbar = "actor", logger, 3, None
        config = type("Config", (), {"max_steps": 20, "pbar_description": "Actor Training"})

    trainer = Trainer()
    given = progress.show_recent(trainer, every=0)
    assert trainer._pbar is given and given.step == 3 and given.max_steps == 20
