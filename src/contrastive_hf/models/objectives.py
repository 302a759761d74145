"""The in-batch contrastive objective every model of the library trains with, written once.

A batch is a ``(B, S, d)`` tensor of view embeddings: view 0 is each sentence's query (anchor), view 1 its positive,
and views 2.. (InfoNCE only) its hard negatives. `in_batch_loss` does what every model needs around the loss
function itself:

1. with several processes, gather the views of every process (with gradient) and their sentence ids (without),
   accepting a different batch size on each process (a ragged last batch, uneven streamed shards), and find where
   this process's rows sit in the global batch (its offset);
2. hand the batch (`InBatchViews`) to the registered loss named ``contrastive_loss`` (`register_loss`), which leaves
   copies of a sentence out of its own softmax (`losses.duplicate_mask` on the collators' ``sentence_ids``) and
   scores this process's queries against the global batch: `losses.info_nce` (SimCSE, DPR) or `losses.nt_xent`
   (SimCLR, CLEAR), under cosine or dot-product similarity;
3. with Matryoshka dimensions (Kusupati et al., 2022), the loss does 2. on the first m dimensions of every vector for
   each m and returns the weighted sum (`matryoshka_loss`), gathering and masking once.

The mean over processes of the returned loss is the global batch's loss (each process's mean weighted by its share
of the rows when the sizes differ, `distributed.share_of_global_mean`), and DDP's (or DeepSpeed's) gradient
averaging makes its gradient exact (`distributed.py`). Like the rest of ``models/``, this file imports torch and its
siblings only.

A loss of one's own is one function of an `InBatchViews` and one `register_loss` call: `ContrastiveConfig` accepts
its name as ``contrastive_loss``, the scripts' ``--contrastive_loss`` help lists it, and the model card names it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from .distributed import gather_global_batch, gather_no_grad, share_of_global_mean
from .losses import SIMILARITIES, duplicate_mask, info_nce, loss_dtype, nt_xent
from .registry import Registry

__all__ = [
    "IN_BATCH_LOSSES",
    "UNKNOWN_SENTENCE_ID",
    "InBatchViews",
    "LossSpec",
    "LOSSES",
    "register_loss",
    "unregister_loss",
    "get_loss",
    "loss_names",
    "in_batch_loss",
    "matryoshka_loss",
    "cached_gradient_surrogate",
]

# The id of a queued key whose sentence is unknown (a queue filled without sentence ids): never left out.
UNKNOWN_SENTENCE_ID = -1


@dataclass
class InBatchViews:
    """A batch as a registered loss receives it from `in_batch_loss` (gathered, not yet scored).

    Attributes:
        embeddings: ``(B, S, d)`` this process's views: query, positive, then ``S - 2`` hard negatives.
        everyone: ``(M, S, d)`` the views of every process in rank order (``embeddings`` itself without gathering).
        offset: where this process's rows start in ``everyone``.
        sentence_ids: ``(B, S)`` this process's sentence ids, or None; ``everyone_ids``: ``(M, S)`` every process's.
        extra_negatives: ``(K, d)`` negatives of every query (a pre-batch queue), or None; ``extra_negative_ids``
            their ``(K,)`` sentence ids (`UNKNOWN_SENTENCE_ID` for unknown ones), or None.
        temperature, similarity, hard_negative_weight: as `in_batch_loss` takes them.
        matryoshka_dims, matryoshka_weights: as `in_batch_loss` takes them (apply with `matryoshka_loss`).
    """

    embeddings: torch.Tensor
    everyone: torch.Tensor
    offset: int
    sentence_ids: torch.Tensor | None
    everyone_ids: torch.Tensor | None
    extra_negatives: torch.Tensor | None
    extra_negative_ids: torch.Tensor | None
    temperature: float
    similarity: str
    hard_negative_weight: float
    matryoshka_dims: Sequence[int] | None
    matryoshka_weights: Sequence[float] | None


@dataclass(frozen=True)
class LossSpec:
    """Everything about one in-batch loss.

    Attributes:
        name: its ``contrastive_loss``.
        compute: ``InBatchViews -> (loss, negatives per query)``: this process's mean loss (before its share of the
            global batch is taken) and the number of negatives in each query's softmax (a tensor, or a host number).
        description: what it contrasts, in words (the model card's and ``--help``'s text).
        takes_extra_negatives: it scores views 2.. (hard negatives) and queued extra negatives (``--prebatch_size``).
    """

    name: str
    compute: Callable[[InBatchViews], tuple[torch.Tensor, torch.Tensor | float]]
    description: str
    takes_extra_negatives: bool = False


# A checkpoint names its loss, but loading and encoding it never compute the loss: only training needs it registered.
LOSSES: Registry[LossSpec] = Registry(
    "contrastive_loss",
    "contrastive_hf.models.objectives.register_loss",
    needed="training with it (loading and encoding a model do not need it)",
)


def register_loss(
    name: str,
    compute: Callable[[InBatchViews], tuple[torch.Tensor, torch.Tensor | float]],
    description: str,
    *,
    takes_extra_negatives: bool = False,
    replace: bool = False,
) -> LossSpec:
    """Offer an in-batch loss to every part of the library (see `LossSpec` for the arguments); returns its spec."""
    return LOSSES.add(name, LossSpec(name, compute, description, takes_extra_negatives), replace=replace)


def unregister_loss(name: str) -> LossSpec:
    return LOSSES.remove(name)


def get_loss(name: str) -> LossSpec:
    """The spec of ``contrastive_loss`` ``name``; a `ValueError` naming the registered losses where there is none."""
    return LOSSES.get(name)


def loss_names() -> tuple[str, ...]:
    return LOSSES.names()


IN_BATCH_LOSSES = LOSSES.names_view()  # the registered losses, read at each use


def in_batch_loss(
    embeddings: torch.Tensor,
    loss: str = "info_nce",
    temperature: float = 0.05,
    similarity: str = "cosine",
    hard_negative_weight: float = 0.0,
    sentence_ids: torch.Tensor | None = None,
    extra_negatives: torch.Tensor | None = None,
    extra_negative_ids: torch.Tensor | None = None,
    gather_across_devices: bool = False,
    matryoshka_dims: Sequence[int] | None = None,
    matryoshka_weights: Sequence[float] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The contrastive loss of a batch of views, and the mean number of negatives each query was contrasted with.

    Args:
        embeddings: ``(B, S, d)`` views: query, positive, then ``S - 2`` hard negatives of each sentence.
        loss: ``info_nce`` (queries against positives, hard negatives and extra negatives) or ``nt_xent`` (the 2B
            views of a pair batch, each against all others; exactly two views and no extra negatives).
        temperature: tau.
        similarity: ``cosine`` or ``dot`` (DPR's inner product).
        hard_negative_weight: SimCSE's weight added to the logits of each query's own hard negatives.
        sentence_ids: optional ``(B, S)`` ids of the views' sentences (the collators' content hashes): a column
            holding the same sentence as a query or its positive is left out of that query's softmax.
        extra_negatives: optional ``(K, d)`` negatives of every query (a pre-batch queue); InfoNCE only.
        extra_negative_ids: optional ``(K,)`` their sentence ids (`UNKNOWN_SENTENCE_ID` for unknown ones).
        gather_across_devices: with several processes, contrast this process's queries with the views of every
            process (the global batch), which may hold a different number of sentences each.
        matryoshka_dims: Matryoshka representation learning: the loss is ``sum_m w_m * loss(first m dimensions)``
            over these sizes (every vector, queued ones too, truncated; cosine similarities renormalise the
            truncated vectors); None: the loss on whole vectors.
        matryoshka_weights: ``w_m``, one per dimension (default 1 each).

    Returns:
        ``(loss, negatives_per_query)``: the mean loss of this process's queries (float32, float64 for float64
        embeddings; scaled by the process's share of the global batch when the processes' sizes differ, so that the
        mean over processes is the global batch's loss), and the mean number of negatives in their softmax after
        duplicates are left out (a detached float32 scalar).

    Example:

    ```python
    >>> views = torch.randn(8, 2, 32)  # 8 sentences, two views each
    >>> loss, negatives = in_batch_loss(views, loss="nt_xent", temperature=0.05)
    >>> int(negatives)  # each view against the 2 * 8 - 2 views of the other sentences
    14
    ```
    """
    if embeddings.dim() != 3:
        raise ValueError(f"in_batch_loss takes (batch, views, dim) embeddings, got shape {tuple(embeddings.shape)}.")
    spec = get_loss(loss)
    if similarity not in SIMILARITIES:
        raise ValueError(f"Unknown similarity {similarity!r}: choose one of {', '.join(SIMILARITIES)}.")
    everyone, everyone_ids, offset, sizes = embeddings, sentence_ids, 0, None
    if gather_across_devices:
        everyone, offset, sizes = gather_global_batch(embeddings)  # (M, S, d), in rank order; sizes may differ
        if sizes is not None and sentence_ids is not None:
            everyone_ids = gather_no_grad(sentence_ids, sizes)
    views = InBatchViews(
        embeddings,
        everyone,
        offset,
        sentence_ids,
        everyone_ids,
        extra_negatives,
        extra_negative_ids,
        temperature,
        similarity,
        hard_negative_weight,
        matryoshka_dims,
        matryoshka_weights,
    )
    value, negatives = spec.compute(views)
    return share_of_global_mean(value, sizes), _mean_count(negatives, embeddings.device)


def nt_xent_in_batch(views: InBatchViews) -> tuple[torch.Tensor, torch.Tensor | float]:
    """NT-Xent (SimCLR, CLEAR) over a batch of pairs: each of the 2B local views against the 2M - 2 views of the other
    sentences of the global batch."""
    embeddings, everyone, offset, sentence_ids = views.embeddings, views.everyone, views.offset, views.sentence_ids
    batch_size, num_views = embeddings.shape[:2]
    total = everyone.shape[0]
    if num_views != 2 or views.extra_negatives is not None:
        raise ValueError(
            f"contrastive_loss='nt_xent' takes exactly two views and no extra negatives (got {num_views} views); "
            "use contrastive_loss='info_nce' for hard negatives or a pre-batch queue."
        )
    mask = None
    if sentence_ids is not None:
        local = torch.arange(batch_size, device=embeddings.device)
        rows = torch.cat([sentence_ids[:, 0], sentence_ids[:, 1]])  # (2B,) the local views
        columns = torch.cat([views.everyone_ids[:, 0], views.everyone_ids[:, 1]])  # (2M,) every view
        mask = duplicate_mask(rows, columns, torch.cat([local + total, local]) + offset)
        own = torch.cat([local, local + total]) + offset
        view_rows = torch.arange(2 * batch_size, device=mask.device)
        mask = mask.index_put((view_rows, own), mask.new_zeros(()))  # nt_xent leaves a view's own out

    def loss_at(width: int | None) -> torch.Tensor:
        mine, all_views = embeddings[..., :width], everyone[..., :width]
        return nt_xent(
            mine[:, 0],
            mine[:, 1],
            views.temperature,
            all_views[:, 0],
            all_views[:, 1],
            offset,
            negatives_mask=mask,
            similarity=views.similarity,
        )

    left_out = 0.0 if mask is None else mask.sum(dim=1).float()  # (2B,)
    value = matryoshka_loss(loss_at, views.matryoshka_dims, views.matryoshka_weights)
    return value, 2 * total - 2 - left_out


def info_nce_in_batch(views: InBatchViews) -> tuple[torch.Tensor, torch.Tensor | float]:
    """InfoNCE (SimCSE, DPR): each local query against every positive of the global batch, the hard negatives
    (views 2..) and the extra negatives."""
    embeddings, everyone, offset, sentence_ids = views.embeddings, views.everyone, views.offset, views.sentence_ids
    extra_negatives, extra_negative_ids = views.extra_negatives, views.extra_negative_ids
    batch_size, num_views = embeddings.shape[:2]
    total = everyone.shape[0]
    if num_views < 2:
        raise ValueError(f"info_nce takes a query and a positive (and hard negatives), got {num_views} view(s).")
    num_hard = num_views - 2
    num_extra = 0 if extra_negatives is None else extra_negatives.shape[0]
    columns = total * (1 + num_hard) + num_extra  # positives, hard negatives, extra negatives
    mask = None
    if sentence_ids is not None:
        everyone_ids = views.everyone_ids
        local = torch.arange(batch_size, device=embeddings.device)
        column_ids = [everyone_ids[:, 1]] + ([everyone_ids[:, 2:].reshape(-1)] if num_hard else [])
        if num_extra:
            if extra_negative_ids is None:
                extra_negative_ids = torch.full((num_extra,), UNKNOWN_SENTENCE_ID, dtype=sentence_ids.dtype)
            column_ids.append(extra_negative_ids.to(sentence_ids.device))
        mask = duplicate_mask(sentence_ids[:, :2], torch.cat(column_ids), local + offset)  # rows: query, positive
        if num_extra:
            unknown = column_ids[-1] == UNKNOWN_SENTENCE_ID  # (K,) never left out
            mask[:, columns - num_extra :] &= ~unknown

    def loss_at(width: int | None) -> torch.Tensor:
        return info_nce(
            embeddings[:, 0, :width],
            everyone[:, 1, :width],
            views.temperature,
            hard_negatives=everyone[:, 2:, :width] if num_hard else None,
            hard_negative_weight=views.hard_negative_weight,
            extra_negatives=extra_negatives[:, :width] if num_extra else None,
            negatives_mask=mask,
            positive_offset=offset,
            similarity=views.similarity,
        )

    left_out = 0.0 if mask is None else mask.sum(dim=1).float()  # (B,)
    value = matryoshka_loss(loss_at, views.matryoshka_dims, views.matryoshka_weights)
    return value, columns - 1 - left_out


register_loss(
    "nt_xent",
    nt_xent_in_batch,
    "NT-Xent (SimCLR, CLEAR), each of the 2N views of N pairs against the other 2N - 2 views",
)
register_loss(
    "info_nce",
    info_nce_in_batch,
    "InfoNCE (SimCSE, DPR), each query against every positive of the batch, the hard negatives and queued negatives",
    takes_extra_negatives=True,
)


def matryoshka_loss(
    loss_at: Callable[[int | None], torch.Tensor],
    dims: Sequence[int] | None = None,
    weights: Sequence[float] | None = None,
) -> torch.Tensor:
    """Matryoshka representation learning (Kusupati et al., 2022; sentence-transformers' ``MatryoshkaLoss``):
    ``sum_m weights[m] * loss_at(m)`` over the sizes ``dims``, ``loss_at(m)`` being the loss computed on the first m
    dimensions of every embedding; ``loss_at(None)`` (the whole vectors) without ``dims``. The weights default to 1.

    Trained this way, the first m dimensions of an embedding are an embedding of their own (``encode(...,
    truncate_dim=m)``), for any m of ``dims``.
    """
    if not dims:
        return loss_at(None)
    weights = [1.0] * len(dims) if weights is None else list(weights)
    if len(weights) != len(dims):
        raise ValueError(f"{len(dims)} Matryoshka dimensions {list(dims)} but {len(weights)} weights {weights}.")
    return sum(weight * loss_at(int(dim)) for dim, weight in zip(dims, weights, strict=True))


def _mean_count(counts, device: torch.device) -> torch.Tensor:
    """The mean of ``counts`` (a tensor, or a host number: filled on the device, never copied from the host)."""
    if not torch.is_tensor(counts):
        return torch.full((), float(counts), dtype=torch.float32, device=device)
    return counts.float().mean().detach()


def cached_gradient_surrogate(embeddings: torch.Tensor, cached_gradients: torch.Tensor) -> torch.Tensor:
    """GradCache's replayed loss for one chunk: ``sum(embeddings * cached_gradients)``, in float32 at least.

    ``cached_gradients`` is the gradient of the whole batch's contrastive loss with respect to this chunk's
    embeddings, so the parameter gradient of this scalar is the chunk's share of the whole batch's
    (`contrastive_hf.training.grad_cache`).
    """
    dtype = loss_dtype(embeddings, cached_gradients)
    return (embeddings.to(dtype) * cached_gradients.to(dtype)).sum()
