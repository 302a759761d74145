"""Parameter-efficient training (LoRA and the other peft methods) of a contrastive model's encoder(s).

A saved adapter folder (peft's ``adapter_config.json`` and ``adapter_model.safetensors``) loads through peft as peft
loads any adapter:

- ``base_model_name_or_path`` records where the model started, as peft reads it: the Hub id; for a local folder, its
  path relative to the working directory when it lies inside it, else its folder name (`adapter_base_name`). Never an
  absolute path: the folder is what ``--push_to_hub`` uploads. The ``README.md`` peft writes beside every adapter it
  saves (each ``checkpoint-N``, the final folder) names the base as ``base_model`` only when it is a Hub id
  (`add_adapter`).
- peft's ``auto_mapping`` names the contrastive_hf class that was adapted (`ContrastiveForPreTraining`,
  `ContrastiveModel`, `DualEncoderModel`), whose ``from_pretrained`` rebuilds the base from that name, wrapping a
  plain pretrained encoder as ``from_encoder_pretrained`` does. peft imports only the libraries its allowlist names,
  so the call names this one, with the model options the run set (`base_model_settings`)::

      AutoPeftModel.from_pretrained(folder, import_allowlist=["contrastive_hf"], pooler_type="mean", ...)

- weights the embeddings go through that a freshly built base would not have trained (a projection kept at
  inference, DPR's projections) are trained with the adapter and saved beside it (peft's ``modules_to_save``), so
  that the adapter on its base gives the trained embeddings: those of the merged checkpoint (`merge_and_save`).
"""

from __future__ import annotations

import os
import types

import torch
from huggingface_hub import ModelCard
from peft import LoraConfig, PeftConfig, PeftModel, get_peft_model
from peft.tuners.lora import LoraLayer
from peft.tuners.tuners_utils import check_target_module_exists
from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING

from .._files import hub_id_or_none
from ..models.checkpoint_files import save_tokenizer
from ..models.configuration_contrastive import HEAD_FIELDS, ContrastiveConfig
from ..models.configuration_dual_encoder import DualEncoderConfig

__all__ = [
    "default_lora_target_modules",
    "lora_config",
    "add_adapter",
    "adapter_base_name",
    "adapted_model",
    "base_model_settings",
    "describe_adapter",
    "merge_and_save",
    "adapter_weight_deltas",
    "is_adapter_parameter",
]

# The model options that rebuild an adapted model around its base as it was trained: the modules (pooler,
# projection, towers) and what `encode` does with their output. Loss settings (temperature...) are left out: they
# change neither the weights an adapter needs nor the embeddings.
_SENTENCE_SETTINGS = ("prompts", "default_prompt_name", "include_prompt", "truncate_dim", "max_seq_length")
_BASE_MODEL_SETTINGS = {
    ContrastiveConfig.model_type: (*HEAD_FIELDS, *_SENTENCE_SETTINGS),
    DualEncoderConfig.model_type: (
        "share_encoders",
        "pooler_type",
        "projection_dim",
        "similarity",
        *_SENTENCE_SETTINGS,
    ),
}


def _encoder_configs(model) -> list:
    """The configs of the transformers encoders inside ``model`` (one, or a dual encoder's two towers)."""
    if hasattr(model, "encoder_configs"):
        return [config for config in model.encoder_configs() if config is not None]
    return _encoder_configs(model.contrastive)  # a model built around a ContrastiveModel (multitask)


def default_lora_target_modules(model) -> list[str]:
    """peft's default LoRA targets for the architecture of every encoder of ``model`` (BERT/RoBERTa: query and
    value)."""
    targets = []
    for encoder_config in _encoder_configs(model):
        names = TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING.get(encoder_config.model_type)
        if names is None:
            raise ValueError(
                f"peft has no default LoRA target modules for {encoder_config.model_type!r} encoders; pass them "
                "explicitly, e.g. --lora_target_modules q_lin,v_lin (the names of the encoder's attention "
                "projections)."
            )
        targets += [name for name in names if name not in targets]
    return targets


def _inference_heads(model) -> list[str]:
    """The modules outside the encoders that the embeddings go through: trained and saved with an adapter, since a
    base rebuilt from its encoder would start them from new random weights."""
    config = model.config
    if getattr(config, "model_type", None) == DualEncoderConfig.model_type:
        return [name for name in ("query_projection", "passage_projection") if getattr(model, name, None) is not None]
    sentence_config = getattr(config, "contrastive", config)  # a multitask model's encoder config
    if sentence_config.projection_at_inference and sentence_config.projection_type != "none":
        return ["projection"]
    return []


def lora_config(
    model,
    r: int,
    alpha: int | None = None,
    dropout: float = 0.0,
    target_modules: list[str] | None = None,
    modules_to_save: list[str] | None = None,
) -> LoraConfig:
    """A `LoraConfig` for ``model``'s encoder(s); ``alpha`` defaults to ``2 * r``.

    Only the encoders' modules are targeted by default. A projection the embeddings go through (kept at inference)
    is trained in full and saved with the adapter (``modules_to_save``); other heads (a training-only projection,
    the MLM head) stay frozen unless named in ``modules_to_save`` (e.g. ``["projection"]``).

    A `ValueError` names each value that cannot work, with its script flag: ``r`` below 1 or above the smallest
    dimension of the layers it adapts (a rank beyond it adds parameters, not capacity), ``alpha`` not above 0,
    ``dropout`` outside [0, 1).
    """
    if r < 1:
        raise ValueError(f"LoRA rank r must be >= 1, got {r}.")
    if alpha is not None and alpha <= 0:
        raise ValueError(
            f"LoRA alpha={alpha} (--lora_alpha) must be > 0: it scales the adapter's update by alpha / r. Leave it "
            f"unset for 2 * r ({2 * r})."
        )
    if not 0 <= dropout < 1:
        raise ValueError(
            f"LoRA dropout={dropout} (--lora_dropout) must be in [0, 1): the probability of zeroing each input of the "
            "adapter (0: none)."
        )
    saved = list(dict.fromkeys([*(modules_to_save or []), *_inference_heads(model)]))
    config = LoraConfig(
        r=r,
        lora_alpha=alpha if alpha is not None else 2 * r,
        lora_dropout=dropout,
        target_modules=target_modules or default_lora_target_modules(model),
        modules_to_save=saved or None,
    )
    _check_rank(model, config)
    return config


def _check_rank(model, config: LoraConfig) -> None:
    """Refuse a rank above the smallest dimension of the layers ``config`` adapts in ``model``: the factors of a
    ``(out, in)`` weight have rank at most ``min(out, in)``. Modules that match nothing are left to peft's error."""
    dimensions = {
        name: tuple(module.weight.shape)
        for name, module in model.named_modules()
        if getattr(getattr(module, "weight", None), "ndim", 0) == 2 and check_target_module_exists(config, name)
    }
    if not dimensions:
        return
    name, shape = min(dimensions.items(), key=lambda item: min(item[1]))
    if config.r > min(shape):
        raise ValueError(
            f"LoRA rank r={config.r} (--lora_r) is above {min(shape)}, the smallest dimension of the layers it "
            f"adapts ({name}: {shape[0]} x {shape[1]}): a rank beyond it adds parameters, not capacity. Give a rank "
            f"of at most {min(shape)} (8 or 16 is usual)."
        )


def adapter_base_name(name_or_path: str | os.PathLike | None) -> str | None:
    """How an adapter folder names its base model (peft's ``base_model_name_or_path``): a Hub id as it is; a local
    folder by its path relative to the working directory when it lies inside it (where a run and its loading
    usually start), else by its folder name. Never an absolute path; None for a model built from scratch."""
    if not name_or_path:
        return None
    path = os.fspath(name_or_path)
    if not os.path.exists(path):
        return path  # a Hub id
    relative = os.path.relpath(os.path.abspath(path))
    if relative == os.curdir or relative.split(os.sep)[0] == os.pardir:
        return os.path.basename(os.path.abspath(path))
    return relative


def add_adapter(model, peft_config: PeftConfig) -> PeftModel:
    """Wrap ``model`` with a peft adapter: only the adapter's weights (and ``modules_to_save``) stay trainable. The
    adapter folders it saves name the base model ``model`` was loaded from (`adapter_base_name`), and their
    ``README.md`` names no local path (`_create_or_update_model_card`)."""
    # peft records the wrapped model's name_or_path as the base; the model config's _name_or_path (the path it was
    # loaded from, in memory only) stays as it is: the model card and the tokenizer's loading read it
    model.name_or_path = adapter_base_name(getattr(model.config, "_name_or_path", None)) or ""
    peft_model = get_peft_model(model, peft_config)
    peft_model.create_or_update_model_card = types.MethodType(_create_or_update_model_card, peft_model)
    return peft_model


def _create_or_update_model_card(peft_model: PeftModel, output_dir: str) -> None:
    """peft's card (``README.md``), which it writes with every adapter it saves (each checkpoint, the final folder,
    a push), without a local base model: peft names the base by the config's ``_name_or_path``, for a local folder
    the absolute path it was loaded from. A base that is not a Hub id is left out of ``base_model`` and of the
    ``base_model:...`` tags (the Hub reads both as Hub ids); ``adapter_config.json`` names it portably."""
    type(peft_model).create_or_update_model_card(peft_model, output_dir)
    path = os.path.join(output_dir, "README.md")
    card = ModelCard.load(path)
    if card.data.base_model is None or hub_id_or_none(card.data.base_model) is not None:
        return
    card.data.base_model = None
    card.data.tags = [tag for tag in card.data.tags or () if not tag.startswith("base_model:")] or None
    card.save(path)


def adapted_model(model) -> PeftModel | None:
    """The peft model inside ``model``: itself, or the one an SG-BERT model trains (BERT_T); None without one."""
    for candidate in (model, getattr(model, "contrastive", None)):
        if isinstance(candidate, PeftModel):
            return candidate
    return None


def base_model_settings(config) -> dict:
    """The model options (`ContrastiveConfig` or `DualEncoderConfig` fields) that rebuild a model adapted with
    ``config`` around its base as it was trained: what ``from_pretrained(base, **settings)`` takes, and so
    ``AutoPeftModel.from_pretrained(adapter, import_allowlist=["contrastive_hf"], **settings)``. Unset (None) fields
    are left out: a run sets a value or keeps its base's."""
    model_type = getattr(config, "model_type", None)
    names = _BASE_MODEL_SETTINGS.get(model_type, _BASE_MODEL_SETTINGS[ContrastiveConfig.model_type])
    return {name: getattr(config, name) for name in names if getattr(config, name, None) is not None}


def describe_adapter(model) -> str | None:
    """The model card's words for the adapter ``model`` trains (e.g. "LORA adapter (r=8, alpha=16) on query,
    value"), or None without one."""
    peft_model = adapted_model(model)
    config = None if peft_model is None else peft_model.peft_config.get("default")
    if config is None:
        return None
    targets = config.target_modules  # names, or one regular expression
    targets = targets if isinstance(targets, str) else ", ".join(sorted(targets))
    text = f"{config.peft_type.value} adapter (r={config.r}, alpha={config.lora_alpha}) on {targets}"
    if config.modules_to_save:
        text += f", with {', '.join(sorted(config.modules_to_save))} trained in full"
    return text


def merge_and_save(peft_model: PeftModel, save_directory: str | os.PathLike, tokenizer=None):
    """Fold the adapter into the weights and save a full contrastive_hf checkpoint (loadable by AutoModel,
    trust_remote_code, SentenceTransformer and AutoModelForSequenceClassification). Returns the merged model."""
    merged = peft_model.merge_and_unload()
    if tokenizer is not None and hasattr(merged, "tokenizer") and merged.tokenizer is None:
        merged.tokenizer = tokenizer  # a dual encoder's towers each carry it
    merged.save_pretrained(save_directory)
    if tokenizer is not None:
        save_tokenizer(tokenizer, save_directory)
    return merged


def is_adapter_parameter(name: str) -> bool:
    """Whether the parameter ``name`` belongs to a LoRA adapter (its low-rank factors), not to the adapted model."""
    return ".lora_" in f".{name}"


def adapter_weight_deltas(model: torch.nn.Module) -> list[torch.Tensor]:
    """What each active LoRA adapter inside ``model`` adds to the weight it adapts (``scaling * B @ A``, with the
    gradient to A and B): the adapted weights minus the frozen base weights."""
    return [
        module.get_delta_weight(name)
        for module in model.modules()
        if isinstance(module, LoraLayer) and not module.merged
        for name in module.active_adapters
        if name in module.lora_A
    ]
