"""Parameter-efficient training (LoRA and the other peft methods) of a contrastive model's encoder."""

from __future__ import annotations

import os

from peft import LoraConfig, PeftConfig, PeftModel, get_peft_model
from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING

from ..models.checkpoint_files import save_tokenizer

__all__ = ["default_lora_target_modules", "lora_config", "add_adapter", "merge_and_save"]


def default_lora_target_modules(model) -> list[str]:
    """peft's default LoRA targets for the wrapped encoder's architecture (BERT/RoBERTa: query and value)."""
    encoder_type = model.config.encoder.model_type
    targets = TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING.get(encoder_type)
    if targets is None:
        raise ValueError(
            f"peft has no default LoRA target modules for {encoder_type!r} encoders; pass them explicitly, e.g. "
            "--lora_target_modules q_lin,v_lin (the names of the encoder's attention projections)."
        )
    return list(targets)


def lora_config(
    model,
    r: int,
    alpha: int | None = None,
    dropout: float = 0.0,
    target_modules: list[str] | None = None,
    modules_to_save: list[str] | None = None,
) -> LoraConfig:
    """A `LoraConfig` for ``model``'s encoder; ``alpha`` defaults to ``2 * r``.

    Only the encoder's modules are targeted by default. The projection and MLM heads stay frozen unless named in
    ``modules_to_save`` (e.g. ``["projection"]``), in which case a trainable copy of them is saved with the adapter.
    """
    if r < 1:
        raise ValueError(f"LoRA rank r must be >= 1, got {r}.")
    return LoraConfig(
        r=r,
        lora_alpha=alpha if alpha is not None else 2 * r,
        lora_dropout=dropout,
        target_modules=target_modules or default_lora_target_modules(model),
        modules_to_save=modules_to_save,
    )


def add_adapter(model, peft_config: PeftConfig) -> PeftModel:
    """Wrap ``model`` with a peft adapter: only the adapter's weights (and ``modules_to_save``) stay trainable."""
    return get_peft_model(model, peft_config)


def merge_and_save(peft_model: PeftModel, save_directory: str | os.PathLike, tokenizer=None):
    """Fold the adapter into the weights and save a full contrastive_hf checkpoint (loadable by AutoModel,
    trust_remote_code, SentenceTransformer and AutoModelForSequenceClassification). Returns the merged model."""
    merged = peft_model.merge_and_unload()
    merged.save_pretrained(save_directory)
    if tokenizer is not None:
        save_tokenizer(tokenizer, save_directory)
    return merged
