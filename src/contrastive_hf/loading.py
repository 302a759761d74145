"""Building the model an example script trains: from our checkpoint, a pretrained encoder, or an encoder config."""

from __future__ import annotations

import logging

from transformers import AutoConfig

from .configuration_contrastive import ContrastiveConfig
from .modeling_contrastive import ContrastiveForPreTraining

__all__ = ["load_pretraining_model"]

logger = logging.getLogger(__name__)


def load_pretraining_model(
    model_name_or_path: str | None,
    config_name: str | None,
    tokenizer,
    cache_dir: str | None = None,
    **config_overrides,
) -> ContrastiveForPreTraining:
    """A `ContrastiveForPreTraining` to train, as run_mlm.py resolves `--model_name_or_path` / `--config_name`:

    - a contrastive_hf checkpoint continues training (``config_overrides`` replace its saved settings);
    - any other pretrained checkpoint is wrapped as the encoder (`from_encoder_pretrained`);
    - with only ``config_name``, an encoder config is built from scratch, sized to ``tokenizer``'s vocabulary.
    """
    if model_name_or_path:
        source = AutoConfig.from_pretrained(model_name_or_path, cache_dir=cache_dir)
        if source.model_type == ContrastiveConfig.model_type:
            return ContrastiveForPreTraining.from_pretrained(model_name_or_path, **config_overrides)
        return ContrastiveForPreTraining.from_encoder_pretrained(model_name_or_path, **config_overrides)
    if not config_name:
        raise ValueError("Give --model_name_or_path (a pretrained encoder) or --config_name (to train from scratch).")
    encoder_config = AutoConfig.from_pretrained(config_name, cache_dir=cache_dir)
    encoder_config.vocab_size = len(tokenizer)
    encoder_config.pad_token_id = tokenizer.pad_token_id
    logger.info("Training a %s encoder from scratch.", encoder_config.model_type)
    return ContrastiveForPreTraining(ContrastiveConfig(encoder=encoder_config, **config_overrides))
