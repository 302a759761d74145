r"""SG-BERT: self-guided contrastive learning (Kim, Yoo & Lee, ACL 2021, "Self-Guided Contrastive Learning for BERT
Sentence Representations", arXiv:2106.07345).

No data augmentation: the positives of a sentence come from BERT itself. Two copies of the encoder are used:

* BERT_F, frozen, gives the training signal: every layer k = 0..l of it (k = 0 is the embedding layer) pooled over the
  tokens (max pooling by default) is a view :math:`h_{i,k}` of sentence i;
* BERT_T, tuned, gives the sentence vector :math:`c_i`, its last layer's [CLS]. Its layer 0 (the embeddings) stays
  frozen, and a regulariser keeps it close to BERT_F: :math:`L^{reg} = \|BERT_F - BERT_T\|_2^2`, the squared L2
  distance of all their parameters.

A projection head f (two linear layers of width 4096, GELU after each, shared by :math:`c` and :math:`h`) maps both
into the space of the loss, with :math:`\phi(u, v) = \exp(\cos(f(u), f(v)) / \tau)`. The objectives (§3.1-3.2):

* ``base`` (SG): a sampler :math:`\sigma` (uniform over the l + 1 layers by default, drawn for each sentence) picks
  one view :math:`h_i`; NT-Xent over the 2b vectors :math:`x = \{c_1..c_b, h_1..h_b\}` of a batch of b sentences, in
  which the matching function :math:`\mu(m)` gives the index of the other half of pair m (:math:`\mu(m) = m + b` for
  :math:`m \le b`, :math:`m - b` otherwise):
  :math:`L^{base} = \frac{1}{2b}\sum_{m=1}^{2b} -\log \frac{\phi(x_m, x_{\mu(m)})}{\sum_{n \ne m} \phi(x_m, x_n)}`.
* ``opt1``: BERT_F is not trained, so the terms whose anchor is an :math:`h` are dropped: only the b anchors
  :math:`c_i` remain, each still against all other 2b - 1 vectors.
* ``opt2``: opt1 without the other sentences' :math:`c_j` in the denominator; :math:`c_i` is contrasted with the
  views only: :math:`-\log \phi(c_i, h_i) / \sum_j \phi(c_i, h_j)`.
* ``opt3`` (SG-OPT, the paper's method): no sampling; :math:`c_i` is pulled towards every layer view of its sentence
  and pushed from every view of the other sentences:
  :math:`L^{opt3}_{i,k} = -\log \frac{\phi(c_i, h_{i,k})}{\phi(c_i, h_{i,k}) + \sum_{m \ne i}\sum_{n=0}^{l}
  \phi(c_i, h_{m,n})}`, and :math:`L^{opt} = \frac{1}{b(l+1)}\sum_i\sum_k L^{opt3}_{i,k} + \lambda L^{reg}`.

Every objective adds :math:`\lambda L^{reg}`. Which reading this implements: the formulas above are written from
the paper's §3.1-3.2 as we read them, and each was checked against the authors' released code (galsang/SG-BERT,
``loss.py``: the same positives and denominators for base, opt1, opt2 and opt3). Where the paper leaves room we
follow that code: f is applied to both :math:`c` and :math:`h`; the sampler draws one layer per sentence (uniform
over 0..l); :math:`L^{reg}` sums over the encoder's parameters (not f's); every loss is a mean over its anchors.
With several processes the views of every process are gathered (as `ContrastiveForPreTraining` does), so each
sentence's negatives are the global batch.

Defaults are the paper's Table 8 (tau = 0.01, lambda = 0.1, max pooling, uniform sampler, learning rate 5e-5,
batch 16, AdamW betas (0.9, 0.9)) and its released code (10% linear warm-up, no weight decay); the optimisation ones
live in `SelfGuidedTrainingArguments`. After training only BERT_T is kept:
`SelfGuidedTrainer` saves it as a plain `ContrastiveModel` checkpoint (pooler ``cls_before_pooler``, no projection),
which loads with ``AutoModel.from_pretrained`` and embeds with its [CLS].

Example:

```python
>>> from contrastive_hf.sg_bert import SelfGuidedCollator, SelfGuidedModel, SelfGuidedTrainer
>>> from contrastive_hf.sg_bert import SelfGuidedTrainingArguments
>>> model = SelfGuidedModel.from_encoder_pretrained("bert-base-uncased", loss="opt3")
>>> trainer = SelfGuidedTrainer(
...     model=model, args=SelfGuidedTrainingArguments(output_dir="sg-bert"), train_dataset=sentences,
...     data_collator=SelfGuidedCollator(tokenizer, max_length=64), processing_class=tokenizer)
>>> trainer.train(); trainer.save_model()  # output_dir holds BERT_T only
```
"""

from __future__ import annotations

import copy
import logging
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import AutoConfig
from transformers.trainer import TRAINING_ARGS_NAME
from transformers.trainer_utils import load_sharded_checkpoint
from transformers.utils import SAFE_WEIGHTS_INDEX_NAME, SAFE_WEIGHTS_NAME, ModelOutput

from .collators import pad_sequences
from .configuration_contrastive import ContrastiveConfig
from .distributed import gather_with_grad, rank, world_size
from .losses import cosine_logits, info_nce, nt_xent
from .modeling_contrastive import ContrastiveModel, ProjectionHead
from .trainer import STEP_METRICS, ContrastiveTrainer
from .training_args import ContrastiveTrainingArguments

__all__ = [
    "SELF_GUIDED_LOSSES",
    "LAYER_POOLINGS",
    "HEAD_FILE",
    "SelfGuidedConfig",
    "SelfGuidedModel",
    "SelfGuidedOutput",
    "SelfGuidedCollator",
    "SelfGuidedTrainingArguments",
    "SelfGuidedTrainer",
    "pool_layers",
    "sample_layer_views",
    "self_guided_base_loss",
    "self_guided_opt1_loss",
    "self_guided_opt2_loss",
    "self_guided_opt3_loss",
    "parameter_distance",
]

logger = logging.getLogger(__name__)

SELF_GUIDED_LOSSES = ("base", "opt1", "opt2", "opt3")
LAYER_POOLINGS = ("max", "mean")
# The projection head f, written into Trainer checkpoints (not into the final model) so that a resumed run continues
# with the head and optimiser state it stopped with.
HEAD_FILE = "self_guided_head.safetensors"


# ---------------------------------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class SelfGuidedConfig:
    """Hyper-parameters of SG-BERT's objective (defaults: the paper's Table 8).

    Args:
        loss: ``base``, ``opt1``, ``opt2`` or ``opt3`` (SG-OPT); see the module docstring for each formula.
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
        if self.loss not in SELF_GUIDED_LOSSES:
            raise ValueError(f"Unknown SG-BERT loss {self.loss!r}: choose one of {', '.join(SELF_GUIDED_LOSSES)}.")
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


# ---------------------------------------------------------------------------------------------------------------
# Views and losses, as pure functions
# ---------------------------------------------------------------------------------------------------------------


def pool_layers(
    hidden_states: Sequence[torch.Tensor], attention_mask: torch.Tensor, pooling: str = "max"
) -> torch.Tensor:
    """Every layer's token states pooled over the tokens: ``l + 1`` tensors ``(B, T, h)`` -> ``(B, l + 1, h)``.

    Padding positions (``attention_mask == 0``) are left out of the max or the mean.
    """
    if pooling not in LAYER_POOLINGS:
        raise ValueError(f"Unknown layer pooling {pooling!r}: choose one of {', '.join(LAYER_POOLINGS)}.")
    stacked = torch.stack(tuple(hidden_states), dim=1)  # (B, K, T, h)
    keep = attention_mask[:, None, :, None].bool()  # (B, 1, T, 1)
    if pooling == "max":
        return stacked.masked_fill(~keep, torch.finfo(stacked.dtype).min).amax(dim=2)
    counts = keep.sum(dim=2).clamp(min=1).to(stacked.dtype)  # (B, 1, 1)
    return (stacked * keep).sum(dim=2) / counts


def sample_layer_views(
    layer_views: torch.Tensor, weights: Sequence[float] | None = None, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The sampler sigma: one layer per sentence, ``(B, K, h)`` -> ``(views (B, h), layers (B,))``.

    ``weights`` (one per layer) make it a weighted draw; None draws uniformly, as the paper does.
    """
    batch, num_layers = layer_views.shape[:2]
    device = layer_views.device
    if weights is None:
        layers = torch.randint(
            num_layers, (batch,), generator=generator, device=None if generator is None else generator.device
        )
    else:
        if len(weights) != num_layers:
            raise ValueError(
                f"layer_sampling_weights has {len(weights)} weights but the encoder gives {num_layers} layer views "
                "(the embedding layer and every transformer layer): give one weight per layer."
            )
        probabilities = torch.as_tensor(weights, dtype=torch.float64)
        layers = torch.multinomial(probabilities, batch, replacement=True, generator=generator)
    layers = layers.to(device)
    return layer_views[torch.arange(batch, device=device), layers], layers


def self_guided_base_loss(
    sentences: torch.Tensor,
    views: torch.Tensor,
    temperature: float,
    all_sentences: torch.Tensor | None = None,
    all_views: torch.Tensor | None = None,
    offset: int = 0,
) -> torch.Tensor:
    r"""SG's :math:`L^{base}` (§3.1): NT-Xent over the 2b vectors :math:`\{c_i\} \cup \{h_i\}`, the positive of each
    being the other half of its pair (the matching function :math:`\mu`), the mean over the 2b anchors.

    Args:
        sentences: ``(b, d)`` projected sentence vectors :math:`f(c_i)`.
        views: ``(b, d)`` projected sampled views :math:`f(h_i)`.
        temperature: tau.
        all_sentences, all_views: ``(M, d)`` the global batch gathered from every process, where this process's rows
            start at ``offset``; None on one process.
    """
    return nt_xent(sentences, views, temperature, all_sentences, all_views, offset)


def self_guided_opt1_loss(
    sentences: torch.Tensor,
    views: torch.Tensor,
    temperature: float,
    all_sentences: torch.Tensor | None = None,
    all_views: torch.Tensor | None = None,
    offset: int = 0,
) -> torch.Tensor:
    r""":math:`L^{opt1}` (§3.2): :math:`L^{base}` with only the anchors :math:`c_i` (BERT_F is not trained, so the
    terms anchored on an :math:`h` teach nothing); each :math:`c_i` is still contrasted with the other 2b - 1 vectors:

    .. math:: -\log \frac{\phi(c_i, h_i)}{\sum_{j \ne i} \phi(c_i, c_j) + \sum_j \phi(c_i, h_j)}

    averaged over the b anchors. Arguments as `self_guided_base_loss`.
    """
    if all_sentences is None:
        all_sentences, all_views, offset = sentences, views, 0
    batch, total = sentences.shape[0], all_sentences.shape[0]
    logits = cosine_logits(sentences, torch.cat([all_sentences, all_views], dim=0), temperature)  # (b, 2M)
    rows = torch.arange(batch, device=logits.device)
    logits = logits.index_put((rows, rows + offset), torch.tensor(float("-inf"), device=logits.device))  # not itself
    return F.cross_entropy(logits, rows + offset + total)


def self_guided_opt2_loss(
    sentences: torch.Tensor,
    views: torch.Tensor,
    temperature: float,
    all_views: torch.Tensor | None = None,
    offset: int = 0,
) -> torch.Tensor:
    r""":math:`L^{opt2}` (§3.2): :math:`L^{opt1}` without the other sentences' :math:`c_j` among the negatives:

    .. math:: -\log \frac{\phi(c_i, h_i)}{\sum_j \phi(c_i, h_j)}

    averaged over the b anchors (InfoNCE of the :math:`c` against the :math:`h`). ``all_views``: the gathered
    ``(M, d)`` views, this process's starting at ``offset``.
    """
    return info_nce(sentences, views if all_views is None else all_views, temperature, positive_offset=offset)


def self_guided_opt3_loss(
    sentences: torch.Tensor,
    layer_views: torch.Tensor,
    temperature: float,
    all_layer_views: torch.Tensor | None = None,
    offset: int = 0,
) -> torch.Tensor:
    r""":math:`L^{opt3}` (§3.2, SG-OPT): every layer view of a sentence is a positive of its :math:`c_i`, and every
    view of the other sentences a negative; the positive being scored is the only view of the sentence's own in its
    denominator:

    .. math:: L_{i,k} = -\log \frac{\phi(c_i, h_{i,k})}{\phi(c_i, h_{i,k}) + \sum_{m \ne i}\sum_{n=0}^{l}
        \phi(c_i, h_{m,n})}

    averaged over the b(l + 1) pairs (i, k).

    Args:
        sentences: ``(b, d)`` projected sentence vectors :math:`f(c_i)`.
        layer_views: ``(b, l + 1, d)`` projected views :math:`f(h_{i,k})` of every layer.
        temperature: tau.
        all_layer_views: ``(M, l + 1, d)`` the views gathered from every process, this process's starting at
            ``offset``; None on one process.
    """
    if all_layer_views is None:
        all_layer_views, offset = layer_views, 0
    batch = sentences.shape[0]
    total, num_layers, size = all_layer_views.shape
    logits = cosine_logits(sentences, all_layer_views.reshape(total * num_layers, size), temperature)
    logits = logits.view(batch, total, num_layers)  # (b, M, K)
    rows = torch.arange(batch, device=logits.device)
    positives = logits[rows, rows + offset]  # (b, K)
    negatives = logits.index_put((rows, rows + offset), torch.tensor(float("-inf"), device=logits.device))
    negative_mass = negatives.flatten(1).logsumexp(dim=1, keepdim=True)  # (b, 1): log sum over m != i, all n
    return (torch.logaddexp(positives, negative_mass) - positives).mean()


def parameter_distance(reference: nn.Module, model: nn.Module) -> torch.Tensor:
    r""":math:`\|\theta_{ref} - \theta\|_2^2`, summed over the parameters of ``model`` that are trained, each paired
    with the same-named parameter of ``reference`` (SG-BERT's :math:`L^{reg}` with reference = BERT_F).

    Frozen parameters are skipped: they cannot move away from the reference. The gradient flows into ``model`` only
    when ``reference`` is frozen. Computed in float32.
    """
    reference_parameters = dict(reference.named_parameters())
    terms = []
    for name, parameter in model.named_parameters():
        if not parameter.requires_grad:
            continue
        anchor = reference_parameters.get(name)
        if anchor is None or anchor.shape != parameter.shape:
            raise ValueError(
                f"Parameter {name!r} {tuple(parameter.shape)} has no same-shaped counterpart in the reference model "
                f"({None if anchor is None else tuple(anchor.shape)}): the two must be copies of one architecture."
            )
        terms.append((parameter.float() - anchor.detach().float()).pow(2).sum())
    if not terms:
        return torch.zeros((), device=next(model.parameters()).device)
    return torch.stack(terms).sum()


# ---------------------------------------------------------------------------------------------------------------
# The training model
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class SelfGuidedOutput(ModelOutput):
    """
    Output of [`SelfGuidedModel`].

    Args:
        loss (`torch.FloatTensor` of shape `()`, *optional*):
            cl_loss + regularization_weight * regularization_loss.
        cl_loss (`torch.FloatTensor` of shape `()`, *optional*):
            The contrastive term (L_base, L_opt1, L_opt2 or L_opt3).
        regularization_loss (`torch.FloatTensor` of shape `()`, *optional*):
            ||BERT_F - BERT_T||^2, unweighted (None when its weight is 0).
        embeddings (`torch.FloatTensor` of shape `(batch_size, hidden_size)`):
            BERT_T's sentence vectors c_i (before the head f): what the saved model returns.
        view_layers (`torch.LongTensor` of shape `(batch_size,)`, *optional*):
            The layer the sampler picked for each sentence (base, opt1, opt2).
    """

    loss: torch.FloatTensor | None = None
    cl_loss: torch.FloatTensor | None = None
    regularization_loss: torch.FloatTensor | None = None
    embeddings: torch.FloatTensor | None = None
    view_layers: torch.LongTensor | None = None


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
        if config is None:
            config = SelfGuidedConfig(**config_overrides)
        elif config_overrides:
            config = SelfGuidedConfig(**{**config.to_dict(), **config_overrides})
        self.self_guided_config = config
        self.contrastive = contrastive
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
        cls, name_or_path: str | os.PathLike, pooler_type: str = "cls_before_pooler", **config_overrides
    ) -> SelfGuidedModel:
        """SG-BERT on a pretrained encoder (a Hub id or folder: BERT, RoBERTa, MiniLM...), or continuing from a
        contrastive_hf checkpoint; BERT_F is a copy of it. ``config_overrides`` set `SelfGuidedConfig` fields."""
        source = AutoConfig.from_pretrained(name_or_path)
        if source.model_type == ContrastiveConfig.model_type:
            tuned = ContrastiveModel.from_pretrained(name_or_path, pooler_type=pooler_type, projection_type="none")
        else:
            tuned = ContrastiveModel.from_encoder_pretrained(
                name_or_path, pooler_type=pooler_type, projection_type="none"
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

    def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs: dict | None = None) -> None:
        """Gradient checkpointing in BERT_T (BERT_F runs without gradients and needs none)."""
        self.contrastive.gradient_checkpointing_enable(gradient_checkpointing_kwargs=gradient_checkpointing_kwargs)

    def save_pretrained(self, save_directory: str | os.PathLike, **kwargs) -> None:
        """Save BERT_T alone, as a `ContrastiveModel` checkpoint (BERT_F and the head f are training machinery)."""
        self.contrastive.save_pretrained(save_directory, **kwargs)

    @torch.no_grad()
    def layer_views(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """BERT_F's views :math:`h_{i,k}` of every layer k = 0..l, pooled over the tokens: ``(B, l + 1, hidden)``."""
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask, "output_hidden_states": True}
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
        return_loss: bool = True,
        gather_across_devices: bool = False,
        return_dict: bool | None = None,
    ) -> SelfGuidedOutput | tuple:
        r"""
        input_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`):
            The sentences, once each (the views come from BERT_F's layers; no augmentation).
        view_layers (`torch.LongTensor` of shape `(batch_size,)`, *optional*):
            For base/opt1/opt2: the layer of each sentence's view, instead of the sampler's draw.
        return_loss (`bool`, defaults to `True`):
            Compute the loss; otherwise only BERT_T's sentence vectors are returned.
        gather_across_devices (`bool`, defaults to `False`):
            With several processes, the views (and sentence vectors) of every process are negatives of every
            sentence; `ContrastiveTrainer` sets it.
        """
        if input_ids is None or input_ids.dim() != 2:
            raise ValueError(
                "SelfGuidedModel takes input_ids of shape (batch, length), each sentence once; build batches with "
                "contrastive_hf.sg_bert.SelfGuidedCollator."
            )
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        config = self.self_guided_config
        sentences = self.contrastive.embed(input_ids, attention_mask, token_type_ids, project=False).pooler_output
        output = SelfGuidedOutput(embeddings=sentences)
        if return_loss:
            layer_views = self.layer_views(input_ids, attention_mask, token_type_ids)  # (B, K, h), no gradient
            gather = gather_across_devices and world_size() > 1
            offset = rank() * input_ids.shape[0] if gather else 0
            projected = self.projection(sentences)  # (B, d)
            if config.loss == "opt3":
                views = self.projection(layer_views)  # (B, K, d)
                everyone = gather_with_grad(views) if gather else None
                cl_loss = self_guided_opt3_loss(projected, views, config.temperature, everyone, offset)
            else:
                if view_layers is None:
                    picked, view_layers = sample_layer_views(layer_views, config.layer_sampling_weights)
                else:
                    view_layers = self._check_view_layers(view_layers, input_ids.shape[0], layer_views.shape[1])
                    picked = layer_views[torch.arange(input_ids.shape[0], device=input_ids.device), view_layers]
                views = self.projection(picked)  # (B, d)
                all_views = gather_with_grad(views) if gather else None
                if config.loss == "opt2":
                    cl_loss = self_guided_opt2_loss(projected, views, config.temperature, all_views, offset)
                else:
                    all_sentences = gather_with_grad(projected) if gather else None
                    loss_function = self_guided_base_loss if config.loss == "base" else self_guided_opt1_loss
                    cl_loss = loss_function(projected, views, config.temperature, all_sentences, all_views, offset)
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
        single = os.path.join(folder, SAFE_WEIGHTS_NAME)
        if os.path.isfile(single):
            self.contrastive.load_state_dict(load_file(single, device="cpu"), strict=True)
        elif os.path.isfile(os.path.join(folder, SAFE_WEIGHTS_INDEX_NAME)):
            load_sharded_checkpoint(self.contrastive, folder, strict=True)
        else:
            raise FileNotFoundError(
                f"No {SAFE_WEIGHTS_NAME} (or its index) in {folder}: not a checkpoint written by SelfGuidedTrainer."
            )
        head = os.path.join(folder, HEAD_FILE)
        if os.path.isfile(head):
            self.projection.load_state_dict(load_file(head, device="cpu"), strict=True)
        else:
            logger.warning("%s has no %s: the projection head f keeps its current weights.", folder, HEAD_FILE)


# ---------------------------------------------------------------------------------------------------------------
# Batches, arguments and trainer
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class SelfGuidedCollator:
    """Pads sentences into ``input_ids`` / ``attention_mask`` ``(B, T)``: SG-BERT needs each sentence once.

    Features hold ``input_ids`` (e.g. from `contrastive_hf.data.tokenize_corpus`) or raw text in ``text_column``,
    tokenized here and truncated to ``max_length``. Other columns (``example_index``...) are dropped.
    """

    tokenizer: Any
    max_length: int | None = None
    pad_to_multiple_of: int | None = None
    text_column: str = "text"

    def __post_init__(self):
        if self.tokenizer.pad_token_id is None:
            raise ValueError("The tokenizer has no padding token; set tokenizer.pad_token before collating batches.")

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        if "input_ids" in features[0]:
            sequences = [feature["input_ids"] for feature in features]
        elif self.text_column in features[0]:
            texts = [feature[self.text_column] for feature in features]
            truncate = self.max_length is not None
            sequences = self.tokenizer(texts, truncation=truncate, max_length=self.max_length)["input_ids"]
        else:
            raise ValueError(
                f"SelfGuidedCollator needs 'input_ids' or a {self.text_column!r} column, got the keys "
                f"{sorted(features[0])}; set text_column to the column holding the sentences."
            )
        input_ids, attention_mask = pad_sequences(sequences, self.tokenizer.pad_token_id, self.pad_to_multiple_of)
        return {"input_ids": input_ids, "attention_mask": attention_mask}


@dataclass
class SelfGuidedTrainingArguments(ContrastiveTrainingArguments):
    """`ContrastiveTrainingArguments` with SG-BERT's optimisation defaults (its Table 8 and released code):
    batch 16, AdamW betas (0.9, 0.9), learning rate 5e-5 (the Trainer's default), 10% linear warm-up, no weight
    decay."""

    per_device_train_batch_size: int = field(
        default=16, metadata={"help": "Sentences per device and step (SG-BERT: 16)."}
    )
    adam_beta2: float = field(default=0.9, metadata={"help": "AdamW beta2 (SG-BERT: 0.9, with beta1 0.9)."})
    warmup_steps: float = field(
        default=0.1, metadata={"help": "Warm-up steps; a value below 1 is a fraction of training (SG-BERT: 0.1)."}
    )


class SelfGuidedTrainer(ContrastiveTrainer):
    """The `ContrastiveTrainer` for a [`SelfGuidedModel`]: logs ``cl_loss`` and ``regularization_loss`` beside
    ``loss``, scores STS eval datasets with BERT_T, and saves BERT_T alone.

    What it writes:

    * ``save_model()`` (the end of training): a `ContrastiveModel` checkpoint of BERT_T (weights, config, modeling
      code, sentence-transformers files, tokenizer), loadable with ``AutoModel.from_pretrained``: no BERT_F, no f;
    * each ``checkpoint-N``: the same, plus the head f (`HEAD_FILE`) and the Trainer's optimiser and RNG states, so
      ``resume_from_checkpoint`` and ``load_best_model_at_end`` restore BERT_T and f (BERT_F is the starting
      encoder, rebuilt by the script).
    """

    def __init__(self, model=None, args=None, *more, **kwargs):
        if args is not None and getattr(args, "prebatch_size", 0):
            raise ValueError(
                "SG-BERT's negatives are the views of the current batch; a pre-batch queue (--prebatch_size) does not "
                "apply to it: leave prebatch_size at 0."
            )
        if model is not None and not isinstance(model, SelfGuidedModel):
            raise TypeError(f"SelfGuidedTrainer trains a SelfGuidedModel, got {type(model).__name__}.")
        super().__init__(model, args, *more, **kwargs)
        self._saving_checkpoint = False
        regularized = self.accelerator.unwrap_model(self.model).self_guided_config.regularization_weight > 0
        if regularized and self._zero_stage() == 3:
            raise ValueError(
                "DeepSpeed ZeRO-3 partitions every parameter across processes, so ||BERT_F - BERT_T||^2 cannot be "
                "computed locally: use ZeRO stage 1 or 2 (SG-BERT's encoders fit on one device), or "
                "regularization_weight 0."
            )

    # Logged beside ContrastiveTrainer's step metrics (cl_loss...), averaged the same way.
    step_metrics = (*STEP_METRICS, "regularization_loss")

    def _save(self, output_dir: str | None = None, state_dict: dict | None = None) -> None:
        if not self.args.should_save:
            return
        output_dir = output_dir if output_dir is not None else self.args.output_dir
        os.makedirs(output_dir, exist_ok=True)
        model = self.accelerator.unwrap_model(self.model, keep_torch_compile=False)
        tuned_state = head_state = None
        if state_dict is not None:  # consolidated by DeepSpeed / FSDP: keys of the whole training model
            tuned_state = _with_prefix(state_dict, "contrastive.")
            head_state = _with_prefix(state_dict, "projection.")
        logger.info("Saving BERT_T (the trained encoder, without the frozen copy) to %s", output_dir)
        model.contrastive.save_pretrained(output_dir, state_dict=tuned_state)
        if self._saving_checkpoint:
            head_state = head_state if head_state is not None else model.projection.state_dict()
            save_file(
                {k: v.detach().contiguous().cpu() for k, v in head_state.items()}, os.path.join(output_dir, HEAD_FILE)
            )
        if self.processing_class is not None:
            self.processing_class.save_pretrained(output_dir)
        torch.save(self.args, os.path.join(output_dir, TRAINING_ARGS_NAME))

    def _save_checkpoint(self, model, trial) -> None:
        self._saving_checkpoint = True  # checkpoints also carry the head f, for an exact resume
        try:
            super()._save_checkpoint(model, trial)
        finally:
            self._saving_checkpoint = False

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model=None) -> None:
        if self.is_fsdp_enabled:
            return super()._load_from_checkpoint(resume_from_checkpoint, model)
        self.accelerator.unwrap_model(model if model is not None else self.model).load_checkpoint(
            resume_from_checkpoint
        )

    def _load_best_model(self) -> None:
        if self.is_deepspeed_enabled or self.is_fsdp_enabled:
            return super()._load_best_model()
        logger.info(
            "Loading the best BERT_T from %s (score: %s).", self.state.best_model_checkpoint, self.state.best_metric
        )
        self.accelerator.unwrap_model(self.model).load_checkpoint(self.state.best_model_checkpoint)


def _with_prefix(state_dict: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    return {key[len(prefix) :]: value for key, value in state_dict.items() if key.startswith(prefix)}
