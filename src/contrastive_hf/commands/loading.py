"""What the example scripts share around the model they train: building it (from our checkpoint, a pretrained
encoder, or an encoder config), whole even under DeepSpeed ZeRO-3, and checking that the saved checkpoint reloads."""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

import numpy as np
import torch
from transformers import AutoConfig
from transformers.integrations import is_deepspeed_zero3_enabled, set_hf_deepspeed_config, unset_hf_deepspeed_config

from ..hub.model_card import hub_id_or_none  # noqa: F401  (re-exported from its former home)
from ..models.checkpoint_files import checkpoint_model_type
from ..models.configuration_contrastive import ContrastiveConfig
from ..models.modeling_contrastive import ContrastiveForPreTraining
from .errors import UsageError, as_usage_error
from .logs import announce

__all__ = [
    "load_pretraining_model",
    "with_lora_adapter",
    "built_whole",
    "whole_parameters",
    "ReloadReference",
    "trained_embeddings",
    "verify_reload",
    "hub_id_or_none",
    "loading_instructions",
]

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
        announce(f"Loading the model ({os.path.basename(os.path.normpath(model_name_or_path))}) ...")
        # a setting the config refuses (e.g. --truncate_dim above the embedding size) is the command's mistake; so is
        # a damaged weights file, which the loader names
        with as_usage_error():
            # float32 master weights, whatever dtype the checkpoint was saved in (transformers 5 loads the saved
            # one): a bf16 run computes under autocast, and the optimiser steps in float32
            loading = {"dtype": torch.float32, **config_overrides}
            if checkpoint_model_type(model_name_or_path, cache_dir=cache_dir) == ContrastiveConfig.model_type:
                return ContrastiveForPreTraining.from_pretrained(model_name_or_path, **loading)
            return ContrastiveForPreTraining.from_encoder_pretrained(model_name_or_path, **loading)
    if not config_name:
        raise UsageError("Give --model_name_or_path (a pretrained encoder) or --config_name (to train from scratch).")
    encoder_config = AutoConfig.from_pretrained(config_name, cache_dir=cache_dir)
    encoder_config.vocab_size = len(tokenizer)
    encoder_config.pad_token_id = tokenizer.pad_token_id
    announce(f"Building a {encoder_config.model_type} encoder from scratch ({os.path.basename(config_name)}) ...")
    with as_usage_error():
        return ContrastiveForPreTraining.from_config(encoder_config, **config_overrides)


def with_lora_adapter(model, adapter_args, modules_to_save: tuple[str, ...] = ()):
    """``model`` wrapped in the LoRA adapter that ``adapter_args`` (an `AdapterArguments`: ``--lora_r``...) asks
    for, or ``model`` itself without one. ``modules_to_save``: modules the script trains in full beside the adapter
    (multitask's heads). Every script adapts its model here, so that each refuses the same mistakes in the same
    words."""
    from ..hub.adapters import adapter_base_name, add_adapter, lora_config
    from ..hub.model_card import hub_id_or_none

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
    trainable, total = adapted.get_nb_trainable_parameters()
    announce(f"Training a LoRA adapter: {trainable:,} of {total:,} parameters ({100 * trainable / total:.2f}%).")
    return adapted


@contextmanager
def built_whole(training_args):
    """Build the model whole in this process, even under DeepSpeed ZeRO-3.

    Under ZeRO-3, transformers creates every model inside `deepspeed.zero.Init`, which shards each parameter across
    the processes as soon as it exists, while wrapping a pretrained encoder, copying its MLM head and resizing the
    vocabulary for [DEL] read and write whole weights. A sentence encoder fits in each process's memory, and
    `deepspeed.initialize` shards the whole model when training starts.
    """
    plugin = getattr(training_args, "deepspeed_plugin", None)
    holder = getattr(plugin, "dschf", None) or getattr(training_args, "hf_deepspeed_config", None)
    if holder is None or not is_deepspeed_zero3_enabled():
        yield
        return
    unset_hf_deepspeed_config()
    try:
        yield
    finally:
        set_hf_deepspeed_config(holder)  # the Trainer's DeepSpeed integration reads it again


def whole_parameters(model):
    """Every parameter of ``model`` whole in this process while the context lasts: DeepSpeed ZeRO-3 keeps only a
    shard of each (entering gathers them, a collective: every process must enter). A no-op otherwise."""
    if not is_deepspeed_zero3_enabled():
        return nullcontext()
    import deepspeed

    return deepspeed.zero.GatheredParameters(list(model.parameters()))


@dataclass(frozen=True)
class ReloadReference:
    """What a saved checkpoint must reproduce: the trained model's embeddings of ``sentences``, computed on ``device``
    without autocast, from weights of ``weights_dtype`` (`trained_embeddings`)."""

    sentences: list[str]
    embeddings: np.ndarray  # (n, d) float32
    device: torch.device
    weights_dtype: torch.dtype

    def agreement(self, embeddings: np.ndarray) -> tuple[bool, str]:
        """Whether ``embeddings`` (of the reloaded checkpoint, on the same device) reproduce these, and how closely,
        in words. Float32 weights on both sides: the same arithmetic, to 1e-5. Weights trained in 16 bits (DeepSpeed
        with bf16 or fp16 keeps the model in them and saves its float32 master weights): the rounding of each weight
        to 16 bits stays, so each embedding within cosine 0.999 of the reloaded one, the tolerance of bf16 `encode`
        (docs/benchmarks.md)."""
        difference = float(np.abs(self.embeddings - embeddings).max()) if len(embeddings) else 0.0
        if self.weights_dtype == torch.float32:
            return bool(np.allclose(self.embeddings, embeddings, atol=1e-5)), f"max |difference| {difference:.1e}"
        norms = np.linalg.norm(self.embeddings, axis=1) * np.linalg.norm(embeddings, axis=1)
        cosine = float(((self.embeddings * embeddings).sum(axis=1) / np.maximum(norms, 1e-12)).min())
        closeness = f"lowest cosine {cosine:.5f}, max |difference| {difference:.1e}"
        return cosine >= 0.999, f"{closeness}, against trained weights in {self.weights_dtype}"


def trained_embeddings(model, sentences: list[str], tokenizer) -> ReloadReference:
    """The `ReloadReference` of a trained ``model`` (a sentence encoder with ``encode``): its embeddings computed on
    its own device without autocast, in float32 as sentence-transformers reloads a float32 checkpoint. Under
    DeepSpeed ZeRO-3 every process must call it (a forward pass needs every shard)."""
    parameter = next(model.parameters())
    embeddings = model.encode(sentences, tokenizer=tokenizer, bf16=False)
    return ReloadReference(list(sentences), np.asarray(embeddings), parameter.device, parameter.dtype)


def verify_reload(path: str, tokenizer, trained: ReloadReference) -> None:
    """Reload the saved checkpoint as users will, and compare its embeddings with the trained model's (``trained``,
    `trained_embeddings`), on the device they were computed on and without autocast, so that only the saved weights
    can differ (`ReloadReference.agreement`): `ContrastiveModel.from_pretrained`, and `SentenceTransformer` without
    remote code when the checkpoint carries sentence-transformers modules."""
    from ..models.modeling_contrastive import ContrastiveModel
    from ..models.sentence_transformers_files import sentence_transformers_unsupported_reason

    # Load whole in this one process: after a DeepSpeed ZeRO-3 run, transformers would otherwise shard the reloaded
    # model across processes (zero.Init), a collective the other processes do not join.
    unset_hf_deepspeed_config()
    sentences = trained.sentences
    model = ContrastiveModel.from_pretrained(path).to(trained.device)
    reloaded = {"ContrastiveModel.from_pretrained": model.encode(sentences, tokenizer=tokenizer, bf16=False)}
    expressible = sentence_transformers_unsupported_reason(model) is None
    del model  # on the training device beside the trained model: one reloaded model there at a time
    if expressible and os.path.isfile(os.path.join(path, "modules.json")):
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError:  # not a requirement of this package
            print("sentence-transformers is not installed: its reload of the checkpoint was not checked.")
        else:
            reloaded["SentenceTransformer"] = SentenceTransformer(path, device=str(trained.device)).encode(sentences)
    for loader, embeddings in reloaded.items():
        agrees, closeness = trained.agreement(np.asarray(embeddings))
        if not agrees:
            raise RuntimeError(f"{loader}({path!r}) does not reproduce the trained embeddings ({closeness}).")
        print(f"{loader} reload of {path} on {trained.device} gives the trained embeddings ({closeness}).")


def loading_instructions(path: str, dual_encoder: bool = False) -> str:
    """The lines a script prints at the end: how to load and use the checkpoint it saved in ``path`` (a
    `DualEncoderModel`'s with ``dual_encoder``: queries and documents through their own towers)."""
    if dual_encoder:
        return (
            f"\nSaved to {path}. Load it with sentence-transformers (no remote code; each tower is a route of its "
            "Router):\n\n"
            "    from sentence_transformers import SentenceTransformer\n"
            f"    model = SentenceTransformer({path!r})\n"
            "    questions = model.encode_query(['who wrote hamlet?'])\n"
            "    passages = model.encode_document(['Hamlet is a tragedy by Shakespeare.'])\n"
            "    scores = model.similarity(questions, passages)\n\n"
            "or with contrastive_hf (the whole model, e.g. to continue training):\n\n"
            "    from contrastive_hf import DualEncoderModel\n"
            f"    model = DualEncoderModel.from_pretrained({path!r})\n"
            "    questions = model.encode_query(['who wrote hamlet?'])\n"
        )
    return (
        f"\nSaved to {path}. Load it with sentence-transformers (no remote code; the pooling and any projection are "
        "in its modules):\n\n"
        "    from sentence_transformers import SentenceTransformer\n"
        f"    model = SentenceTransformer({path!r})\n"
        "    embeddings = model.encode(['A man is playing a guitar.'])\n\n"
        "or with contrastive_hf (the whole model, heads included, e.g. to continue training):\n\n"
        "    from contrastive_hf import ContrastiveModel\n"
        f"    model = ContrastiveModel.from_pretrained({path!r})\n"
        "    embeddings = model.encode(['A man is playing a guitar.'])\n\n"
        f"AutoModel.from_pretrained({path!r}) gives the encoder alone, in its own architecture.\n"
    )
