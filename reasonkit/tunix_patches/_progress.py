"""A Tunix 0.1.7 trainer's progress bar that shows the current step, not the run so far.

Tunix's ``ProgressBar`` shows each metric as the mean of every value logged since the
trainer started, rounded to 3 decimals: GRPO's loss (near 0 on average) and a learning
rate of 2.5e-4 both read 0 for the whole run, and SFT ends showing the mean loss of all
its steps. :class:`RecentProgressBar` shows the mean of the last ``window`` values (the
learning rate: its last one) to 3 significant digits, adds metrics another logger prefix
holds (GRPO's rewards: ``rewards/sum``, ``rewards/answer_correct``), and every ``every``
steps prints the same as a line, which stays in a notebook's output where a bar does not.
:func:`show_recent` gives a built trainer one, before it trains (Tunix makes its own
only when the trainer has none).

>>> print(line("GRPO", 40, 200, {"loss": -0.00123, "lr": 0.00025, "kl": 0.0019, "reward": 6.2}))
GRPO step 40/200: loss -0.00123, lr 0.00025, kl 0.0019, reward 6.2
"""

from __future__ import annotations

from typing import Any, Sequence

import jax
import numpy as np
from tunix.sft import progress_bar

from reasonkit.tunix_patches._private import set_tunix_private

__all__ = ["SHORT", "fmt", "line", "RecentProgressBar", "show_recent"]

# Tunix's metric names -> the short names shown; metrics not here are not shown
SHORT = {"loss": "loss", "learning_rate": "lr", "kl": "kl"}


def fmt(value: float) -> str:
    """3 significant digits, as moving values need (a rounding to 3 decimals hides them).

    >>> fmt(0.000251), fmt(-0.00123), fmt(6.2345), fmt(1234.5)
    ('0.000251', '-0.00123', '6.23', '1.23e+03')
    """
    return f"{value:.3g}"


def line(name: str, step: int, total: int | None, values: dict[str, float]) -> str:
    """One progress line: ``<name> step <step>/<total>: <metric> <value>, ...``."""
    where = f"{step}/{total}" if total else f"{step}"
    return f"{name} step {where}: " + ", ".join(f"{k} {fmt(v)}" for k, v in values.items())


class RecentProgressBar(progress_bar.ProgressBar):
    """Tunix's ``ProgressBar`` showing the last ``window`` values of each metric, ``extra``
    metrics of other logger prefixes (``(prefix, metric, shown as)``), and a line every
    ``every`` steps (0: none) named ``label`` (default: the bar's description)."""

    def __init__(self, metrics_prefix: str, metrics_logger: Any, initial_steps: int, max_steps: int,
                 description: str | None = None, *, window: int = 10,
                 extra: Sequence[tuple[str, str, str]] = (), every: int = 0, label: str = ""):
        if not isinstance(window, int) or isinstance(window, bool) or window < 1:
            raise ValueError(f"RecentProgressBar: window={window!r} must be an int >= 1")
        if not isinstance(every, int) or isinstance(every, bool) or every < 0:
            raise ValueError(f"RecentProgressBar: every={every!r} must be an int >= 0 (0: no lines)")
        super().__init__(metrics_prefix=metrics_prefix, metrics_logger=metrics_logger,
                         initial_steps=initial_steps, max_steps=max_steps, description=description)
        self.window, self.extra, self.every, self.label = window, tuple(extra), every, label
        self.step = initial_steps  # a disabled tqdm bar (no terminal, no notebook) counts nothing

    def recent(self, prefix: str, name: str, mode: Any = "train") -> float | None:
        """The mean of ``prefix/mode/name``'s last ``window`` values (the learning rate: the
        last one), or None before it is logged."""
        logger = self.metrics_logger
        if not logger.metric_exists(prefix, name, mode):
            return None
        history = np.asarray(logger.get_metric_history(prefix, name, mode), dtype=np.float64).reshape(-1)
        if not history.size:
            return None
        return float(history[-1] if name == "learning_rate" else history[-self.window:].mean())

    def _update_metric(self, metric_name: str, mode: Any, ndigits: int = 3) -> None:
        # Tunix's: the mean of the whole run, rounded to ndigits decimals
        if metric_name in SHORT:  # perplexity and the rest are not shown
            value = self.recent(self.metrics_prefix, metric_name, mode)
            if value is not None:
                self.metrics[SHORT[metric_name]] = value

    def update(self, n: int = 1) -> None:
        # Tunix's keeps only keys named "<prefix>_<mode>_<metric>"; these are short names
        for prefix, name, shown in self.extra:
            value = self.recent(prefix, name)
            if value is not None:
                self.metrics[shown] = value
        if self.metrics:
            self.tqdm_bar.set_postfix({k: fmt(v) for k, v in self.metrics.items()}, refresh=False)
        self.tqdm_bar.update(n)
        self.step += n
        if self.every and self.metrics and self.step % self.every == 0 and jax.process_index() == 0:
            self.tqdm_bar.write(line(self.label or self.description or "training", self.step,
                                     self.max_steps, self.metrics))


def show_recent(trainer, *, extra: Sequence[tuple[str, str, str]] = (), every: int = 0,
                label: str = "", window: int = 10):
    """Give a built Tunix trainer (``PeftTrainer``, ``DPOTrainer``, an RL cluster's actor
    trainer) a :func:`RecentProgressBar` before it trains; returns the bar.

    Tunix 0.1.7's ``train`` makes a ``ProgressBar`` only while the trainer's private
    ``_pbar`` is None, and closes whichever it has when training ends.
    """
    bar = RecentProgressBar(trainer.metrics_prefix, trainer.metrics_logger, trainer.train_steps,
                            trainer.config.max_steps, trainer.config.pbar_description,
                            window=window, extra=extra, every=every, label=label)
    set_tunix_private(trainer, "_pbar", bar)
    return bar
