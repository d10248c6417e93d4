"""Shared fixtures: a small SentencePiece tokenizer and the tiny base model directory."""

import random
import sys

import pytest

from reasonkit import models
from reasonkit.presets import get_preset

WORDS = ("apple pear fig plum cat dog red blue green sort larger smaller how many times does "
         "appear word letters reverse upper case car moves speed meters seconds far print value "
         "box boxes eats left has gives answer the is of and").split()


@pytest.fixture(scope="session")
def tokenizer_path(tmp_path_factory):
    """A 512-piece Gemma-style tokenizer trained on a random word corpus (no task data)."""
    rng = random.Random(0)
    texts = [" ".join(rng.choice(WORDS) for _ in range(12)) + f" {a} + {b} = {a + b}\n"
             for a in range(60) for b in range(40)]
    return models.train_tokenizer(texts, tmp_path_factory.mktemp("tok") / "tok", 512)


@pytest.fixture(scope="session")
def tiny_dir():
    """The tiny preset's base model directory (shipped in reasonkit/assets/tiny)."""
    return models.resolve_source(get_preset("tiny").model)


@pytest.fixture(autouse=True)
def close_figures():
    """pyplot keeps each figure until it is closed: close every test's (no "> 20 figures" warning)."""
    yield
    if "matplotlib.pyplot" in sys.modules:
        sys.modules["matplotlib.pyplot"].close("all")


def pytest_collection_modifyitems(config, items):
    """The notebooks under nbval run the whole series: slow, as every test that trains is."""
    for item in items:
        if item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.slow)


def pytest_xdist_make_scheduler(config, log):
    """Under pytest-xdist (scripts/test.sh runs ``-n 2``): each file goes to one worker whole,
    so a module's shared fixture (a trained run, a model) is built once, and the notebooks,
    each reading the run the one before it wrote, go together to one worker, in order, each
    keeping one kernel for all its cells."""
    from xdist.scheduler import LoadScopeScheduling

    class ByFile(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return "notebooks" if path.endswith(".ipynb") else path

    return ByFile(config, log)
