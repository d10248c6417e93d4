"""The exports read by another runtime: transformers / PEFT, and GGUF (transformers, Ollama's
template). Both need PyTorch, which CI does not install."""
