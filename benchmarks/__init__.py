"""Everything slow or measured, by topic; each entry point runs from the repository root as
``python -m benchmarks.<topic>.<name>`` and writes its result into ``benchmarks/results/``.

- :mod:`benchmarks.speed`: steps, compiles and memory (attention, padding and packing,
  MFU, shared-prompt GRPO, real-shape compiles, stages on a GPU);
- :mod:`benchmarks.real_270m`: Google's Gemma 3 270M (and its shape with random
  weights) through every stage on a CPU, its learning-rate sweeps, its parity with
  transformers;
- :mod:`benchmarks.exports`: the exports read by transformers / PEFT and by GGUF runtimes
  (need PyTorch);
- :mod:`benchmarks.grpo`: what the stages do on the tiny preset over seeds, and GRPO on
  hard prompts;
- :mod:`benchmarks.checker`: the answer checker against other projects' test verdicts;
- :mod:`benchmarks.common`: what they share (result paths, JSON, the compile harness).

Not installed with reasonkit (``pip install -e .`` packages ``reasonkit`` alone), not run in CI;
tests/test_benchmarks.py imports the cheap parts.
"""
