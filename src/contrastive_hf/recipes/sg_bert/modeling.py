"""SG-BERT's training model: BERT_T, its frozen copy BERT_F and the projection head f, with the objective's
configuration."""

from __future__ import annotations

import copy
import logging
import os
from dataclasses import asdict, dataclass
from typing import Any

import torch
from safetensors.torch import load_file
from torch import nn
from transformers.utils import ModelOutput

from ...models.checkpoint_contents import checkpoint_model_type
from ...models.configuration_contrastive import ContrastiveConfig
from ...models.encoding_policy import attention_mask_for
from ...models.heads import ProjectionHead
from ...models.host_data import host_array
from ...models.modeling_contrastive import ContrastiveModel
from ...models.objectives import LOSSES, ContrastiveLoss, get_loss, loss_names
from .losses import (
    LAYER_POOLINGS,
    SELF_GUIDED_LOSSES,
    SelfGuidedLoss,
    parameter_distance,
    pool_layers,
    sample_layer_views,
)

__all__ = ["HEAD_FILE", "SelfGuidedConfig", "SelfGuidedModel", "SelfGuidedOutput"]

logger = logging.getLogger(__name__)

# The projection head f, written into Trainer checkpoints (not into the final model) so that a resumed run continues
# with the head and optimiser state it stopped with.
HEAD_FILE = "self_guided_head.safetensors"


@dataclass
class SelfGuidedConfig:
    """Hyper-parameters of SG-BERT's objective (defaults: the paper's Table 8).

    Args:
        loss: ``base``, ``opt1``, ``opt2`` or ``opt3`` (SG-OPT), see the module docstring for each formula; or the
            name of any registered in-batch loss (`models.objectives`, e.g. ``info_nce``), which scores each
            sentence's vector against its sampled layer view as a (query, positive) pair.
        temperature: tau of :math:`\\phi`; the paper uses 0.01.
        regularization_weight: lambda, the weight of :math:`\\|BERT_F - BERT_T\\|_2^2` (0 turns it off).
        projection_hidden_size: width of both linear layers of the head f (4096 in the paper).
        layer_pooling: how BERT_F's token states of a layer become a view: ``max`` (the paper's choice) or ``mean``.
        layer_sampling_weights: the sampler sigma of base/opt1/opt2, as one weight per layer 0..l (normalised);
            None is the paper's uniform sampler.
        freeze_embeddings: keep BERT_T's layer 0 (the embedding layer) frozen, as the paper does.
    """

    loss: str = "opt3"
    temperature: float = 0.01
    regularization_weight: float = 0.1
    projection_hidden_size: int = 4096
    layer_pooling: str = "max"
    layer_sampling_weights: list[float] | None = None
    freeze_embeddings: bool = True

    def __post_init__(self):
        if self.loss not in SELF_GUIDED_LOSSES and self.loss not in LOSSES:
            raise ValueError(
                f"Unknown SG-BERT loss {self.loss!r}: choose one of {', '.join(SELF_GUIDED_LOSSES)}, or a registered "
                f"in-batch loss ({', '.join(loss_names())}; models.objectives.register_loss)."
            )
        if not self.temperature > 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}; SG-BERT uses 0.01.")
        if self.regularization_weight < 0:
            raise ValueError(f"regularization_weight must be >= 0, got {self.regularization_weight}.")
        if self.projection_hidden_size < 1:
            raise ValueError(f"projection_hidden_size must be >= 1, got {self.projection_hidden_size}.")
        if self.layer_pooling not in LAYER_POOLINGS:
            raise ValueError(
                f"Unknown layer_pooling {self.layer_pooling!r}: choose one of {', '.join(LAYER_POOLINGS)}."
            )
        if self.layer_sampling_weights is not None:
            weights = [float(weight) for weight in self.layer_sampling_weights]
            if not weights or min(weights) < 0 or sum(weights) <= 0:
                raise ValueError(
                    f"layer_sampling_weights must be non-negative with a positive sum, got {weights}; leave it unset "
                    "for the uniform sampler."
                )
            self.layer_sampling_weights = weights

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class SelfGuidedOutput(ModelOutput):
    """
    Output of [`SelfGuidedModel`].

    Args:
        loss (`torch.FloatTensor` of shape `()`, *optional*):
            cl_loss + regularization_weight * regularization_loss.
        cl_loss (`torch.FloatTensor` of shape `()`, *optional*):
            The contrastive term (L_base, L_opt1, L_opt2 or L_opt3, or the in-batch loss's).
        regularization_loss (`torch.FloatTensor` of shape `()`, *optional*):
            ||BERT_F - BERT_T||^2, unweighted (None when its weight is 0).
        embeddings (`torch.FloatTensor` of shape `(batch_size, hidden_size)`):
            BERT_T's sentence vectors c_i (before the head f): what the saved model returns.
        view_layers (`torch.LongTensor` of shape `(batch_size,)`, *optional*):
            The layer the sampler picked for each sentence (base, opt1, opt2, and an in-batch loss).
        negatives_per_query (`torch.FloatTensor` of shape `()`, *optional*):
            With an in-batch loss: the mean number of negatives in each sentence's softmax.
    """

    loss: torch.FloatTensor | None = None
    cl_loss: torch.FloatTensor | None = None
    regularization_loss: torch.FloatTensor | None = None
    embeddings: torch.FloatTensor | None = None
    view_layers: torch.LongTensor | None = None
    negatives_per_query: torch.FloatTensor | None = None


def _embedding_layer(encoder: nn.Module) -> nn.Module:
    """Layer 0 of an encoder: its ``embeddings`` module (word, position and type embeddings, LayerNorm)."""
    embeddings = getattr(encoder, "embeddings", None)
    return embeddings if isinstance(embeddings, nn.Module) else encoder.get_input_embeddings()


class SelfGuidedModel(nn.Module):
    r"""SG-BERT's training model: BERT_T (a [`ContrastiveModel`], trained), BERT_F (a frozen copy of its encoder,
    always in eval mode) and the projection head f.

    ``model.contrastive`` is BERT_T: it is what `SelfGuidedTrainer` and `save_pretrained` save, and what the
    evaluation helpers (`contrastive_hf.evaluation.evaluate_sts`) encode with. Build BERT_T with
    ``projection_type="none"``: f is the training-only head here, and the sentence embedding is the pooled vector
    (``cls_before_pooler``, the last layer's [CLS], in the paper).

    Args:
        contrastive: BERT_T, at the weights BERT_F copies.
        config: the objective's hyper-parameters; ``config_overrides`` set its fields instead
            (``loss="opt2"``, ``temperature=0.05``...).
    """

    def __init__(self, contrastive: ContrastiveModel, config: SelfGuidedConfig | None = None, **config_overrides):
        super().__init__()
        if not isinstance(contrastive, ContrastiveModel):
            raise TypeError(
                f"SelfGuidedModel wraps a contrastive_hf ContrastiveModel (BERT_T), got {type(contrastive).__name__}; "
                "use SelfGuidedModel.from_encoder_pretrained(name_or_path) for a pretrained encoder."
            )
        if contrastive.config.projection_type != "none":
            raise ValueError(
                f"BERT_T has a projection head ({contrastive.config.projection_type!r}) that SG-BERT never trains "
                "(its own head f is separate): build the ContrastiveModel with projection_type='none'."
            )
        if contrastive.config.matryoshka_dims:
            raise ValueError(
                f"BERT_T's config sets matryoshka_dims {contrastive.config.matryoshka_dims}, which SG-BERT cannot "
                "train: its loss compares the head f's outputs, a non-linear map of the whole embedding, so no "
                "prefix of the embedding encode returns is ever compared. Load it with matryoshka_dims=None."
            )
        if config is None:
            config = SelfGuidedConfig(**config_overrides)
        elif config_overrides:
            config = SelfGuidedConfig(**{**config.to_dict(), **config_overrides})
        self.self_guided_config = config
        self.contrastive = contrastive
        if config.loss in SELF_GUIDED_LOSSES:
            self.loss_fn = SelfGuidedLoss(config.loss, config.temperature)
        else:  # a registered in-batch loss, on (sentence, layer view) pairs
            self.loss_fn = get_loss(config.loss)(temperature=config.temperature)
        self.frozen_encoder = copy.deepcopy(contrastive.encoder).requires_grad_(False).eval()  # BERT_F
        if config.freeze_embeddings:
            _embedding_layer(contrastive.encoder).requires_grad_(False)
        encoder_config = contrastive.config.encoder
        layers = getattr(encoder_config, "num_hidden_layers", None)
        if config.layer_sampling_weights is not None and layers is not None:
            if len(config.layer_sampling_weights) != layers + 1:
                raise ValueError(
                    f"layer_sampling_weights has {len(config.layer_sampling_weights)} weights; the encoder has "
                    f"{layers} layers plus the embedding layer: give {layers + 1}."
                )
        # f: hidden -> 4096 -> 4096, GELU after each linear layer (the paper's head); a ContrastiveConfig only
        # describes its shape here.
        head_shape = ContrastiveConfig(
            encoder=encoder_config,
            projection_type="mlp",
            projection_layers=2,
            projection_hidden_size=config.projection_hidden_size,
            projection_dim=config.projection_hidden_size,
            projection_activation="gelu",
            projection_output_activation=True,
        )
        self.projection = ProjectionHead(head_shape)
        std = getattr(encoder_config, "initializer_range", 0.02)
        with torch.no_grad():
            for layer in self.projection.layers:
                layer.weight.normal_(mean=0.0, std=std)
                layer.bias.zero_()
        reference = next(contrastive.parameters())
        self.projection.to(device=reference.device, dtype=reference.dtype)

    @classmethod
    def from_encoder_pretrained(
        cls,
        name_or_path: str | os.PathLike,
        pooler_type: str = "cls_before_pooler",
        loading: dict | None = None,
        **config_overrides,
    ) -> SelfGuidedModel:
        """SG-BERT on a pretrained encoder (a Hub id or folder: BERT, RoBERTa, MiniLM...), or continuing from a
        contrastive_hf checkpoint; BERT_F is a copy of it. ``config_overrides`` set `SelfGuidedConfig` fields;
        ``loading``: `from_pretrained`'s loading arguments (default: float32 master weights to train, whatever the
        checkpoint's dtype)."""
        loading = {"dtype": torch.float32, **(loading or {})}
        if checkpoint_model_type(name_or_path) == ContrastiveConfig.model_type:
            tuned = ContrastiveModel.from_pretrained(
                name_or_path, pooler_type=pooler_type, projection_type="none", **loading
            )
        else:
            tuned = ContrastiveModel.from_encoder_pretrained(
                name_or_path, pooler_type=pooler_type, projection_type="none", **loading
            )
        return cls(tuned, **config_overrides)

    @property
    def config(self) -> ContrastiveConfig:
        """BERT_T's configuration: the one saved with the model (what the Trainer's integrations log)."""
        return self.contrastive.config

    def train(self, mode: bool = True) -> SelfGuidedModel:
        super().train(mode)
        self.frozen_encoder.eval()  # the teacher never uses dropout
        return self

    def activation_checkpointing_enable(self, activation_checkpointing_kwargs: dict | None = None, **options) -> None:
        """Activation (gradient) checkpointing in BERT_T (BERT_F runs without gradients and needs none). ``options``:
        what the installed transformers passes besides (``every_n_layers``, ``offload``), handed on as they are."""
        tuned = self.contrastive
        if hasattr(tuned, "activation_checkpointing_enable"):
            tuned.activation_checkpointing_enable(activation_checkpointing_kwargs, **options)
        else:  # a transformers before activation_checkpointing_enable
            tuned.gradient_checkpointing_enable(activation_checkpointing_kwargs, **options)

    def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs: dict | None = None, **options) -> None:
        """`activation_checkpointing_enable` under the name transformers' Trainer called before it (and calls still
        for a model without the new name, with ``every_n_layers`` and ``offload``)."""
        self.activation_checkpointing_enable(gradient_checkpointing_kwargs, **options)

    def save_pretrained(self, save_directory: str | os.PathLike, **kwargs) -> None:
        """Save BERT_T alone, as a `ContrastiveModel` checkpoint (BERT_F and the head f are training machinery)."""
        self.contrastive.save_pretrained(save_directory, **kwargs)

    @torch.no_grad()
    def layer_views(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        input_lengths=None,
    ) -> torch.Tensor:
        """BERT_F's views :math:`h_{i,k}` of every layer k = 0..l, pooled over the tokens: ``(B, l + 1, hidden)``;
        ``input_lengths`` ``(B,)``: each sentence's real tokens on the host (`models.host_data`)."""
        mask = attention_mask_for(
            self.frozen_encoder, attention_mask, None if input_lengths is None else host_array(input_lengths)
        )
        inputs = {"input_ids": input_ids, "attention_mask": mask, "output_hidden_states": True}
        if token_type_ids is not None:
            inputs["token_type_ids"] = token_type_ids
        hidden_states = self.frozen_encoder(**inputs, return_dict=True).hidden_states  # l + 1 x (B, T, h)
        return pool_layers(hidden_states, attention_mask, self.self_guided_config.layer_pooling)

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        view_layers: torch.Tensor | None = None,
        input_lengths=None,
        return_loss: bool = True,
        return_dict: bool | None = None,
    ) -> SelfGuidedOutput | tuple:
        r"""
        input_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`):
            The sentences, once each (the views come from BERT_F's layers; no augmentation).
        view_layers (`torch.LongTensor` of shape `(batch_size,)`, *optional*):
            For base/opt1/opt2: the layer of each sentence's view, instead of the sampler's draw.
        input_lengths (numpy array of shape `(batch_size,)`, *optional*):
            Each sentence's real tokens, on the host (`SelfGuidedCollator` gives them): the encoders then get a
            mask that transformers does not read back from the device.
        return_loss (`bool`, defaults to `True`):
            Compute the loss; otherwise only BERT_T's sentence vectors are returned.
        """
        if input_ids is None or input_ids.dim() != 2:
            raise ValueError(
                "SelfGuidedModel takes input_ids of shape (batch, length), each sentence once; build batches with "
                "contrastive_hf.recipes.sg_bert.SelfGuidedCollator."
            )
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        config = self.self_guided_config
        sentences = self.contrastive.embed(
            input_ids, attention_mask, token_type_ids, project=False, lengths=input_lengths
        ).pooler_output
        output = SelfGuidedOutput(embeddings=sentences)
        if return_loss:
            layer_views = self.layer_views(input_ids, attention_mask, token_type_ids, input_lengths)  # (B, K, h)
            projected = self.projection(sentences)  # (B, d)
            in_batch = isinstance(self.loss_fn, ContrastiveLoss)  # registered, or handed by the trainer
            if config.loss == "opt3" and not in_batch:
                views = self.projection(layer_views)  # (B, K, d)
            else:
                if view_layers is None:
                    picked, view_layers = sample_layer_views(layer_views, config.layer_sampling_weights)
                else:
                    view_layers = self._check_view_layers(view_layers, input_ids.shape[0], layer_views.shape[1])
                    picked = layer_views[torch.arange(input_ids.shape[0], device=input_ids.device), view_layers]
                views = self.projection(picked)  # (B, d)
            # each process's share of the global batch's loss: their average is the global batch's loss
            if in_batch:  # each sentence's vector (query) and its layer view (positive): (B, 2, d)
                cl_loss, output.negatives_per_query = self.loss_fn(torch.stack([projected, views], dim=1))
            else:
                cl_loss = self.loss_fn(projected, views)  # gathers every process's views when the trainer says so
            output.cl_loss, output.loss, output.view_layers = cl_loss, cl_loss, view_layers
            if config.regularization_weight > 0:
                output.regularization_loss = parameter_distance(self.frozen_encoder, self.contrastive.encoder)
                output.loss = cl_loss + config.regularization_weight * output.regularization_loss
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        return output if return_dict else output.to_tuple()

    @staticmethod
    def _check_view_layers(view_layers: torch.Tensor, batch: int, num_layers: int) -> torch.Tensor:
        view_layers = torch.as_tensor(view_layers).long().reshape(-1)
        if view_layers.numel() != batch or view_layers.min() < 0 or view_layers.max() >= num_layers:
            raise ValueError(
                f"view_layers must hold one layer in 0..{num_layers - 1} per sentence ({batch}), got "
                f"{view_layers.tolist()}."
            )
        return view_layers

    def load_checkpoint(self, folder: str | os.PathLike) -> None:
        """Load a checkpoint written by `SelfGuidedTrainer`: BERT_T's weights, and the head f when it is there.

        BERT_F is not in checkpoints: it is the starting encoder, rebuilt from where the run started.
        """
        folder = os.fspath(folder)
        self.contrastive.load_saved_weights(folder)
        head = os.path.join(folder, HEAD_FILE)
        if os.path.isfile(head):
            self.projection.load_state_dict(load_file(head, device="cpu"), strict=True)
        else:
            logger.warning("%s has no %s: the projection head f keeps its current weights.", folder, HEAD_FILE)
