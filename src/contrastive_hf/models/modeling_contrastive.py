"""Contrastive sentence encoders: any transformers encoder + a pooler + a projection head, with an optional MLM head.

A saved checkpoint is its encoder in the encoder's own architecture, with the sentence-transformers files and our
configuration and heads beside it (`checkpoint_files`): ``SentenceTransformer(path)`` loads it without remote code,
``AutoModel.from_pretrained(path)`` gives the encoder, and `ContrastiveModel.from_pretrained(path)` the whole model.
The files of this folder import only torch, transformers and each other (relative imports), as the checkpoints of
contrastive_hf 0.1 shipped them for ``trust_remote_code``.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoConfig, PreTrainedModel
from transformers.modeling_outputs import SequenceClassifierOutput
from transformers.utils import ModelOutput

from .checkpoint_contents import what_the_path_holds
from .checkpoint_files import EmbeddingCheckpointMixin, save_tokenizer
from .checkpoint_names import CONTRASTIVE_CONFIG_NAME, LOADING_KWARGS, download_kwargs, in_subfolder
from .configuration_contrastive import CONFIG_FIELDS, HEAD_FIELDS, ContrastiveConfig, inference_max_length
from .encoding import SentenceEmbeddingMixin
from .encoding_policy import attention_mask_for, encode_with, encoder_inputs
from .heads import ProjectionHead, build_encoder, init_weights
from .host_data import host_array
from .poolers import SentencePooler, get_pooler, uses_encoder_pooler_layer
from .sentence_transformers_files import DenseLayer, SentenceTransformersStack
from .sentence_transformers_folders import (
    DenseModule,
    FolderSettings,
    SentenceTransformersFolder,
    read_sentence_transformers_folder,
)

logger = logging.getLogger(__name__)


@dataclass
class ContrastiveModelOutput(ModelOutput):
    """
    Output of [`ContrastiveModel`].

    Args:
        last_hidden_state (`torch.FloatTensor` of shape `(batch_size, sequence_length, hidden_size)`):
            Token representations of the encoder's last layer (`(batch_size, num_views, sequence_length,
            hidden_size)` for 3-D inputs).
        pooler_output (`torch.FloatTensor` of shape `(batch_size, embedding_size)`):
            The sentence embedding to use (`(batch_size, num_views, embedding_size)` for 3-D inputs).
        hidden_states (`tuple(torch.FloatTensor)`, *optional*):
            Every layer's token representations, when `output_hidden_states=True`.
        attentions (`tuple(torch.FloatTensor)`, *optional*):
            Attention weights, when `output_attentions=True`.
    """

    last_hidden_state: torch.FloatTensor | None = None
    pooler_output: torch.FloatTensor | None = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None
    attentions: tuple[torch.FloatTensor, ...] | None = None


def dense_stages(model: ContrastiveModel, prefix: str = "") -> list[DenseLayer]:
    """The linear layers (and their activations) between the pooled token state and the inference embedding: BERT's
    pooler layer for ``cls``, then the projection when it is kept at inference; named as in the state dict of the
    model that holds ``model`` under ``prefix`` (``"contrastive."`` for a `ContrastiveForPreTraining`)."""
    config = model.config
    stages = []
    if get_pooler(config.pooler_type).uses_encoder_pooler_layer:
        stages.append(DenseLayer(f"{prefix}encoder.pooler.dense", "tanh"))
    if config.projection_at_inference and config.projection_type != "none":
        count = len(model.projection.layers)
        for index in range(count):
            is_last = index == count - 1
            activated = config.projection_type == "mlp" and (not is_last or config.projection_output_activation)
            activation = config.projection_activation if activated else None
            stages.append(DenseLayer(f"{prefix}projection.layers.{index}", activation))
    return stages


# The settings of the projection head: a folder's Dense layers set them together (`folder_settings`).
PROJECTION_FIELDS = tuple(name for name in HEAD_FIELDS if name.startswith("projection_"))


def projection_settings(dense: list[DenseModule]) -> dict | str:
    """The projection settings computing a sentence-transformers folder's Dense modules after the pooling (the
    inverse of `dense_stages`), or why none do. One Dense layer is a ``linear`` projection (identity) or a 1-layer
    ``mlp`` with its activation after it (SimCSE's head: linear + tanh); several are an ``mlp`` with one activation
    between each two, one inner size, and the last layer's activation that one or none."""
    if not dense:
        return {"projection_at_inference": False}
    first, last = dense[0], dense[-1]
    settings = {"projection_at_inference": True, "projection_dim": last.out_features}
    if len(dense) == 1 and first.activation is None:
        return {**settings, "projection_type": "linear"}
    between = {module.activation for module in dense[:-1]} or {first.activation}
    inner = {module.out_features for module in dense[:-1]}
    if len(between) != 1 or None in between or last.activation not in (None, *between) or len(inner) > 1:
        layers = ", ".join(f"{module.folder!r} ({module.activation or 'identity'})" for module in dense)
        return (
            f"Dense modules {layers} are no projection of ours (one activation between each two layers, one inner "
            "size, the last one's activation that one or none)"
        )
    settings.update(
        projection_type="mlp",
        projection_layers=len(dense),
        projection_activation=between.pop(),
        projection_output_activation=last.activation is not None,
    )
    if inner:
        settings["projection_hidden_size"] = inner.pop()
    return settings


def folder_settings(folder: SentenceTransformersFolder) -> FolderSettings:
    """`ContrastiveConfig`'s values for a sentence-transformers folder of one route (the inverse of
    `ContrastivePreTrainedModel.sentence_transformers_stacks`): its pooler, ``include_prompt``, projection (kept at
    inference) from its Dense modules, ``normalize_embeddings``, ``max_seq_length``, prompts and similarity."""
    settings = FolderSettings(folder, groups=(PROJECTION_FIELDS,))
    settings.refusals.update(folder.refusals)
    route = folder.routes[""]
    settings.refusals.update(
        {"projection_type" if name == "dense" else name: why for name, why in route.refusals.items()}
    )
    if route.pooler_type is not None:
        settings.set("pooler_type", route.pooler_type, route.modules["pooler_type"])
    if "include_prompt" in route.modules:
        settings.set("include_prompt", route.include_prompt, route.modules["include_prompt"])
    settings.set("normalize_embeddings", route.normalize, route.modules.get("normalize", "modules.json"))
    if route.max_seq_length is not None:
        settings.set("max_seq_length", route.max_seq_length, route.modules["max_seq_length"])
    projection = projection_settings(route.dense)
    dense_folders = ", ".join(module.folder for module in route.dense) or "modules.json"
    if isinstance(projection, str):
        settings.refusals.setdefault("projection_type", projection)
    else:
        for name, value in projection.items():
            settings.set(name, value, dense_folders)
    settings.set_model_settings()
    return settings


def replaced_folder_settings(config: ContrastiveConfig) -> dict[str, tuple[Any, Any]]:
    """Where a model built on a sentence-transformers folder embeds otherwise than the folder, the settings given at
    loading having replaced the folder's (`FolderSettings.merged`): ``{field: (the folder's value, the model's)}``.
    {} for a model of another origin (a checkpoint of ours, a plain encoder), or one built from a folder with
    something no model of ours computes. Reads the files of ``config._name_or_path`` only."""
    path = getattr(config, "_name_or_path", "")
    if not path or what_the_path_holds(path)[0] != "sentence_transformers":
        return {}
    folder = read_sentence_transformers_folder(path)
    if folder is None or folder.is_router:
        return {}
    settings = folder_settings(folder)
    if settings.refusals:
        return {}
    return {
        name: (value, getattr(config, name))
        for name, value in settings.values.items()
        if name != "similarity" and getattr(config, name) != value  # similarity: no embedding changes with it
    }


class ContrastivePreTrainedModel(EmbeddingCheckpointMixin, SentenceEmbeddingMixin, PreTrainedModel):
    """Base class: configuration, weight initialisation, the checkpoint layout (`checkpoint_files`) and `encode`."""

    config_class = ContrastiveConfig
    base_model_prefix = "contrastive"
    supports_gradient_checkpointing = True
    _supports_sdpa = True
    checkpoint_config_name = CONTRASTIVE_CONFIG_NAME
    # Whether the checkpoint records the labels (id2label, problem_type) even before a problem type is set: a
    # classifier's does (`ContrastiveForSequenceClassification`).
    saves_labels = False

    @torch.no_grad()
    def _init_weights(self, module):
        init_weights(module, getattr(self.config.encoder, "initializer_range", 0.02))

    def sentence_model(self) -> ContrastiveModel:
        """The `ContrastiveModel` (encoder, pooler, projection) this model is built around: itself, or the one it
        wraps (``self.contrastive``)."""
        return getattr(self, "contrastive", self)

    def get_encoder_model(self) -> PreTrainedModel:
        """The wrapped transformers encoder (BertModel, RobertaModel, ...)."""
        return self.sentence_model().encoder

    def export_encoder(self, save_directory: str | os.PathLike, tokenizer=None) -> None:
        """Save the encoder alone as a plain transformers checkpoint (e.g. a `BertModel`). A saved contrastive_hf
        checkpoint already is one at its root (``AutoModel.from_pretrained(path)``); this writes the encoder without
        our files. Pool its token states as ``pooler_type`` says (for ``cls``, its ``pooler_output``)."""
        self.get_encoder_model().save_pretrained(save_directory)
        if tokenizer is not None:
            save_tokenizer(tokenizer, save_directory)

    def load_heads_from_encoder_checkpoint(self, name_or_path: str | os.PathLike, **download) -> None:
        """After `from_encoder_pretrained` wrapped the encoder of ``name_or_path``: take the heads of this model that
        the checkpoint holds. None here; `ContrastiveForPreTraining` takes its MLM head."""

    # The checkpoint layout (checkpoint_files.EmbeddingCheckpointMixin) ----------------------------------------

    def sentence_model_prefix(self) -> str:
        """Where `sentence_model` lies in this model's state dict: ``""`` (itself) or ``"contrastive."``."""
        return "" if self.sentence_model() is self else f"{self.base_model_prefix}."

    def checkpoint_encoders(self) -> dict:
        return {"encoder": ("", f"{self.sentence_model_prefix()}encoder.", self.get_encoder_model())}

    def checkpoint_config(self) -> dict:
        saved = {name: getattr(self.config, name) for name in CONFIG_FIELDS}
        if self.config.problem_type is not None or self.saves_labels:
            saved.update(
                id2label={str(key): value for key, value in self.config.id2label.items()},
                problem_type=self.config.problem_type,
            )
        return saved

    @classmethod
    def config_field_names(cls) -> tuple[str, ...]:
        # bidirectional_attention, encoder_dropout: settings of the encoder's config (its is_causal, its dropout
        # probabilities), given like fields
        return (
            *CONFIG_FIELDS, "num_labels", "id2label", "label2id", "problem_type", "bidirectional_attention",
            "encoder_dropout",
        )  # fmt: skip

    @classmethod
    def saved_encoder_folders(cls, saved: dict) -> dict[str, str]:
        return {"encoder": ""}

    @classmethod
    def config_from_checkpoint(cls, saved: dict, encoder_configs: dict, overrides: dict) -> ContrastiveConfig:
        values = {name: saved[name] for name in cls.config_field_names() if name in saved}
        if "id2label" in values:
            values["id2label"] = {int(key): value for key, value in values["id2label"].items()}
        if "num_labels" in overrides:  # a new classification head: its labels replace the saved ones
            values.pop("id2label", None)
        return ContrastiveConfig(encoder=encoder_configs["encoder"], **{**values, **overrides})

    def load_pretrained_encoder(self, name: str, source: str | os.PathLike, **loading) -> PreTrainedModel:
        config = self.config.encoder
        return build_encoder(config, uses_encoder_pooler_layer(self.config), pretrained=source, **loading)

    def install_encoders(self, encoders: dict[str, PreTrainedModel]) -> None:
        self.sentence_model().set_encoder(encoders["encoder"])
        self.config.encoder = encoders["encoder"].config

    def encoder_configs(self) -> list:
        return [self.config.encoder]

    def sentence_transformers_stacks(self) -> dict[str, SentenceTransformersStack]:
        model = self.sentence_model()
        return {
            "": SentenceTransformersStack(
                pooler_type=self.config.pooler_type,
                hidden_size=self.config.encoder.hidden_size,
                max_seq_length=inference_max_length(self.config, self.config.encoder),
                dense=dense_stages(model, self.sentence_model_prefix()),
                include_prompt=self.config.include_prompt,
                normalize=self.config.normalize_embeddings,
            )
        }

    def embed_tokens(
        self,
        input_ids,
        attention_mask=None,
        token_type_ids=None,
        task=None,
        prompt_length=None,
        return_token_states=False,
    ):
        """The inference embeddings ``(B, d)`` of a padded batch: encoder, pooler, and the projection when kept at
        inference (what ``SentenceTransformer(path)`` computes from the saved checkpoint), encoded as the config's
        ``sub_batch_size`` says (packed where the encoder can be); with the token states, in one padded pass."""
        model = self.sentence_model()
        projection = model.projection if self.config.projection_at_inference else None
        if return_token_states:
            return encode_with(
                model.encoder, model.pooler, projection, input_ids, attention_mask, token_type_ids, prompt_length,
                return_token_states=True,
            )  # fmt: skip
        return self.encoding_policy().embed(
            model.encoder, model.pooler, projection, input_ids, attention_mask, token_type_ids, prompt_length
        )

    # Building ------------------------------------------------------------------------------------------------

    @classmethod
    def from_config(cls, config, **config_overrides):
        """A randomly initialised model, as CLEAR pre-trains from scratch.

        ``config`` is a [`ContrastiveConfig`], or any encoder config (`BertConfig(...)`, ...) which is wrapped with
        ``config_overrides`` (``pooler_type="mean"``...).
        """
        if not isinstance(config, ContrastiveConfig):
            config = ContrastiveConfig(encoder=config, **config_overrides)
        elif config_overrides:
            config = ContrastiveConfig(**{**config.to_dict(), **config_overrides})
        return cls._from_config(config)

    @classmethod
    def from_encoder_pretrained(cls, name_or_path: str | os.PathLike, **kwargs):
        """Wrap a pretrained encoder checkpoint (a local folder or a Hub id).

        Keyword arguments are transformers' loading arguments (``dtype``, ``revision``, ``token``, ``cache_dir``,
        ``attn_implementation``, ``local_files_only``, ``subfolder``, ``trust_remote_code``), passed on to the
        encoder's ``from_pretrained``, or [`ContrastiveConfig`] fields (``pooler_type="mean"``, ``temperature=0.05``
        ...); anything else is an error listing both. For [`ContrastiveForPreTraining`], the checkpoint's own MLM
        head is kept when it has one (a ``*ForMaskedLM`` or ``*ForPreTraining`` checkpoint); otherwise the MLM head
        starts from random weights.

        A sentence-transformers model (a ``modules.json``: all-MiniLM-L6-v2, our own checkpoints) loads as the model
        its modules compute, with the embeddings ``SentenceTransformer(path).encode`` gives: its pooler, its Dense
        layers as the projection kept at inference, ``Normalize`` as ``normalize_embeddings``, its prompts,
        ``include_prompt``, ``max_seq_length`` and similarity (`folder_settings`). A field given here replaces what
        the folder says, with a warning naming it; a module with no equivalent (a ``weightedmean`` Pooling, a module
        class of custom code, a Router's two towers) is refused, naming it.
        """
        loading = {name: kwargs.pop(name) for name in LOADING_KWARGS if name in kwargs}
        given = cls.check_config_overrides(kwargs)
        download = download_kwargs(loading)
        folder = read_sentence_transformers_folder(name_or_path, **download)
        settings, overrides, encoder_folder = None, dict(given), ""
        if folder is not None:
            if folder.is_router:
                raise folder.refusal(
                    "its modules.json runs a Router with a query route and a document route (two towers)",
                    "Load it with contrastive_hf.DualEncoderModel.from_pretrained.",
                )
            settings = folder_settings(folder)
            overrides = settings.merged(given)
            encoder_folder = folder.routes[""].encoder_folder
        encoder_download = in_subfolder(download, encoder_folder)
        encoder_config = AutoConfig.from_pretrained(
            name_or_path, trust_remote_code=loading.get("trust_remote_code", False), **encoder_download
        )
        dense = folder.routes[""].dense if settings is not None and settings.kept(given, "projection_type") else []
        if dense and dense[0].in_features != encoder_config.hidden_size:
            raise folder.inconsistent(
                f"its Dense module {dense[0].folder!r} reads {dense[0].in_features} features, but the encoder gives "
                f"{encoder_config.hidden_size}"
            )
        config = ContrastiveConfig(encoder=encoder_config, **overrides)
        model = cls.assemble(config, {"encoder": (name_or_path, encoder_folder)}, loading)
        if dense:  # the folder's projection, kept at inference
            layers = model.sentence_model().projection.layers
            with torch.no_grad():
                for layer, module in zip(layers, dense, strict=True):
                    weights = folder.dense_weights(module)
                    layer.weight.copy_(weights["weight"])
                    layer.bias.copy_(weights["bias"])
        model.load_heads_from_encoder_checkpoint(name_or_path, **encoder_download)
        model.config._name_or_path = str(name_or_path)  # in memory only: never written to a saved file
        return model


class ContrastiveModel(ContrastivePreTrainedModel):
    r"""
    A sentence encoder: encoder -> pooler -> projection head.

    `pooler_output` is the sentence embedding. The projection is applied during training, and at inference only when
    `config.projection_at_inference` is true (SimCSE keeps its MLP for training only).

    Example:

    ```python
    >>> from contrastive_hf import ContrastiveModel
    >>> model = ContrastiveModel.from_encoder_pretrained("bert-base-uncased", pooler_type="cls")
    >>> embeddings = model.encode(["A man plays a guitar.", "Someone is playing music."], tokenizer=tokenizer)
    ```
    """

    # A ContrastiveForPreTraining checkpoint also holds the MLM head, which the encoder alone does not use.
    _keys_to_ignore_on_load_unexpected = [r"^mlm_head\."]

    def __init__(self, config: ContrastiveConfig):
        super().__init__(config)
        self.encoder = build_encoder(config.encoder, uses_encoder_pooler_layer(config))
        self.config.encoder = self.encoder.config  # one config object, so that resizing updates the saved one
        self.pooler = SentencePooler(config.pooler_type)
        self.projection = ProjectionHead(config)
        self.post_init()

    def set_encoder(self, encoder: PreTrainedModel, modality: str | None = None) -> None:
        """Replace the encoder (e.g. with a pretrained one); ``modality`` is transformers' argument, text only."""
        if modality is not None:
            raise ValueError(f"A ContrastiveModel has a text encoder only; got modality={modality!r}.")
        self.encoder = encoder
        self.config.encoder = encoder.config

    def get_input_embeddings(self) -> nn.Module:
        return self.encoder.get_input_embeddings()

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.encoder.set_input_embeddings(value)

    def embed(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        project: bool = True,
        output_hidden_states: bool | None = None,
        output_attentions: bool | None = None,
        lengths=None,
    ) -> ContrastiveModelOutput:
        """Encode ``(B, L)`` or ``(B, S, L)`` inputs into ``(B, d)`` or ``(B, S, d)`` sentence vectors; ``lengths``
        ``(B,)`` or ``(B, S)``: each text's real tokens on the host (`host_data`; `attention_mask_for`)."""
        views_shape = input_ids.shape[:-1]  # (B,) or (B, S)
        wants_hidden = bool(output_hidden_states) or self.pooler.needs_hidden_states
        encoder_kwargs = encoder_inputs(self.encoder, input_ids, attention_mask, token_type_ids, wants_hidden)
        if output_attentions:
            encoder_kwargs["output_attentions"] = True
        pooling_mask = encoder_kwargs["attention_mask"]  # (N, L)
        lengths = None if lengths is None else host_array(lengths).reshape(-1)
        encoder_kwargs["attention_mask"] = attention_mask_for(self.encoder, pooling_mask, lengths)
        outputs = self.encoder(**encoder_kwargs)
        pooled = self.pooler(outputs, pooling_mask, getattr(self.encoder, "pooler", None))
        if project:
            pooled = self.projection(pooled)
        last_hidden = outputs.last_hidden_state
        return ContrastiveModelOutput(
            last_hidden_state=last_hidden.reshape(*views_shape, *last_hidden.shape[-2:]),
            pooler_output=pooled.reshape(*views_shape, pooled.shape[-1]),
            hidden_states=outputs.hidden_states if output_hidden_states else None,
            attentions=outputs.attentions if output_attentions else None,
        )

    def sentence_embeddings(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        project: bool = True,
        lengths=None,
    ) -> torch.Tensor:
        """The sentence vectors alone, ``(..., L) -> (..., d)``, encoded as the config's ``sub_batch_size`` and
        ``sub_batch_tokens`` say (`encoding_policy.EncodingPolicy.embed`); ``lengths`` ``(...)``: each text's real
        tokens, on the host (`host_data`)."""
        projection = self.projection if project else None
        return self.encoding_policy().embed(
            self.encoder, self.pooler, projection, input_ids, attention_mask, token_type_ids, lengths=lengths
        )

    def encoding_path(self, device: torch.device) -> str:
        """How `sentence_embeddings` encodes a batch on ``device``: ``"packed"``, ``"sorted"`` or ``"padded"``
        (`encoding_policy.EncodingPolicy.path`)."""
        return self.encoding_policy().path(self.encoder, device)

    def token_states(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        lengths=None,
    ) -> tuple[torch.Tensor, object]:
        """The last layer's token states of ``(B, L)`` inputs, for a head on tokens (the MLM head), packed or in one
        padded pass as the config's ``sub_batch_size`` says: `encoding_policy.EncodingPolicy.token_states`."""
        return self.encoding_policy().token_states(self.encoder, input_ids, attention_mask, lengths)

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        output_attentions: bool | None = None,
        return_dict: bool | None = None,
    ) -> ContrastiveModelOutput | tuple:
        r"""
        input_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)` or `(batch_size, num_views, length)`):
            Token ids; a 3-D batch (several views per sentence) is encoded in one pass.
        """
        if input_ids is None:
            raise ValueError("ContrastiveModel needs input_ids.")
        output = self.embed(
            input_ids,
            attention_mask,
            token_type_ids,
            project=self.training or self.config.projection_at_inference,
            output_hidden_states=output_hidden_states,
            output_attentions=output_attentions,
        )
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        return output if return_dict else output.to_tuple()


class ContrastiveForSequenceClassification(ContrastivePreTrainedModel):
    r"""
    A contrastive encoder with a classification (or regression) layer on its sentence embedding, as CLEAR fine-tunes
    on GLUE. `AutoModelForSequenceClassification.from_pretrained(checkpoint, num_labels=...)` builds it from any
    contrastive_hf checkpoint, so existing fine-tuning scripts (run_glue.py) take our checkpoints unchanged.

    The loss follows transformers' convention: mean-squared error for `num_labels == 1` (regression), cross-entropy
    for single-label classification, binary cross-entropy for `problem_type="multi_label_classification"`.
    """

    _keys_to_ignore_on_load_unexpected = [r"^mlm_head\."]
    saves_labels = True

    def __init__(self, config: ContrastiveConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.contrastive = ContrastiveModel(config)
        self.config.encoder = self.contrastive.encoder.config
        dropout = getattr(config.encoder, "classifier_dropout", None)
        if dropout is None:
            dropout = getattr(config.encoder, "hidden_dropout_prob", 0.1)
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(config.embedding_size, config.num_labels)
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.contrastive.get_input_embeddings()

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.contrastive.set_input_embeddings(value)

    def sentence_transformers_stacks(self) -> dict:
        """None: a classifier checkpoint is not offered to sentence-transformers as a sentence encoder."""
        return {}

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        return_dict: bool | None = None,
    ) -> SequenceClassifierOutput | tuple:
        r"""
        labels (`torch.LongTensor` of shape `(batch_size,)`, *optional*):
            Class indices, or float targets when `num_labels == 1`.
        """
        embeddings = self.contrastive.embed(
            input_ids, attention_mask, token_type_ids, project=self.config.projection_at_inference
        ).pooler_output
        logits = self.classifier(self.dropout(embeddings))  # (B, num_labels)
        loss = None
        if labels is not None:
            if self.config.problem_type is None:
                if self.num_labels == 1:
                    self.config.problem_type = "regression"
                elif labels.dtype in (torch.long, torch.int):
                    self.config.problem_type = "single_label_classification"
                else:
                    self.config.problem_type = "multi_label_classification"
            if self.config.problem_type == "regression":
                loss = F.mse_loss(logits.squeeze(-1), labels.float())
            elif self.config.problem_type == "single_label_classification":
                loss = F.cross_entropy(logits, labels.view(-1))
            else:
                loss = F.binary_cross_entropy_with_logits(logits, labels.float())
        output = SequenceClassifierOutput(loss=loss, logits=logits)
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        return output if return_dict else output.to_tuple()


__all__ = [
    "folder_settings",
    "replaced_folder_settings",
    "ContrastiveModel",
    "ContrastiveForSequenceClassification",
    "ContrastivePreTrainedModel",
    "ContrastiveModelOutput",
]
