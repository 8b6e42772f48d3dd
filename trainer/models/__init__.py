"""Models the trainer can run: any local Hugging Face causal-LM directory, or `tiny`."""

from trainer.models.tiny import resolve_model

__all__ = ["resolve_model"]
