"""reasonkit: post-train Gemma into a reasoning model (SFT -> DPO -> GRPO, LoRA, Tunix)."""

__version__ = "0.1.0"
