"""Contrastive sentence encoders: any transformers encoder + a pooler + a projection head, with an optional MLM head.

This file, ``configuration_contrastive.py`` and ``losses.py`` are copied into every saved checkpoint, so they import
only torch, transformers and each other (relative imports): ``AutoModel.from_pretrained(path,
trust_remote_code=True)`` then works where contrastive_hf is not installed.
"""

from __future__ import annotations

import inspect
import logging
import os
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM, AutoTokenizer, PreTrainedModel
from transformers.activations import ACT2FN
from transformers.dynamic_module_utils import custom_object_save
from transformers.modeling_outputs import SequenceClassifierOutput
from transformers.models.auto.modeling_auto import MODEL_MAPPING
from transformers.utils import ModelOutput

from .configuration_contrastive import ContrastiveConfig, parse_sub_batch_size
from .objectives import cached_gradient_surrogate, in_batch_loss
from .packing import (
    PackedSequences,
    can_pack,
    length_sorted_groups,
    packed_encoder_forward,
    packing_unsupported_reason,
)
from .sentence_transformers_files import write_sentence_transformers_files

logger = logging.getLogger(__name__)

# How `ContrastiveModel.encoding_path`'s choices are logged.
ENCODING_PATH_WORDS = {
    "packed": "packed batches (one sequence of real tokens, attention inside each sentence)",
    "sorted": "length-sorted groups, each padded to its own longest",
    "padded": "one pass padded to the batch's longest",
}

# The Auto classes a saved checkpoint maps to the shipped code (config.json's `auto_map`).
AUTO_MAP = {
    "AutoConfig": "configuration_contrastive.ContrastiveConfig",
    "AutoModel": "modeling_contrastive.ContrastiveModel",
    "AutoModelForPreTraining": "modeling_contrastive.ContrastiveForPreTraining",
    "AutoModelForSequenceClassification": "modeling_contrastive.ContrastiveForSequenceClassification",
}


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
            The projected embeddings of every view, on which the contrastive loss is computed.
        negatives_per_query (`torch.FloatTensor` of shape `()`, *optional*):
            How many negatives each query was contrasted with, on average (after leaving out duplicates).
    """

    loss: torch.FloatTensor | None = None
    cl_loss: torch.FloatTensor | None = None
    mlm_loss: torch.FloatTensor | None = None
    embeddings: torch.FloatTensor | None = None
    negatives_per_query: torch.FloatTensor | None = None


class SentencePooler(nn.Module):
    """Turns an encoder's token representations into one vector per sentence (SimCSE's pooler types)."""

    def __init__(self, pooler_type: str):
        super().__init__()
        self.pooler_type = pooler_type

    @property
    def needs_hidden_states(self) -> bool:
        return self.pooler_type in ("avg_first_last", "avg_top2")

    def forward(self, encoder_outputs: ModelOutput, attention_mask: torch.Tensor | PackedSequences) -> torch.Tensor:
        """``(B, h)`` sentence vectors from a padded batch's ``(B, L, h)`` token states and ``(B, L)`` attention mask,
        or from a packed batch's ``(1, T, h)`` states and its `PackedSequences` (the sentence boundaries)."""
        if self.pooler_type == "cls":
            return encoder_outputs.pooler_output
        if isinstance(attention_mask, PackedSequences):
            packed = attention_mask
            tokens = lambda states: states[0]  # (1, T, h) -> (T, h)
            first, mean, maximum = packed.first_tokens, packed.segment_mean, packed.segment_max
        else:
            tokens = lambda states: states  # (B, L, h)
            first = lambda states: states[:, 0]
            mean = lambda states: masked_mean(states, attention_mask)
            maximum = lambda states: masked_max(states, attention_mask)
        last_hidden = tokens(encoder_outputs.last_hidden_state)
        if self.pooler_type == "cls_before_pooler":
            return first(last_hidden)
        if self.pooler_type == "max":
            return maximum(last_hidden)
        if self.pooler_type == "mean":
            return mean(last_hidden)
        hidden_states = encoder_outputs.hidden_states  # embeddings output, then one per layer
        # SimCSE averages the first transformer layer (index 1, after the embeddings) with the last one.
        first_layer, second_layer = (
            (hidden_states[1], hidden_states[-1])
            if self.pooler_type == "avg_first_last"
            else (hidden_states[-1], hidden_states[-2])
        )
        return mean((tokens(first_layer) + tokens(second_layer)) / 2)


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
    """An AutoModel encoder from a config (or a pretrained path), with BERT's pooler layer only when it is used.

    An unused pooler layer would leave parameters without gradients, which DistributedDataParallel rejects.
    """
    kwargs = {}
    model_class = MODEL_MAPPING.get(type(encoder_config), None)
    if model_class is not None and "add_pooling_layer" in inspect.signature(model_class.__init__).parameters:
        kwargs["add_pooling_layer"] = with_pooler
    if pretrained is not None:
        encoder = AutoModel.from_pretrained(pretrained, config=encoder_config, **kwargs, **load_kwargs)
    else:
        encoder = AutoModel.from_config(encoder_config, **kwargs)
    if with_pooler and getattr(encoder, "pooler", None) is None:
        raise ValueError(
            f"pooler_type='cls' uses the encoder's pooler layer, which {type(encoder).__name__} does not have; "
            "use pooler_type='cls_before_pooler' (the [CLS] hidden state) or 'mean' instead."
        )
    return encoder


class ContrastivePreTrainedModel(PreTrainedModel):
    """Base class: configuration, weight initialisation, saving with the code needed to load without the package."""

    config_class = ContrastiveConfig
    base_model_prefix = "contrastive"
    supports_gradient_checkpointing = True
    _supports_sdpa = True

    @torch.no_grad()
    def _init_weights(self, module):
        std = getattr(self.config.encoder, "initializer_range", 0.02)
        if isinstance(module, nn.Linear):
            module.weight.normal_(mean=0.0, std=std)
            if module.bias is not None:
                module.bias.zero_()
        elif isinstance(module, nn.LayerNorm):
            module.weight.fill_(1.0)
            module.bias.zero_()
        elif isinstance(module, MaskedLMHead):
            module.bias.zero_()
            if module.decoder_weight is not None:
                module.decoder_weight.normal_(mean=0.0, std=std)

    def save_pretrained(self, save_directory: str | os.PathLike, *args, **kwargs):
        """Save weights (safetensors), config, this package's modeling code (so that `trust_remote_code=True`
        loads the checkpoint where contrastive_hf is not installed) and the sentence-transformers module files."""
        self.config.auto_map = dict(AUTO_MAP)
        super().save_pretrained(save_directory, *args, **kwargs)
        if kwargs.get("is_main_process", True):
            custom_object_save(self, save_directory)  # copies this file and its relative imports
            if not isinstance(self, ContrastiveForSequenceClassification):
                write_sentence_transformers_files(self, save_directory)

    def export_encoder(self, save_directory: str | os.PathLike, tokenizer=None) -> None:
        """Save the encoder alone as a plain transformers checkpoint (e.g. a `BertModel`), loadable with `AutoModel`
        without remote code. The pooler and projection are not part of it: pool its token states as `pooler_type`
        says (for `cls`, its `pooler_output`)."""
        encoder = self.get_encoder_model()
        encoder.save_pretrained(save_directory)
        if tokenizer is not None:
            tokenizer.save_pretrained(save_directory)

    def get_encoder_model(self) -> PreTrainedModel:
        """The wrapped transformers encoder (BertModel, RobertaModel, ...)."""
        model = getattr(self, "contrastive", self)
        return model.encoder

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
    def from_encoder_pretrained(cls, name_or_path: str | os.PathLike, **config_overrides):
        """Wrap a pretrained encoder checkpoint (a local folder or a Hub id).

        ``config_overrides`` set [`ContrastiveConfig`] fields (``pooler_type="mean"``, ``temperature=0.05``...).
        For [`ContrastiveForPreTraining`], the checkpoint's own MLM head is kept when it has one (a ``*ForMaskedLM``
        or ``*ForPreTraining`` checkpoint); otherwise the MLM head starts from random weights.
        """
        encoder_config = AutoConfig.from_pretrained(name_or_path)
        config = ContrastiveConfig(encoder=encoder_config, **config_overrides)
        model = cls(config)
        encoder = build_encoder(config.encoder, config.pooler_type == "cls", pretrained=name_or_path)
        model.set_encoder(encoder)
        if isinstance(model, ContrastiveForPreTraining):
            model.load_mlm_head_from(name_or_path)
        model.config._name_or_path = str(name_or_path)
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

    # The attention kernel of packed batches (`packing.ATTENTION_KERNELS`); None: chosen at each call by device,
    # dtype and dropout (`packing.choose_attention_kernel`). Tests and benchmarks set one; it is not saved.
    packed_attention_kernel: str | None = None

    def __init__(self, config: ContrastiveConfig):
        super().__init__(config)
        self.encoder = build_encoder(config.encoder, config.pooler_type == "cls")
        self.config.encoder = self.encoder.config  # one config object, so that resizing updates the saved one
        self.pooler = SentencePooler(config.pooler_type)
        self.projection = ProjectionHead(config)
        self.tokenizer = None  # set by `encode` callers or loaders; not saved with the weights
        self.post_init()

    def set_encoder(self, encoder: PreTrainedModel) -> None:
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
    ) -> ContrastiveModelOutput:
        """Encode ``(B, L)`` or ``(B, S, L)`` inputs into ``(B, d)`` or ``(B, S, d)`` sentence vectors."""
        views_shape = input_ids.shape[:-1]  # (B,) or (B, S)
        flat = lambda tensor: None if tensor is None else tensor.reshape(-1, tensor.shape[-1])  # noqa: E731
        input_ids, attention_mask, token_type_ids = flat(input_ids), flat(attention_mask), flat(token_type_ids)
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        encoder_kwargs = {"input_ids": input_ids, "attention_mask": attention_mask, "return_dict": True}
        if token_type_ids is not None:
            encoder_kwargs["token_type_ids"] = token_type_ids
        wants_hidden = bool(output_hidden_states) or self.pooler.needs_hidden_states
        if wants_hidden:
            encoder_kwargs["output_hidden_states"] = True
        if output_attentions:
            encoder_kwargs["output_attentions"] = True
        outputs = self.encoder(**encoder_kwargs)
        pooled = self.pooler(outputs, attention_mask)  # (B*S, h)
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
        sub_batch_size: int | str = 0,
    ) -> torch.Tensor:
        """The sentence vectors alone, ``(..., L) -> (..., d)``, encoded as ``sub_batch_size`` says.

        ``sub_batch_size`` takes the values of `ContrastiveConfig.sub_batch_size` (`encoding_path` resolves them):
        packed (one sequence of real tokens), length-sorted groups (each cut to its own longest sequence), or one
        padded pass (0). On sentences of mixed lengths most of a batch padded to its longest is padding. Which
        sentences share a batch does not change (the negatives stay random), and the vectors equal those of one
        padded pass (absolute positions and attention masks make right-padding invisible). Inputs that are not
        right-padded, or hold a row without tokens, take the single padded pass.
        """
        views_shape = input_ids.shape[:-1]
        width = input_ids.shape[-1]
        input_ids = input_ids.reshape(-1, width)
        attention_mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask.reshape(-1, width)
        token_type_ids = None if token_type_ids is None else token_type_ids.reshape(-1, width)
        path = self.encoding_path(sub_batch_size, input_ids.device)
        if path == "padded" or not can_pack(attention_mask):
            pooled = self._pool(input_ids, attention_mask, token_type_ids, project)
        elif path == "packed":
            pooled = self._pool(input_ids, attention_mask, token_type_ids, project, packed=True)
        else:
            pooled = self._pool_sorted_groups(input_ids, attention_mask, token_type_ids, project, sub_batch_size)
        return pooled.reshape(*views_shape, pooled.shape[-1])

    def encoding_path(self, sub_batch_size: int | str, device: torch.device) -> str:
        """How `sentence_embeddings` encodes a batch on ``device``: ``"packed"``, ``"sorted"`` or ``"padded"``.

        ``"auto"`` packs where the encoder supports it (`packing.packing_unsupported_reason`), else sorts on CPU and
        pads elsewhere; ``"packed"`` raises where packing cannot run. Each choice is logged once, with its reason.
        """
        sub_batch_size = parse_sub_batch_size(sub_batch_size)
        if isinstance(sub_batch_size, int):
            if sub_batch_size == 0:
                path, reason = "padded", "sub_batch_size=0"
            else:
                path, reason = "sorted", f"sub_batch_size={sub_batch_size}: length-sorted groups of that many views"
        elif sub_batch_size == "sorted":
            path, reason = "sorted", f"sub_batch_size='sorted' ({self.config.sub_batch_tokens} token slots a group)"
        else:
            unsupported = packing_unsupported_reason(self.encoder)
            if unsupported is None:
                path, reason = "packed", f"sub_batch_size={sub_batch_size!r} and the encoder supports packing"
            elif sub_batch_size == "packed":
                raise ValueError(
                    f"sub_batch_size='packed' cannot run: {unsupported}. Use sub_batch_size='auto' (packs where it "
                    "can), 'sorted' (length-sorted groups, any encoder) or 0 (one padded pass)."
                )
            elif device.type == "cpu":
                path, reason = (
                    "sorted",
                    f"sub_batch_size='auto' cannot pack ({unsupported}); on CPU length-sorted groups",
                )
            else:
                path, reason = (
                    "padded",
                    (
                        f"sub_batch_size='auto' cannot pack ({unsupported}); on {device.type} one padded pass "
                        "(small length-sorted groups would leave the device idle)"
                    ),
                )
        logged = vars(self).setdefault("_logged_encoding_paths", set())
        if (path, reason) not in logged:
            logged.add((path, reason))
            logger.info("%s encodes %s: %s.", type(self.encoder).__name__, ENCODING_PATH_WORDS[path], reason)
        return path

    def _pool(self, input_ids, attention_mask, token_type_ids, project: bool, packed: bool = False) -> torch.Tensor:
        """Encode ``(N, L)`` inputs in one forward pass, padded or packed, and pool (and project) them: ``(N, d)``."""
        if packed:
            outputs, attention_mask = packed_encoder_forward(
                self.encoder,
                input_ids,
                attention_mask,
                token_type_ids,
                output_hidden_states=self.pooler.needs_hidden_states,
                with_pooler=self.pooler.pooler_type == "cls",
                kernel=self.packed_attention_kernel,
            )
        else:
            encoder_kwargs = {"input_ids": input_ids, "attention_mask": attention_mask, "return_dict": True}
            if token_type_ids is not None:
                encoder_kwargs["token_type_ids"] = token_type_ids
            if self.pooler.needs_hidden_states:
                encoder_kwargs["output_hidden_states"] = True
            outputs = self.encoder(**encoder_kwargs)
        pooled = self.pooler(outputs, attention_mask)
        return self.projection(pooled) if project else pooled

    def _pool_sorted_groups(
        self, input_ids, attention_mask, token_type_ids, project: bool, sub_batch_size: int | str
    ) -> torch.Tensor:
        """`_pool` over length-sorted groups of ``sub_batch_size`` rows (or, for ``"sorted"`` and ``"auto"``, of
        ``config.sub_batch_tokens`` token slots), each cut to its own longest row; back in input order."""
        lengths = attention_mask.sum(dim=1)  # (N,)
        order = torch.argsort(lengths, descending=True, stable=True)
        sorted_lengths = lengths[order].tolist()
        if isinstance(sub_batch_size, int):
            bounds = length_sorted_groups(sorted_lengths, group_size=sub_batch_size)
        else:
            bounds = length_sorted_groups(sorted_lengths, group_tokens=self.config.sub_batch_tokens)
        parts = []
        for start, stop in bounds:
            rows, cut = order[start:stop], max(sorted_lengths[start], 1)
            types = None if token_type_ids is None else token_type_ids[rows, :cut]
            parts.append(self._pool(input_ids[rows, :cut], attention_mask[rows, :cut], types, project))
        return torch.cat(parts).index_select(0, torch.argsort(order))  # back to batch order, (N, d)

    def token_states(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, sub_batch_size: int | str = 0
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The last layer's token states of ``(B, L)`` inputs, for a head on tokens (the MLM head).

        Returns ``(states, flat_index)``: packed (``encoding_path`` says ``"packed"``), the ``(T, h)`` states of the
        real tokens and each one's row in the inputs flattened to ``(B * L)``; otherwise one padded pass, the
        ``(B * L, h)`` states of every position and ``None``.
        """
        attention_mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask
        if self.encoding_path(sub_batch_size, input_ids.device) == "packed" and can_pack(attention_mask):
            outputs, packed = packed_encoder_forward(
                self.encoder, input_ids, attention_mask, kernel=self.packed_attention_kernel
            )
            return outputs.last_hidden_state[0], packed.flat_index
        states = self.encoder(input_ids=input_ids, attention_mask=attention_mask, return_dict=True).last_hidden_state
        return states.reshape(-1, states.shape[-1]), None

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

    @torch.no_grad()
    def encode(
        self,
        sentences: str | list[str],
        tokenizer=None,
        batch_size: int = 64,
        max_length: int | None = 128,
        normalize: bool = False,
    ) -> torch.Tensor:
        """Sentence embeddings, ``(len(sentences), embedding_size)`` on the CPU, in the input order.

        Runs in eval mode under ``no_grad``, in batches of sentences sorted by length (so that little padding is
        computed), and restores the training mode afterwards.

        Args:
            sentences: a sentence or a list of them.
            tokenizer: the tokenizer; defaults to ``self.tokenizer``, then to the one saved beside the checkpoint.
            batch_size: sentences per forward pass.
            max_length: truncation length in tokens (None: the tokenizer's maximum).
            normalize: L2-normalise the embeddings (cosine similarity becomes a dot product).
        """
        single = isinstance(sentences, str)
        sentences = [sentences] if single else list(sentences)
        tokenizer = tokenizer or self.tokenizer or self._load_saved_tokenizer()
        was_training = self.training
        self.eval()
        order = sorted(range(len(sentences)), key=lambda index: -len(sentences[index]))
        embeddings = [None] * len(sentences)
        device = next(self.parameters()).device
        try:
            for start in range(0, len(order), batch_size):
                indices = order[start : start + batch_size]
                batch = tokenizer(
                    [sentences[i] for i in indices],
                    padding=True,
                    truncation=True,
                    max_length=max_length,
                    return_tensors="pt",
                )
                output = self(
                    input_ids=batch["input_ids"].to(device),
                    attention_mask=batch["attention_mask"].to(device),
                    token_type_ids=batch["token_type_ids"].to(device) if "token_type_ids" in batch else None,
                )
                vectors = output.pooler_output.float()
                if normalize:
                    vectors = F.normalize(vectors, dim=-1)
                for row, index in enumerate(indices):
                    embeddings[index] = vectors[row].cpu()
        finally:
            self.train(was_training)
        stacked = torch.stack(embeddings) if embeddings else torch.empty(0, self.config.embedding_size)
        return stacked[0] if single else stacked

    def _load_saved_tokenizer(self):
        path = self.config._name_or_path
        if not path:
            raise ValueError(
                "encode() needs a tokenizer: pass tokenizer=AutoTokenizer.from_pretrained(...) or set model.tokenizer."
            )
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(path)
        except (OSError, ValueError) as error:
            raise ValueError(
                f"encode() found no tokenizer saved with {path!r}; pass tokenizer=... explicitly."
            ) from error
        return self.tokenizer


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

    def set_encoder(self, encoder: PreTrainedModel) -> None:
        self.contrastive.set_encoder(encoder)
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

    def load_mlm_head_from(self, name_or_path: str | os.PathLike) -> bool:
        """Copy the MLM head of a pretrained ``*ForMaskedLM`` checkpoint into ours; returns whether it was found.

        The head is found by structure (the dense layer, LayerNorm and output bias outside the base model), which
        covers BERT, RoBERTa, DistilBERT, ALBERT and ELECTRA generators.
        """
        architectures = getattr(AutoConfig.from_pretrained(name_or_path), "architectures", None) or []
        if not any(name.endswith(("ForMaskedLM", "ForPreTraining")) for name in architectures):
            logger.info(
                "%s has no MLM head (architectures %s); the MLM head starts at random.", name_or_path, architectures
            )
            return False
        source = AutoModelForMaskedLM.from_pretrained(name_or_path)
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
    view_input_names = ("input_ids", "attention_mask", "token_type_ids")

    def embed_views(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The projected embeddings of the views, ``(B, S, L) -> (B, S, d)``, in `config.sub_batch_size` groups."""
        if input_ids is None or input_ids.dim() != 3:
            raise ValueError(
                "ContrastiveForPreTraining needs input_ids of shape (batch, num_views, length); build batches with "
                "contrastive_hf.ContrastiveDataCollator."
            )
        return self.contrastive.sentence_embeddings(
            input_ids, attention_mask, token_type_ids, project=True, sub_batch_size=self.config.sub_batch_size
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
        )

    def compute_mlm_loss(
        self, mlm_input_ids: torch.Tensor, mlm_attention_mask: torch.Tensor | None, mlm_labels: torch.Tensor
    ) -> torch.Tensor:
        """Cross-entropy of the MLM head on the masked positions only (the logits of other tokens are never built)."""
        states, flat_index = self.contrastive.token_states(
            mlm_input_ids, mlm_attention_mask, sub_batch_size=self.config.sub_batch_size
        )  # (T or B * L, h)
        labels = mlm_labels.reshape(-1) if flat_index is None else mlm_labels.reshape(-1)[flat_index]
        masked = labels != -100
        if not masked.any():  # nothing to predict: a zero that keeps every parameter (the head too) in the graph
            return self.mlm_head(states[:1], self.get_input_embeddings().weight).sum() * 0.0
        logits = self.mlm_head(states[masked], self.get_input_embeddings().weight)  # (n_masked, vocab)
        return F.cross_entropy(logits.float(), labels[masked])

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        mlm_input_ids: torch.Tensor | None = None,
        mlm_attention_mask: torch.Tensor | None = None,
        mlm_labels: torch.Tensor | None = None,
        sentence_ids: torch.Tensor | None = None,
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
            The views of each sentence: 2 (positive pairs) or 3 (anchor, positive, hard negative).
        mlm_input_ids, mlm_attention_mask, mlm_labels (`torch.LongTensor` of shape `(batch_size, mlm_length)`):
            The masked copy of the batch and its labels (-100 where nothing is predicted), for L_MLM.
        sentence_ids (`torch.LongTensor` of shape `(batch_size, num_views)`, *optional*):
            An id of each view's sentence (the collators give content hashes): views of identical sentences are
            never made each other's negatives.
        return_loss (`bool`, defaults to `True`):
            Compute the losses; otherwise only the view embeddings are returned.
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
        embeddings = self.embed_views(input_ids, attention_mask, token_type_ids)
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
                mlm_loss = self.compute_mlm_loss(mlm_input_ids, mlm_attention_mask, mlm_labels) * mlm_loss_share
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
