"""SG-BERT's views and losses (the formulas: this package's docstring): the losses as functions, and `SelfGuidedLoss`,
the module a `SelfGuidedModel` holds as its ``loss_fn`` (its variant, temperature and cross-device gathering).
``base`` and ``opt2`` are cases of the library's in-batch losses (`models.objectives.NTXentLoss` and `InfoNCELoss`);
``opt1`` and ``opt3`` have denominators of their own, computed here on the same global batch
(`distributed.gather_global_batch`)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ...models.distributed import gather_global_batch, share_of_global_mean
from ...models.losses import cosine_logits
from ...models.objectives import InfoNCELoss, NTXentLoss

__all__ = [
    "LAYER_POOLINGS",
    "pool_layers",
    "sample_layer_views",
    "self_guided_base_loss",
    "self_guided_opt1_loss",
    "self_guided_opt2_loss",
    "self_guided_opt3_loss",
    "SelfGuidedLoss",
    "SELF_GUIDED_LOSSES",
    "parameter_distance",
]

LAYER_POOLINGS = ("max", "mean")


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
    sentences: torch.Tensor, views: torch.Tensor, temperature: float, gather_across_devices: bool = False
) -> torch.Tensor:
    r"""SG's :math:`L^{base}` (§3.1): NT-Xent over the 2b vectors :math:`\{c_i\} \cup \{h_i\}`, the positive of each
    being the other half of its pair (the matching function :math:`\mu`), the mean over the 2b anchors: the library's
    in-batch NT-Xent (`models.objectives.NTXentLoss`) on the pairs :math:`(c_i, h_i)`.

    Args:
        sentences: ``(b, d)`` projected sentence vectors :math:`f(c_i)`.
        views: ``(b, d)`` projected sampled views :math:`f(h_i)`.
        temperature: tau.
        gather_across_devices: with several processes, contrast with the pairs of every process (which may hold
            different numbers of sentences); the returned loss is then this process's share of the global batch's
            mean (`distributed.share_of_global_mean`), as for every loss here.
    """
    pairs = torch.stack([sentences, views], dim=1)  # (b, 2, d)
    return NTXentLoss(temperature, gather_across_devices=gather_across_devices)(pairs)[0]


def self_guided_opt1_loss(
    sentences: torch.Tensor, views: torch.Tensor, temperature: float, gather_across_devices: bool = False
) -> torch.Tensor:
    r""":math:`L^{opt1}` (§3.2): :math:`L^{base}` with only the anchors :math:`c_i` (BERT_F is not trained, so the
    terms anchored on an :math:`h` teach nothing); each :math:`c_i` is still contrasted with the other 2b - 1 vectors:

    .. math:: -\log \frac{\phi(c_i, h_i)}{\sum_{j \ne i} \phi(c_i, c_j) + \sum_j \phi(c_i, h_j)}

    averaged over the b anchors. Arguments as `self_guided_base_loss`.
    """
    pairs, offset, sizes = _global_batch(torch.stack([sentences, views], dim=1), gather_across_devices)  # (M, 2, d)
    batch, total = sentences.shape[0], pairs.shape[0]
    logits = cosine_logits(sentences, torch.cat([pairs[:, 0], pairs[:, 1]], dim=0), temperature)  # (b, 2M)
    rows = torch.arange(batch, device=logits.device)
    itself = torch.tensor(float("-inf"), dtype=logits.dtype, device=logits.device)
    logits = logits.index_put((rows, rows + offset), itself)  # a sentence is not its own negative
    return share_of_global_mean(F.cross_entropy(logits, rows + offset + total), sizes)


def self_guided_opt2_loss(
    sentences: torch.Tensor, views: torch.Tensor, temperature: float, gather_across_devices: bool = False
) -> torch.Tensor:
    r""":math:`L^{opt2}` (§3.2): :math:`L^{opt1}` without the other sentences' :math:`c_j` among the negatives:

    .. math:: -\log \frac{\phi(c_i, h_i)}{\sum_j \phi(c_i, h_j)}

    averaged over the b anchors: InfoNCE of the :math:`c` (queries) against the :math:`h` (keys), the library's
    in-batch InfoNCE (`models.objectives.InfoNCELoss`). Arguments as `self_guided_base_loss`.
    """
    pairs = torch.stack([sentences, views], dim=1)  # (b, 2, d)
    return InfoNCELoss(temperature, gather_across_devices=gather_across_devices)(pairs)[0]


def self_guided_opt3_loss(
    sentences: torch.Tensor, layer_views: torch.Tensor, temperature: float, gather_across_devices: bool = False
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
        gather_across_devices: as `self_guided_base_loss`: the views of every process are negatives.
    """
    all_layer_views, offset, sizes = _global_batch(layer_views, gather_across_devices)  # (M, l + 1, d)
    batch = sentences.shape[0]
    total, num_layers, size = all_layer_views.shape
    logits = cosine_logits(sentences, all_layer_views.reshape(total * num_layers, size), temperature)
    logits = logits.view(batch, total, num_layers)  # (b, M, K)
    rows = torch.arange(batch, device=logits.device)
    positives = logits[rows, rows + offset]  # (b, K)
    negatives = logits.index_put((rows, rows + offset), logits.new_full((), float("-inf")))
    negative_mass = negatives.flatten(1).logsumexp(dim=1, keepdim=True)  # (b, 1): log sum over m != i, all n
    return share_of_global_mean((torch.logaddexp(positives, negative_mass) - positives).mean(), sizes)


class SelfGuidedLoss(nn.Module):
    """SG-BERT's contrastive loss ``variant`` (``base``, ``opt1``, ``opt2`` or ``opt3``, `SELF_GUIDED_LOSSES`) at
    ``temperature``, gathering the views of every process when ``gather_across_devices`` (`ContrastiveTrainer` sets
    it, as for every model's ``loss_fn``). Called on the projected sentence vectors ``(b, d)`` and their views
    (``(b, d)``; ``(b, l + 1, d)`` for opt3)."""

    takes_extra_negatives = False

    def __init__(self, variant: str, temperature: float, gather_across_devices: bool = False):
        super().__init__()
        if variant not in SELF_GUIDED_LOSSES:
            raise ValueError(f"Unknown SG-BERT loss {variant!r}: choose one of {', '.join(SELF_GUIDED_LOSSES)}.")
        self.variant, self.temperature, self.gather_across_devices = variant, temperature, gather_across_devices

    def extra_repr(self) -> str:
        return f"variant={self.variant!r}, temperature={self.temperature}"

    @torch.compiler.disable  # gathers across processes: run as written under torch.compile, as every model's loss
    def forward(self, sentences: torch.Tensor, views: torch.Tensor) -> torch.Tensor:
        return _VARIANTS[self.variant](sentences, views, self.temperature, self.gather_across_devices)


_VARIANTS = {
    "base": self_guided_base_loss,
    "opt1": self_guided_opt1_loss,
    "opt2": self_guided_opt2_loss,
    "opt3": self_guided_opt3_loss,
}
SELF_GUIDED_LOSSES = tuple(_VARIANTS)


def _global_batch(tensor: torch.Tensor, gather_across_devices: bool) -> tuple[torch.Tensor, int, list[int] | None]:
    """``(global batch, this process's offset in it, every process's size)``: `distributed.gather_global_batch`
    when gathering, else this process's batch alone."""
    return gather_global_batch(tensor) if gather_across_devices else (tensor, 0, None)


def parameter_distance(reference: nn.Module, model: nn.Module) -> torch.Tensor:
    r""":math:`\|\theta_{ref} - \theta\|_2^2`, summed over the parameters of ``model`` that are trained, each paired
    with the same-named parameter of ``reference`` (SG-BERT's :math:`L^{reg}` with reference = BERT_F).

    Frozen parameters are skipped: they cannot move away from the reference. The gradient flows into ``model`` only
    when ``reference`` is frozen. Computed in float32.

    A ``model`` that trains a LoRA adapter on frozen weights the reference shares (``--lora_r``) moves each adapted
    weight by the adapter's delta (``scaling * B @ A``): its term is that delta's squared norm.
    """
    from ...hub.adapters import adapter_weight_deltas, is_adapter_parameter

    reference_parameters = dict(reference.named_parameters())
    terms = [delta.float().pow(2).sum() for delta in adapter_weight_deltas(model)]
    for name, parameter in model.named_parameters():
        if not parameter.requires_grad or is_adapter_parameter(name):
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
