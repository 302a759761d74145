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
import warnings
from dataclasses import dataclass, replace

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM, PreTrainedModel
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.modeling_outputs import SequenceClassifierOutput
from transformers.utils import ModelOutput

from .checkpoint_files import (
    CONTRASTIVE_CONFIG_NAME,
    LOADING_KWARGS,
    EmbeddingCheckpointMixin,
    download_kwargs,
    encoder_building_device,
    save_tokenizer,
    sentence_transformers_max_seq_length,
)
from .configuration_contrastive import CONFIG_FIELDS, ContrastiveConfig, inference_max_length
from .encoding import SentenceEmbeddingMixin
from .encoding_policy import EncodingPolicy, attention_mask_for, encode_with, encoder_inputs
from .host_data import host_array, to_device
from .objectives import cached_gradient_surrogate, in_batch_loss
from .packing import PackedSequences
from .poolers import PoolingInputs, get_pooler, uses_encoder_pooler_layer
from .sentence_transformers_files import DenseLayer, SentenceTransformersStack

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


@dataclass
class ContrastivePreTrainingOutput(ModelOutput):
    """
    Output of [`ContrastiveForPreTraining`].

    Args:
        loss (`torch.FloatTensor` of shape `()`, *optional*):
            mlm_weight * mlm_loss + cl_weight * cl_loss.
        cl_loss (`torch.FloatTensor` of shape `()`, *optional*):
            The contrastive loss (NT-Xent or InfoNCE).
        mlm_loss (`torch.FloatTensor` of shape `()`, *optional*):
            The masked-language-modelling loss on the MLM copy of the batch.
        embeddings (`torch.FloatTensor` of shape `(batch_size, num_views, projection_dim)`):
            The projected embeddings of every view, on which the contrastive loss is computed (None when
            ``cl_weight`` is 0 and the losses were computed: MLM alone encodes no view).
        negatives_per_query (`torch.FloatTensor` of shape `()`, *optional*):
            How many negatives each query was contrasted with, on average (after leaving out duplicates).
    """

    loss: torch.FloatTensor | None = None
    cl_loss: torch.FloatTensor | None = None
    mlm_loss: torch.FloatTensor | None = None
    embeddings: torch.FloatTensor | None = None
    negatives_per_query: torch.FloatTensor | None = None


class SentencePooler(nn.Module):
    """Turns an encoder's token representations into one vector per sentence, as the registered pooler named
    ``pooler_type`` computes it (`poolers.py`: SimCSE's pooler types and any registered since).

    The attention mask it is given says which tokens are pooled: ``mean`` and ``max`` reduce over them, and ``cls`` /
    ``cls_before_pooler`` read the first of them, as sentence-transformers' ``Pooling`` does: the [CLS] token (after
    the padding of a left-padded row), or with a prompt left out of the pooling (``include_prompt=False``,
    `encoding.mask_prompt_tokens`) the sentence's first token after the prompt, the token sentence-transformers pools
    from the same checkpoint.
    """

    def __init__(self, pooler_type: str):
        super().__init__()
        self.pooler_type = pooler_type  # its spec (a ValueError naming the registered ones) is looked up when pooling
        self.needs_hidden_states = get_pooler(pooler_type).needs_hidden_states  # read by the encoding paths

    @torch.compiler.disable  # a packed batch's pooling reads its host data: run as written under torch.compile
    def forward(
        self,
        encoder_outputs: ModelOutput,
        attention_mask: torch.Tensor | PackedSequences,
        encoder_pooler: nn.Module | None = None,
    ) -> torch.Tensor:
        """``(B, h)`` sentence vectors from a padded batch's ``(B, L, h)`` token states and ``(B, L)`` mask of the
        pooled tokens, or from a packed batch's ``(1, T, h)`` states and its `PackedSequences` (the sentence
        boundaries). ``encoder_pooler``: the encoder's pooler layer (BERT's dense + tanh over its input's first
        position), which ``cls`` applies to the first pooled token; without it ``cls`` returns the encoder's own
        ``pooler_output``."""
        if isinstance(attention_mask, PackedSequences):
            packed = attention_mask
            inputs = PoolingInputs(
                encoder_outputs,
                tokens=lambda states: states[0],  # (1, T, h) -> (T, h)
                first=packed.first_tokens,
                mean=packed.segment_mean,
                maximum=packed.segment_max,
                encoder_pooler=encoder_pooler,
            )
        else:
            inputs = PoolingInputs(
                encoder_outputs,
                tokens=lambda states: states,  # (B, L, h)
                first=lambda states: first_pooled_tokens(states, attention_mask),
                mean=lambda states: masked_mean(states, attention_mask),
                maximum=lambda states: masked_max(states, attention_mask),
                encoder_pooler=encoder_pooler,
            )
        return get_pooler(self.pooler_type).pool(inputs)


def first_pooled_tokens(token_states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The state of each sentence's first token that ``attention_mask`` keeps: ``(B, L, h), (B, L) -> (B, h)`` (the
    first position of a row that keeps none)."""
    first = attention_mask.to(torch.int).argmax(dim=1)  # (B,) argmax returns the first of equal maxima
    return token_states[torch.arange(token_states.shape[0], device=token_states.device), first]


def masked_mean(token_states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Mean over the tokens that ``attention_mask`` keeps: ``(B, L, h), (B, L) -> (B, h)``."""
    mask = attention_mask.unsqueeze(-1).to(token_states.dtype)  # (B, L, 1)
    return (token_states * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)


def masked_max(token_states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Max over the tokens that ``attention_mask`` keeps: ``(B, L, h), (B, L) -> (B, h)``."""
    padding = ~attention_mask.bool().unsqueeze(-1)  # (B, L, 1)
    return token_states.masked_fill(padding, torch.finfo(token_states.dtype).min).max(dim=1).values


class ProjectionHead(nn.Module):
    """The projection g(.) between the pooled vector and the contrastive loss (SimCLR; SimCSE's MLP)."""

    def __init__(self, config: ContrastiveConfig):
        super().__init__()
        hidden_size = config.encoder.hidden_size
        output_size = config.projection_dim or hidden_size
        if config.projection_type == "none":
            sizes = []
        elif config.projection_type == "linear":
            sizes = [hidden_size, output_size]
        else:
            inner = config.projection_hidden_size or hidden_size
            sizes = [hidden_size] + [inner] * (config.projection_layers - 1) + [output_size]
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:], strict=True))
        self.activation = ACT2FN[config.projection_activation] if config.projection_type == "mlp" else None
        self.output_activation = config.projection_type == "mlp" and config.projection_output_activation

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        for index, layer in enumerate(self.layers):
            pooled = layer(pooled)
            is_last = index == len(self.layers) - 1
            if self.activation is not None and (not is_last or self.output_activation):
                pooled = self.activation(pooled)
        return pooled


class MaskedLMHead(nn.Module):
    """BERT-style MLM head: dense -> activation -> LayerNorm -> vocabulary projection (+ bias).

    The vocabulary projection reuses the encoder's input embedding matrix when the encoder ties them
    (``tie_word_embeddings``, true for BERT, RoBERTa, DistilBERT...), so no weight is stored twice.
    """

    def __init__(self, encoder_config, embedding_size: int, tied: bool):
        super().__init__()
        activation = getattr(encoder_config, "hidden_act", None) or getattr(encoder_config, "activation", "gelu")
        self.dense = nn.Linear(encoder_config.hidden_size, embedding_size)
        self.activation = ACT2FN[activation]
        self.layer_norm = nn.LayerNorm(embedding_size, eps=getattr(encoder_config, "layer_norm_eps", 1e-12))
        self.bias = nn.Parameter(torch.zeros(encoder_config.vocab_size))
        self.decoder_weight = None if tied else nn.Parameter(torch.empty(encoder_config.vocab_size, embedding_size))

    def forward(self, hidden: torch.Tensor, input_embeddings: torch.Tensor) -> torch.Tensor:
        hidden = self.layer_norm(self.activation(self.dense(hidden)))
        weight = input_embeddings if self.decoder_weight is None else self.decoder_weight
        return F.linear(hidden, weight, self.bias)  # (..., vocab)


def build_encoder(encoder_config, with_pooler: bool, pretrained: str | os.PathLike | None = None, **load_kwargs):
    """An AutoModel encoder from a config (or a pretrained path), whole: with its pooler layer (BERT's dense + tanh
    over [CLS]) when its architecture has one.

    When the pooler layer is not used (any ``pooler_type`` but ``cls``) it is frozen: DistributedDataParallel
    rejects trainable parameters that get no gradient, and a frozen layer keeps its pretrained weights, so the saved
    encoder is the architecture's whole checkpoint (it loads in `AutoModel` or sentence-transformers without a
    "missing" or "unexpected" pooler report).
    """
    if pretrained is not None:
        encoder = AutoModel.from_pretrained(pretrained, config=encoder_config, **load_kwargs)
    else:
        with encoder_building_device():  # the meta device when a pretrained encoder replaces it (`assemble`)
            encoder = AutoModel.from_config(encoder_config)
    pooler = getattr(encoder, "pooler", None)
    if with_pooler and not isinstance(getattr(pooler, "dense", None), nn.Linear):
        # `SentencePooler` applies the layer to the first pooled token (after a left-out prompt), and the saved
        # sentence-transformers Dense module holds its dense weights: both need BERT's form, dense + tanh over the
        # first position of its input (ALBERT's bare Linear is applied inside AlbertModel's forward).
        what = "does not have" if pooler is None else f"has in another form ({type(pooler).__name__})"
        raise ValueError(
            f"pooler_type='cls' uses the encoder's pooler layer as BERT's (dense + tanh over the first token), which "
            f"{type(encoder).__name__} {what}; use pooler_type='cls_before_pooler' (the [CLS] hidden state) or "
            "'mean' instead."
        )
    if pooler is not None and not with_pooler:
        pooler.requires_grad_(False)
    return encoder


def init_weights(module: nn.Module, std: float) -> None:
    """transformers' initialisation of the layers our models add: normal(0, std) linear weights, zero biases,
    unit LayerNorms, and an MLM head's zero bias (and untied decoder weights).

    Through `transformers.initialization`, which skips tensors loaded from a checkpoint (transformers < 5.13 ran
    `_init_weights` after loading a model of a user package, and in-place ``normal_()`` overwrote the loaded heads)."""
    if isinstance(module, nn.Linear):
        init.normal_(module.weight, mean=0.0, std=std)
        if module.bias is not None:
            init.zeros_(module.bias)
    elif isinstance(module, nn.LayerNorm):
        init.ones_(module.weight)
        init.zeros_(module.bias)
    elif isinstance(module, MaskedLMHead):
        init.zeros_(module.bias)
        if module.decoder_weight is not None:
            init.normal_(module.decoder_weight, mean=0.0, std=std)


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
        return (*CONFIG_FIELDS, "num_labels", "id2label", "label2id", "problem_type")

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
        """
        loading = {name: kwargs.pop(name) for name in LOADING_KWARGS if name in kwargs}
        overrides = cls.check_config_overrides(kwargs)
        download = download_kwargs(loading)
        encoder_config = AutoConfig.from_pretrained(
            name_or_path, trust_remote_code=loading.get("trust_remote_code", False), **download
        )
        overrides.setdefault("max_seq_length", sentence_transformers_max_seq_length(name_or_path, **download))
        config = ContrastiveConfig(encoder=encoder_config, **overrides)
        model = cls.assemble(config, {"encoder": (name_or_path, "")}, loading)
        model.load_heads_from_encoder_checkpoint(name_or_path, **download)
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
        encoder_kwargs = encoder_inputs(input_ids, attention_mask, token_type_ids, wants_hidden)
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
        sub_batch_size: int | str | None = None,
        lengths=None,
    ) -> torch.Tensor:
        """The sentence vectors alone, ``(..., L) -> (..., d)``, encoded as the config's ``sub_batch_size`` and
        ``sub_batch_tokens`` say (`encoding_policy.EncodingPolicy.embed`); ``lengths`` ``(...)``: each text's real
        tokens, on the host (`host_data`). ``sub_batch_size`` is deprecated: set ``model.config.sub_batch_size``."""
        projection = self.projection if project else None
        return self._policy(sub_batch_size, "sentence_embeddings").embed(
            self.encoder, self.pooler, projection, input_ids, attention_mask, token_type_ids, lengths=lengths
        )

    def encoding_path(self, device: torch.device, legacy_device: torch.device | None = None) -> str:
        """How `sentence_embeddings` encodes a batch on ``device``: ``"packed"``, ``"sorted"`` or ``"padded"``
        (`encoding_policy.EncodingPolicy.path`). The former spelling, ``encoding_path(sub_batch_size, device)``, is
        deprecated: set ``model.config.sub_batch_size``."""
        if legacy_device is not None:
            return self._policy(device, "encoding_path").path(self.encoder, legacy_device)
        return self.encoding_policy().path(self.encoder, device)

    def token_states(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        sub_batch_size: int | str | None = None,
        lengths=None,
    ) -> tuple[torch.Tensor, object]:
        """The last layer's token states of ``(B, L)`` inputs, for a head on tokens (the MLM head), packed or in one
        padded pass as the config's ``sub_batch_size`` says: `encoding_policy.EncodingPolicy.token_states`.
        ``sub_batch_size`` is deprecated: set ``model.config.sub_batch_size``."""
        policy = self._policy(sub_batch_size, "token_states")
        return policy.token_states(self.encoder, input_ids, attention_mask, lengths)

    def _policy(self, sub_batch_size: int | str | None, method: str) -> EncodingPolicy:
        """The model's `EncodingPolicy`; for a caller of the deprecated ``sub_batch_size`` argument, a policy of that
        value for this call, with a FutureWarning (it bypassed the config's ``"auto"``)."""
        if sub_batch_size is None:
            return self.encoding_policy()
        warnings.warn(
            f"{method}(sub_batch_size=...) is deprecated and goes in 0.3: the model encodes as its config says; set "
            f"model.config.sub_batch_size = {sub_batch_size!r} instead.",
            FutureWarning,
            stacklevel=3,
        )
        return replace(self.encoding_policy(), sub_batch_size=sub_batch_size)

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


class ContrastiveForPreTraining(ContrastivePreTrainedModel):
    r"""
    CLEAR's pre-training model: a [`ContrastiveModel`] plus an MLM head, trained on

        L = mlm_weight * L_MLM + cl_weight * L_CL

    (Wu et al., 2020, "CLEAR: Contrastive Learning for Sentence Representation", §3.1-3.2). L_CL is NT-Xent over the
    two augmented views of each sentence (`contrastive_loss="nt_xent"`), or SimCSE's InfoNCE with optional hard
    negatives (`contrastive_loss="info_nce"`); L_MLM is computed on a separately masked copy of the original batch.
    """

    def __init__(self, config: ContrastiveConfig):
        super().__init__(config)
        self.contrastive = ContrastiveModel(config)
        self.config.encoder = self.contrastive.encoder.config
        self.mlm_head = self._new_mlm_head()
        self.post_init()

    def _new_mlm_head(self) -> MaskedLMHead:
        # the module's size, not its weight's shape: under ZeRO-3 the weight is an empty shard
        embedding_size = self.contrastive.get_input_embeddings().embedding_dim
        tied = getattr(self.config.encoder, "tie_word_embeddings", True)
        return MaskedLMHead(self.config.encoder, embedding_size, tied)

    def set_encoder(self, encoder: PreTrainedModel, modality: str | None = None) -> None:
        self.contrastive.set_encoder(encoder, modality)
        self.config.encoder = encoder.config

    def get_input_embeddings(self) -> nn.Module:
        return self.contrastive.get_input_embeddings()

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.contrastive.set_input_embeddings(value)

    def resize_token_embeddings(self, new_num_tokens: int, **kwargs) -> nn.Embedding:
        """Resize the encoder's vocabulary (e.g. after adding CLEAR's [DEL] token) and the MLM head with it."""
        old = self.mlm_head.bias.shape[0]
        embeddings = self.contrastive.encoder.resize_token_embeddings(new_num_tokens, **kwargs)
        new = embeddings.num_embeddings
        if new != old:
            with torch.no_grad():
                bias = torch.zeros(new, dtype=self.mlm_head.bias.dtype, device=self.mlm_head.bias.device)
                bias[: min(old, new)] = self.mlm_head.bias[: min(old, new)]
                self.mlm_head.bias = nn.Parameter(bias)
                if self.mlm_head.decoder_weight is not None:
                    weight = self.mlm_head.decoder_weight
                    fresh = weight.new_empty(new, weight.shape[1]).normal_(std=0.02)
                    fresh[: min(old, new)] = weight[: min(old, new)]
                    self.mlm_head.decoder_weight = nn.Parameter(fresh)
        return embeddings

    def load_heads_from_encoder_checkpoint(self, name_or_path: str | os.PathLike, **download) -> None:
        """The checkpoint's MLM head, when it has one (a ``*ForMaskedLM`` or ``*ForPreTraining`` checkpoint)."""
        self.load_mlm_head_from(name_or_path, **download)

    def load_mlm_head_from(self, name_or_path: str | os.PathLike, **download) -> bool:
        """Copy the MLM head of a pretrained ``*ForMaskedLM`` checkpoint into ours; returns whether it was found.

        The head is found by structure (the dense layer, LayerNorm and output bias outside the base model), which
        covers BERT, RoBERTa, DistilBERT, ALBERT and ELECTRA generators.
        """
        architectures = getattr(AutoConfig.from_pretrained(name_or_path, **download), "architectures", None) or []
        if not any(name.endswith(("ForMaskedLM", "ForPreTraining")) for name in architectures):
            logger.info(
                "%s has no MLM head (architectures %s); the MLM head starts at random.", name_or_path, architectures
            )
            return False
        source = AutoModelForMaskedLM.from_pretrained(name_or_path, **download)
        prefix = source.base_model_prefix
        head_modules = [module for name, module in source.named_modules() if name and not name.split(".")[0] == prefix]
        output = source.get_output_embeddings()
        dense = next(
            (
                m
                for m in head_modules
                if isinstance(m, nn.Linear) and m.weight.shape == self.mlm_head.dense.weight.shape
            ),
            None,
        )
        norm = next((m for m in head_modules if isinstance(m, nn.LayerNorm)), None)
        bias = output.bias if output is not None and output.bias is not None else None
        if dense is None or norm is None or bias is None or bias.shape != self.mlm_head.bias.shape:
            logger.warning("Could not map the MLM head of %s onto ours; it starts at random.", name_or_path)
            return False
        with torch.no_grad():
            self.mlm_head.dense.load_state_dict(dense.state_dict())
            self.mlm_head.layer_norm.load_state_dict(norm.state_dict())
            self.mlm_head.bias.copy_(bias)
            if self.mlm_head.decoder_weight is not None:
                self.mlm_head.decoder_weight.copy_(output.weight)
        return True

    # The batch entries `embed_views` takes, each with the batch in dim 0 (GradCache slices them into chunks).
    view_input_names = ("input_ids", "attention_mask", "token_type_ids", "prompt_lengths", "input_lengths")

    def embed_views(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        prompt_lengths=None,
        input_lengths=None,
    ) -> torch.Tensor:
        """The projected embeddings of the views, ``(B, S, L) -> (B, S, d)``, encoded as the config's
        ``sub_batch_size`` says (`encoding_policy.EncodingPolicy`).

        ``prompt_lengths`` ``(B, S)``: how many leading tokens of each view are its prompt, left out of the pooling
        (``include_prompt=False``, as `encode` leaves them out). ``input_lengths`` ``(B, S)``: each view's real
        tokens, on the host (`host_data`).
        """
        if input_ids is None or input_ids.dim() != 3:
            raise ValueError(
                "ContrastiveForPreTraining needs input_ids of shape (batch, num_views, length); build batches with "
                "contrastive_hf.ContrastiveDataCollator."
            )
        model = self.contrastive
        return model.encoding_policy().embed(
            model.encoder,
            model.pooler,
            model.projection,
            input_ids,
            attention_mask,
            token_type_ids,
            prompt_lengths,
            input_lengths,
        )

    def compute_contrastive_loss(
        self,
        embeddings: torch.Tensor,
        sentence_ids: torch.Tensor | None = None,
        extra_negatives: torch.Tensor | None = None,
        extra_negative_ids: torch.Tensor | None = None,
        gather_across_devices: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """L_CL on ``(B, S, d)`` view embeddings (S = 2: two views; more: anchor, positive, hard negatives), and the
        mean number of negatives per query (`objectives.in_batch_loss` with this model's loss settings).

        With ``gather_across_devices`` (and several processes), the views of every process are gathered with a
        differentiable all-gather: this process's views are scored against the global batch, and the mean of the
        per-process losses (which DDP/DeepSpeed's gradient averaging takes) is the global batch's loss, exactly.
        With ``sentence_ids`` (``(B, S)``, the collators' content hashes; ``extra_negative_ids`` for the queue), a
        sentence is never a negative of an identical one.
        """
        return in_batch_loss(
            embeddings,
            loss=self.config.contrastive_loss,
            temperature=self.config.temperature,
            hard_negative_weight=self.config.hard_negative_weight,
            sentence_ids=sentence_ids,
            extra_negatives=extra_negatives,
            extra_negative_ids=extra_negative_ids,
            gather_across_devices=gather_across_devices,
            matryoshka_dims=self.config.matryoshka_dims,
            matryoshka_weights=self.config.matryoshka_weights,
        )

    def compute_mlm_loss(
        self,
        mlm_input_ids: torch.Tensor,
        mlm_attention_mask: torch.Tensor | None,
        mlm_labels: torch.Tensor,
        mlm_lengths=None,
        mlm_positions=None,
    ) -> torch.Tensor:
        """Cross-entropy of the MLM head on the masked positions only (the logits of other tokens are never built).
        A ``(batch, num_views, length)`` batch (a masked copy of each view) counts as ``batch * num_views`` rows.

        ``mlm_lengths`` (each row's real tokens) and ``mlm_positions`` (the masked tokens as flat indices into
        ``mlm_labels``), on the host (`host_data`): the collators give them, and then nothing is read back from the
        device; without them the masked positions are found on the device, and read back."""
        width = mlm_input_ids.shape[-1]
        if mlm_input_ids.dim() == 3:
            mlm_input_ids, mlm_labels = mlm_input_ids.flatten(0, 1), mlm_labels.flatten(0, 1)
            mlm_attention_mask = None if mlm_attention_mask is None else mlm_attention_mask.flatten(0, 1)
        model = self.contrastive
        device = mlm_input_ids.device
        states, packed = model.encoding_policy().token_states(
            model.encoder, mlm_input_ids, mlm_attention_mask, None if mlm_lengths is None else host_array(mlm_lengths)
        )  # (T or B * L, h)
        if mlm_positions is None:  # found on the device: a boolean mask, whose size is read back
            labels = mlm_labels.reshape(-1) if packed is None else mlm_labels.reshape(-1)[packed.flat_index]
            masked = labels != -100
            if not masked.any():
                return self._no_masked_token(states)
            logits = self.mlm_head(states[masked], self.get_input_embeddings().weight)  # (n_masked, vocab)
            return F.cross_entropy(logits.float(), labels[masked])
        positions = host_array(mlm_positions)  # (M,) flat indices into the (rows, L) labels
        if len(positions) == 0:
            return self._no_masked_token(states)
        rows, columns = np.divmod(positions, width)
        at = positions if packed is None else packed.host_starts[rows] + columns  # (M,) rows of `states`
        targets = mlm_labels.reshape(-1).index_select(0, to_device(positions, device))  # (M,)
        hidden = states.index_select(0, to_device(at, device))  # (M, h)
        logits = self.mlm_head(hidden, self.get_input_embeddings().weight)  # (M, vocab)
        return F.cross_entropy(logits.float(), targets)

    def _no_masked_token(self, states: torch.Tensor) -> torch.Tensor:
        """The MLM loss of a batch without a masked token: a zero that keeps every parameter (the head too) in the
        graph."""
        return self.mlm_head(states[:1], self.get_input_embeddings().weight).sum() * 0.0

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        mlm_input_ids: torch.Tensor | None = None,
        mlm_attention_mask: torch.Tensor | None = None,
        mlm_labels: torch.Tensor | None = None,
        prompt_lengths: torch.Tensor | None = None,
        sentence_ids: torch.Tensor | None = None,
        input_lengths=None,
        mlm_lengths=None,
        mlm_positions=None,
        return_loss: bool = True,
        gather_across_devices: bool = False,
        extra_negatives: torch.Tensor | None = None,
        extra_negative_ids: torch.Tensor | None = None,
        cached_embedding_gradients: torch.Tensor | None = None,
        mlm_loss_share: float = 1.0,
        return_dict: bool | None = None,
    ) -> ContrastivePreTrainingOutput | tuple:
        r"""
        input_ids (`torch.LongTensor` of shape `(batch_size, num_views, sequence_length)`):
            The views of each sentence: 2 (positive pairs) or 2 + k (anchor, positive, k hard negatives).
        mlm_input_ids, mlm_attention_mask, mlm_labels (`torch.LongTensor` of shape `(batch_size, mlm_length)`):
            The masked copy of the batch and its labels (-100 where nothing is predicted), for L_MLM; or of shape
            `(batch_size, num_views, mlm_length)`, a masked copy of each view (CLEAR's "Double MLM" control).
        prompt_lengths (`torch.LongTensor` of shape `(batch_size, num_views)`, *optional*):
            How many leading tokens of each view are its prompt, left out of the pooling
            (``config.include_prompt=False``, as at inference; `PairCollator` gives them).
        sentence_ids (`torch.LongTensor` of shape `(batch_size, num_views)`, *optional*):
            An id of each view's sentence (the collators give content hashes): views of identical sentences are
            never made each other's negatives.
        input_lengths, mlm_lengths, mlm_positions (numpy arrays, *optional*):
            What the collators know on the host: the real tokens of each view and of each MLM row, and the masked
            tokens as flat indices into `mlm_labels` (`host_data`). With them a training step reads nothing back
            from the device; without them the same values are read from the tensors.
        return_loss (`bool`, defaults to `True`):
            Compute the losses; otherwise only the view embeddings are returned. With ``cl_weight`` 0 the losses
            need no view, so none is encoded and ``embeddings`` is None.
        gather_across_devices (`bool`, defaults to `False`):
            Use the views of every process as negatives (see `compute_contrastive_loss`).
        extra_negatives (`torch.FloatTensor` of shape `(num_negatives, projection_dim)`, *optional*):
            More negatives for every anchor, e.g. a pre-batch queue of earlier batches' keys (InfoNCE only), and
            ``extra_negative_ids`` their sentence ids.
        cached_embedding_gradients (`torch.FloatTensor` of shape `(batch_size, num_views, d)`, *optional*):
            GradCache's second pass (`ContrastiveTrainer` with ``grad_cache_chunk_size``): the gradient of L_CL with
            respect to these embeddings, computed on the whole batch. The returned ``loss`` is then
            ``cl_weight * sum(embeddings * gradients) + mlm_weight * mlm_loss_share * L_MLM``, whose parameter
            gradient is this chunk's share of the full batch's; ``mlm_loss_share`` is the chunk's fraction of the
            batch's masked tokens.
        """
        embeddings = None
        if not return_loss or self.config.cl_weight > 0 or cached_embedding_gradients is not None:
            # MLM alone (cl_weight 0) uses no view: it does not pay for their forward pass (`embeddings` is None)
            embeddings = self.embed_views(input_ids, attention_mask, token_type_ids, prompt_lengths, input_lengths)
        cl_loss = mlm_loss = loss = negatives_per_query = None
        if return_loss:
            loss = 0.0
            if cached_embedding_gradients is not None:
                loss = loss + self.config.cl_weight * cached_gradient_surrogate(embeddings, cached_embedding_gradients)
            elif self.config.cl_weight > 0:
                cl_loss, negatives_per_query = self.compute_contrastive_loss(
                    embeddings, sentence_ids, extra_negatives, extra_negative_ids, gather_across_devices
                )
                loss = loss + self.config.cl_weight * cl_loss
            if self.config.mlm_weight > 0 and mlm_labels is not None:
                mlm_loss = self.compute_mlm_loss(
                    mlm_input_ids, mlm_attention_mask, mlm_labels, mlm_lengths, mlm_positions
                )
                mlm_loss = mlm_loss * mlm_loss_share
                loss = loss + self.config.mlm_weight * mlm_loss
            if not torch.is_tensor(loss):
                raise ValueError("mlm_weight > 0 needs mlm_labels, and cl_weight is 0: there is no loss to compute.")
        output = ContrastivePreTrainingOutput(
            loss=loss,
            cl_loss=cl_loss,
            mlm_loss=mlm_loss,
            embeddings=embeddings,
            negatives_per_query=negatives_per_query,
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
    "ContrastiveModel",
    "ContrastiveForPreTraining",
    "ContrastiveForSequenceClassification",
    "ContrastivePreTrainedModel",
    "ContrastiveModelOutput",
    "ContrastivePreTrainingOutput",
    "SentencePooler",
    "ProjectionHead",
    "MaskedLMHead",
]
