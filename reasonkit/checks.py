"""Each notebook's final check: an older face of :mod:`reasonkit.notebook`."""

from reasonkit.notebook._checks import (
    CORRECTNESS,
    DPO_MIN_ACCURACY,
    DPO_MIN_MARGIN,
    GRPO_MIN_KL,
    HELD_OUT,
    MIN_FORMAT_GAIN,
    SFT_LOSS_DROP,
    StageDidNotLearn,
    check_dpo,
    check_grpo,
    check_sft,
    check_stages,
    quarters,
)

__all__ = ["StageDidNotLearn", "quarters", "check_sft", "check_dpo", "check_grpo", "check_stages",
           "CORRECTNESS", "HELD_OUT", "SFT_LOSS_DROP", "DPO_MIN_MARGIN", "DPO_MIN_ACCURACY",
           "GRPO_MIN_KL", "MIN_FORMAT_GAIN"]
