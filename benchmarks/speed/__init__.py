"""Speed, compiles and memory: attention, padding and packing, MFU, shared-prompt GRPO,
real-shape compiles and their peak buffers, the stages on one GPU."""
