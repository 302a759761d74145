"""What the example scripts share around the model they train: building it (from our checkpoint, a pretrained
encoder, or an encoder config) and adapting it with LoRA. Building it whole under DeepSpeed ZeRO-3 is `zero3.py`, and
checking that the saved checkpoint reloads `reload_check.py`."""

from __future__ import annotations

import logging
import os

import torch
from transformers import AutoConfig

from ..models.modeling_contrastive_pretraining import ContrastiveForPreTraining
from .errors import UsageError, as_usage_error
from .logs import announce

__all__ = [
    "load_pretraining_model",
    "with_lora_adapter",
]

logger = logging.getLogger(__name__)


def load_pretraining_model(
    model_name_or_path: str | None,
    config_name: str | None,
    tokenizer,
    cache_dir: str | None = None,
    loading: dict | None = None,
    **config_overrides,
) -> ContrastiveForPreTraining:
    """A `ContrastiveForPreTraining` to train, as run_mlm.py resolves `--model_name_or_path` / `--config_name`:

    - a contrastive_hf checkpoint continues training (``config_overrides`` replace its saved settings);
    - a sentence-transformers model (all-MiniLM-L6-v2) starts as the model its folder defines: its pooling, Dense
      layers, normalisation and prompts (``config_overrides`` replace them, with a warning naming what it said);
    - any other pretrained checkpoint is wrapped as the encoder (`from_encoder_pretrained`);
    - with only ``config_name``, an encoder config is built from scratch, sized to ``tokenizer``'s vocabulary.

    ``loading``: `from_pretrained`'s ``dtype`` and ``attn_implementation`` (`LoadingArguments.loading`; default:
    float32 master weights, whatever dtype the checkpoint was saved in).
    """
    loading = dict(loading or {"dtype": torch.float32})
    if model_name_or_path:
        announce(f"Loading the model ({os.path.basename(os.path.normpath(model_name_or_path))}) ...")
        # a setting the config refuses (e.g. --truncate_dim above the embedding size) is the command's mistake; so is
        # a damaged weights file, which the loader names
        with as_usage_error():
            loading.update(config_overrides)
            if cache_dir is not None:
                loading["cache_dir"] = cache_dir
            # from_pretrained decides what the path holds (`checkpoint_contents.what_the_path_holds`): our checkpoint
            # continues, a sentence-transformers folder or a plain encoder is wrapped (from_encoder_pretrained)
            return ContrastiveForPreTraining.from_pretrained(model_name_or_path, **loading)
    if not config_name:
        raise UsageError("Give --model_name_or_path (a pretrained encoder) or --config_name (to train from scratch).")
    encoder_config = AutoConfig.from_pretrained(config_name, cache_dir=cache_dir)
    encoder_config.vocab_size = len(tokenizer)
    encoder_config.pad_token_id = tokenizer.pad_token_id
    if loading.get("attn_implementation"):
        encoder_config._attn_implementation = loading["attn_implementation"]
    announce(f"Building a {encoder_config.model_type} encoder from scratch ({os.path.basename(config_name)}) ...")
    with as_usage_error():
        return ContrastiveForPreTraining.from_config(encoder_config, **config_overrides)


def with_lora_adapter(model, adapter_args, modules_to_save: tuple[str, ...] = ()):
    """``model`` wrapped in the LoRA adapter that ``adapter_args`` (an `AdapterArguments`: ``--lora_r``...) asks
    for, or ``model`` itself without one. ``modules_to_save``: modules the script trains in full beside the adapter
    (multitask's heads). Every script adapts its model here, so that each refuses the same mistakes in the same
    words."""
    from .._files import hub_id_or_none
    from ..hub.adapters import adapter_base_name, add_adapter, lora_config

    options = adapter_args.lora_options()
    if options is None:
        return model
    name_or_path = getattr(model.config, "_name_or_path", None)
    base_name = adapter_base_name(name_or_path)
    if base_name is None:
        raise UsageError(
            "--lora_r adapts the frozen weights of a pretrained encoder: give --model_name_or_path (a model built "
            "from --config_name has random weights, and its adapter would load onto no base)."
        )
    if hub_id_or_none(name_or_path) is None:  # saved files name no local absolute path
        logger.warning(
            "The base model %s is a local folder: the adapter's adapter_config.json names it %r "
            "(base_model_name_or_path), relative to the folder this run started in. Load the adapter from there, or "
            "set base_model_name_or_path to the base's Hub id or location before sharing it; the merged model needs "
            "no base.",
            name_or_path,
            base_name,
        )
    options["modules_to_save"] = [*(options["modules_to_save"] or ()), *modules_to_save] or None
    with as_usage_error():  # a rank, alpha or dropout that cannot work, named with its flag
        peft_config = lora_config(model, **options)
    with as_usage_error("Name modules of the encoder with --lora_target_modules (e.g. query,value)."):
        adapted = add_adapter(model, peft_config)
    for parameter in adapted.parameters():  # float32 masters of what trains, over a base of --lora_base_dtype
        if parameter.requires_grad and parameter.dtype != torch.float32:
            parameter.data = parameter.data.float()
    trainable, total = adapted.get_nb_trainable_parameters()
    announce(f"Training a LoRA adapter: {trainable:,} of {total:,} parameters ({100 * trainable / total:.2f}%).")
    return adapted
