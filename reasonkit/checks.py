"""Each notebook's final check: an older face of :mod:`reasonkit.notebook`."""

from reasonkit.notebook import (
    StageDidNotLearn,
    check_dpo,
    check_grpo,
    check_sft,
    check_stages,
)

__all__ = ["StageDidNotLearn", "check_sft", "check_dpo", "check_grpo", "check_stages"]
