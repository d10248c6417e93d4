"""The stages on the tiny preset over seeds, GRPO on hard prompts, and the room GRPO has there."""
