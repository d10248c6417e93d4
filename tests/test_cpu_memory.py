"""reasonkit.tunix_patches._cpu_memory: each CPU step reuses its temporaries, and nothing else changes."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

from reasonkit.tunix_patches import cpu_memory

ROOT = pathlib.Path(__file__).resolve().parents[1]


# A program whose temporaries (two [2048, 4096] float32 cumulative sums, 66 MiB) are one block
# larger than glibc maps from its heap by default; the median call's minor page faults (kept,
# an odd call still finds the heap laid out otherwise and faults the block in once more).
_STEP_MEMORY = """
import json, resource, sys
from reasonkit.tunix_patches import cpu_memory
said = cpu_memory.keep_step_memory() if sys.argv[1] == "kept" else "left to glibc"
import jax, jax.numpy as jnp

@jax.jit
def f(x):
    a = jnp.cumsum(x, 0)
    return (jnp.cumsum(a.T, 0)[::64, ::64] * x.T[::64, ::64]).sum()

x = jnp.ones((2048, 4096), jnp.float32) / 4096
outs, faults = [f(x).item()], []
for _ in range(8):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    outs.append(f(x).item())
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps({"said": said, "faults": sorted(faults)[4], "outs": outs,
                  "temp": f.lower(x).compile().memory_analysis().temp_size_in_bytes}))
"""


@pytest.mark.slow
def test_kept_step_memory_ends_the_page_faults_of_each_call_and_changes_no_number():
    def process(keep: str) -> dict:
        env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)}
        out = subprocess.run([sys.executable, "-c", _STEP_MEMORY, keep], env=env, cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout
        return json.loads(out.splitlines()[-1])

    kept, fresh = process("kept"), process("fresh")
    assert kept["said"].startswith("step memory: kept between steps"), kept["said"]
    assert kept["temp"] > 64 * 2**20  # over what glibc would keep without being asked
    pages = kept["temp"] / 4096
    assert fresh["faults"] > pages / 2  # glibc maps the block fresh for every call...
    assert kept["faults"] < pages / 50  # ...and kept, the next call finds it there
    assert kept["outs"] == fresh["outs"]  # the same numbers, bit for bit


class _Libc:
    def __init__(self):
        self.calls = []

    def mallopt(self, param: int, value: int) -> int:
        self.calls.append((param, value))
        return 1


def test_keep_step_memory_leaves_a_process_whose_backends_already_started():
    import jax

    jax.devices()  # started; the CPU client reads the flag only when it starts, so setting
    async_dispatch = jax.config.read("jax_cpu_enable_async_dispatch")  # it now changes nothing
    jax.config.update("jax_cpu_enable_async_dispatch", True)
    try:
        libc = _Libc()
        said = cpu_memory.keep_step_memory(libc=libc)
        assert "backends started before keep_step_memory" in said and libc.calls == []
    finally:
        jax.config.update("jax_cpu_enable_async_dispatch", async_dispatch)


def test_cpu_only_without_a_setting_looks_for_an_accelerator_runtime(monkeypatch):
    import importlib.util

    assert cpu_memory.cpu_only("") is True  # this venv: jaxlib alone
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "libtpu"
                        else real(name, *a))
    assert cpu_memory.cpu_only("") is False and cpu_memory.cpu_only("cpu") is True


def test_no_environment_variable_switches_it():
    """Whether it runs is the preset's (``optimisations``; runtime.processes.keep_step_memory
    asks), not an environment variable's."""
    import inspect

    assert list(inspect.signature(cpu_memory.keep_step_memory).parameters) == ["libc"]
    assert "environ" not in inspect.getsource(cpu_memory)
