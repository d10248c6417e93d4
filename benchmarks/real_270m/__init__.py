"""Gemma 3 270M on a CPU: the series end to end, its learning-rate sweeps, its parity with
transformers; and the same shape with random weights (e2e_real)."""
