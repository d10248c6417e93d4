"""The compile counter's view of a batch stream."""

import jax
import numpy as np

from reasonkit.runtime import compiles


def test_watch_ignores_the_length_of_text_columns():
    """GRPO batches carry prompts as text: '<U4' vs '<U6' is not a new shape for XLA."""
    @jax.jit
    def step(ids):
        return (ids * 2).sum()

    @jax.jit
    def once(ids):  # a function of this test's own: its compile cannot be cached by another test
        return ids - 1

    prompts = [["2+2?", "3+3?"], ["12+12?", "1+1?"], ["100+100?", "5+5?"]]
    stream = [{"prompts": np.array(p), "answer": np.array(["4", "6"]), "ids": np.ones((2, 8))}
              for p in prompts]
    assert len({b["prompts"].dtype for b in stream}) == 3
    with compiles.CompileCounter() as counter:
        for i, batch in enumerate(counter.watch(stream)):
            step(batch["ids"]).block_until_ready()
            if i == 2:
                once(batch["ids"]).block_until_ready()  # a compile in a steady-state step
    assert counter.shapes == 1
    assert counter.after_warmup >= 1 and counter.names_after_warmup
    assert compiles._signature(stream[0]) == compiles._signature(stream[2])
    assert compiles._signature(np.ones(3, np.int32)) != compiles._signature(np.ones(3))


def test_a_shape_a_step_reports_is_warm_up_on_its_first_step_only():
    """GRPO picks its length buckets inside the step (the batch is text): it reports them."""
    @jax.jit
    def pad_to(ids):
        return ids.sum()

    widths = [8, 8, 4, 4, 8, 6]  # the shape each step runs; step 5 compiles an unreported one
    with compiles.CompileCounter() as counter:
        for i, _ in enumerate(counter.watch([{"prompts": np.array(["a"])}] * len(widths))):
            if i < 5:
                compiles.step_shape(("grpo", widths[i]))
            pad_to(np.ones(widths[i])).block_until_ready()
            if i == 4:
                assert counter.after_warmup == 0  # 8 compiled in step 0, 4 in step 2: warm-up
    assert counter.step_shapes == {"('grpo', 8)", "('grpo', 4)"}
    assert counter.after_warmup == 1 and counter.names_after_warmup == ["jit(pad_to)"]
    assert counter.summary()["step_shapes"] == ["('grpo', 4)", "('grpo', 8)"]


def test_each_program_is_named_with_its_trace_lower_and_compile_seconds():
    @jax.jit
    def matmuls(x):  # a function of this test's own: no other test compiled it
        return (x @ x.T).sum()

    with compiles.CompileCounter() as counter:
        matmuls(np.ones((64, 32), np.float32)).block_until_ready()
        matmuls(np.ones((64, 32), np.float32)).block_until_ready()  # cached in memory: no program
    [program] = [p for p in counter.programs if p.label == "matmuls"]
    assert program.trace > 0 and program.lower > 0 and program.compile > 0 and not program.cached
    assert counter.compiled == counter.count == len(counter.programs)
    assert counter.line().startswith(f"compiled {counter.count} programs in ")
    assert "matmuls" in counter.line(top=10)
    assert counter.summary()["programs"][-1]["name"] == "jit(matmuls)"


_RERUN = """
import sys, jax, numpy as np
jax.config.update("jax_compilation_cache_dir", sys.argv[1])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
from reasonkit.runtime import compiles

@jax.jit
def cube(x):
    return x ** 3

with compiles.CompileCounter() as counter:
    cube(np.ones(5, np.float32)).block_until_ready()
print(counter.compiled, len(counter.programs))
"""


def test_a_rerun_with_the_persistent_cache_compiles_nothing_in_the_backend(tmp_path):
    import subprocess
    import sys

    def run():
        out = subprocess.run([sys.executable, "-c", _RERUN, str(tmp_path)], capture_output=True,
                             text=True, check=True, env={"JAX_PLATFORMS": "cpu", "PATH": ""})
        return tuple(int(x) for x in out.stdout.split())

    assert run() == (1, 1)  # the first process compiles cube
    assert run() == (0, 1)  # the second loads it: one program, none compiled
