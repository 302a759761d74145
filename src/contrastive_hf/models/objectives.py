"""The in-batch contrastive losses every model of the library trains with, as modules that own their settings.

A loss is a `ContrastiveLoss`: an ``nn.Module`` holding its temperature, similarity and hard-negative weight, whether
it gathers the views of every process, and its state (the pre-batch queue, `prebatch_queue.PrebatchQueue`). Called on
a ``(B, S, d)`` tensor of view embeddings (view 0 each sentence's query or anchor, view 1 its positive, views 2.. its
hard negatives), it

1. with ``gather_across_devices`` and several processes, gathers the views of every process (with gradient) and
   their sentence ids (without), accepting a different batch size on each process (a ragged last batch, uneven
   streamed shards), and finds where this process's rows sit in the global batch (its offset);
2. in training, adds the queued keys of earlier batches as negatives of every query, and queues this batch's keys
   after scoring it;
3. scores the batch (`ContrastiveLoss.compute`, what a loss class writes): `InfoNCELoss` (SimCSE, DPR) or
   `NTXentLoss` (SimCLR, CLEAR), each leaving copies of a sentence out of its own softmax (`losses.duplicate_mask`
   on the collators' ``sentence_ids``), under cosine or dot-product similarity. `MatryoshkaLoss` wraps any loss
   (Kusupati et al., 2022; sentence-transformers' ``MatryoshkaLoss``): the weighted sum of the inner loss on the
   first m dimensions of every vector, gathering and queueing once.

The mean over processes of the returned loss is the global batch's loss (each process's mean weighted by its share
of the rows when the sizes differ, `distributed.share_of_global_mean`), and DDP's (or DeepSpeed's) gradient
averaging makes its gradient exact (`distributed.py`).

A model builds its loss from its config (`build_loss`: the class registered under ``contrastive_loss``, with the
config's temperature, similarity and Matryoshka dimensions) and holds it as ``loss_fn``; ``ContrastiveTrainer(...,
loss=...)`` hands it another. A loss of one's own is a subclass with a ``name`` and a `compute`, and one
`register_loss` call: `ContrastiveConfig` accepts its name as ``contrastive_loss``, the scripts'
``--contrastive_loss`` help lists it, and the model card names it. Like the rest of ``models/``, this file imports
torch and its siblings only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import ClassVar

import torch
from torch import nn

from .distributed import gather_global_batch, gather_no_grad, share_of_global_mean
from .losses import SIMILARITIES, duplicate_mask, info_nce, loss_dtype, nt_xent
from .prebatch_queue import PrebatchQueue
from .registry import Registry

__all__ = [
    "UNKNOWN_SENTENCE_ID",
    "InBatchViews",
    "ContrastiveLoss",
    "InfoNCELoss",
    "NTXentLoss",
    "MatryoshkaLoss",
    "LOSSES",
    "register_loss",
    "unregister_loss",
    "get_loss",
    "loss_names",
    "build_loss",
    "build_registered_loss",
    "cached_gradient_surrogate",
]

# The id of a queued key whose sentence is unknown (a queue filled without sentence ids): never left out.
UNKNOWN_SENTENCE_ID = -1


@dataclass
class InBatchViews:
    """A batch as a loss's `ContrastiveLoss.compute` receives it: gathered, with the queued negatives, not yet scored.

    Attributes:
        embeddings: ``(B, S, d)`` this process's views: query, positive, then ``S - 2`` hard negatives.
        everyone: ``(M, S, d)`` the views of every process in rank order (``embeddings`` itself without gathering).
        offset: where this process's rows start in ``everyone``.
        sentence_ids: ``(B, S)`` this process's sentence ids, or None; ``everyone_ids``: ``(M, S)`` every process's.
        extra_negatives: ``(K, d)`` negatives of every query (the pre-batch queue), or None; ``extra_negative_ids``
            their ``(K,)`` sentence ids (`UNKNOWN_SENTENCE_ID` for unknown ones), or None.
    """

    embeddings: torch.Tensor
    everyone: torch.Tensor
    offset: int
    sentence_ids: torch.Tensor | None = None
    everyone_ids: torch.Tensor | None = None
    extra_negatives: torch.Tensor | None = None
    extra_negative_ids: torch.Tensor | None = None

    def truncated(self, width: int) -> InBatchViews:
        """The same batch with the first ``width`` dimensions of every vector (queued ones too)."""
        extra = None if self.extra_negatives is None else self.extra_negatives[:, :width]
        return replace(
            self, embeddings=self.embeddings[..., :width], everyone=self.everyone[..., :width], extra_negatives=extra
        )


class ContrastiveLoss(nn.Module):
    """An in-batch contrastive loss: its settings, its cross-device gathering and its state (see the module's text).

    Args:
        temperature: tau > 0 (1 for DPR's unscaled inner products).
        similarity: ``cosine`` or ``dot`` (DPR's inner product).
        hard_negative_weight: SimCSE's weight added to the logits of each query's own hard negatives.
        gather_across_devices: with several processes, contrast this process's queries with the views of every
            process (the global batch); `ContrastiveTrainer` sets it from ``gather_negatives_across_devices``.

    Attributes:
        prebatch: the pre-batch queue (`PrebatchQueue`) whose keys are negatives of every query in training, or None;
            `use_prebatch` builds it (`ContrastiveTrainer` calls it with ``prebatch_size``).

    A loss with state takes part in training through four calls, which `ContrastiveTrainer` makes for any loss
    without knowing what the state is: `on_step_begin` and `on_epoch_begin` (a callback), `step_metrics` (logged
    with the step's), and `loss_state` / `load_loss_state` (a checkpoint's file, when `has_state`).

    A subclass sets ``name`` (its ``contrastive_loss``), ``description`` (the model card's and ``--help``'s words),
    ``takes_extra_negatives`` (it scores views 2.. and queued keys), and writes `compute`.
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    takes_extra_negatives: ClassVar[bool] = False

    def __init__(
        self,
        temperature: float = 0.05,
        similarity: str = "cosine",
        hard_negative_weight: float = 0.0,
        gather_across_devices: bool = False,
    ):
        super().__init__()
        if similarity not in SIMILARITIES:
            raise ValueError(f"Unknown similarity {similarity!r}: choose one of {', '.join(SIMILARITIES)}.")
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature}.")
        self.temperature = float(temperature)
        self.similarity = similarity
        self.hard_negative_weight = float(hard_negative_weight)
        self.gather_across_devices = gather_across_devices
        self.prebatch: PrebatchQueue | None = None
        self.prebatch_reset_each_epoch = False

    @classmethod
    def from_config(cls, config) -> ContrastiveLoss:
        """The loss with a model config's ``temperature``, ``similarity`` and ``hard_negative_weight``."""
        return cls(
            temperature=config.temperature,
            similarity=getattr(config, "similarity", "cosine"),
            hard_negative_weight=getattr(config, "hard_negative_weight", 0.0),
        )

    def extra_repr(self) -> str:
        return f"temperature={self.temperature}, similarity={self.similarity!r}"

    @torch.compiler.disable  # gathers, reads and fills its queue (host state): run as written under torch.compile
    def forward(
        self, embeddings: torch.Tensor, sentence_ids: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The loss of a batch of views, and the mean number of negatives each query was contrasted with.

        Args:
            embeddings: ``(B, S, d)`` views: query, positive, then ``S - 2`` hard negatives of each sentence.
            sentence_ids: optional ``(B, S)`` ids of the views' sentences (the collators' content hashes): a column
                holding the same sentence as a query or its positive is left out of that query's softmax.

        Returns:
            ``(loss, negatives_per_query)``: the mean loss of this process's queries (float32, float64 for float64
            embeddings; scaled by the process's share of the global batch when the processes' sizes differ, so that
            the mean over processes is the global batch's loss), and the mean number of negatives in their softmax
            after duplicates are left out (a detached float32 scalar).

        Example:

        ```python
        >>> views = torch.randn(8, 2, 32)  # 8 sentences, two views each
        >>> loss, negatives = NTXentLoss(temperature=0.05)(views)
        >>> int(negatives)  # each view against the 2 * 8 - 2 views of the other sentences
        14
        ```
        """
        if embeddings.dim() != 3:
            raise ValueError(
                f"A contrastive loss takes (batch, views, dim) embeddings, got {tuple(embeddings.shape)}."
            )
        everyone, everyone_ids, offset, sizes = embeddings, sentence_ids, 0, None
        if self.gather_across_devices:
            everyone, offset, sizes = gather_global_batch(embeddings)  # (M, S, d), in rank order; sizes may differ
            if sizes is not None and sentence_ids is not None:
                everyone_ids = gather_no_grad(sentence_ids, sizes)
        queue = self.prebatch if self.training else None
        views = InBatchViews(
            embeddings,
            everyone,
            offset,
            sentence_ids,
            everyone_ids,
            None if queue is None else queue.negatives(),
            None if queue is None else queue.negative_ids(),
        )
        value, negatives = self.compute(views)
        if queue is not None:  # this batch's keys are the next batches' negatives
            queue.push(embeddings[:, 1], None if sentence_ids is None else sentence_ids[:, 1])
        return share_of_global_mean(value, sizes), _mean_count(negatives, embeddings.device)

    def compute(self, views: InBatchViews) -> tuple[torch.Tensor, torch.Tensor | float]:
        """``(loss, negatives per query)``: this process's mean loss over its queries (before its share of the global
        batch is taken) and the number of negatives in each query's softmax (a tensor, or a host number)."""
        raise NotImplementedError(f"{type(self).__name__} must implement compute(views).")

    def use_prebatch(self, num_batches: int, warmup_steps: int = 0, reset_each_epoch: bool = False) -> None:
        """Contrast every training query with the keys of the last ``num_batches`` batches as well (DensePhrases'
        pre-batch negatives, `PrebatchQueue`): none before ``warmup_steps`` optimisation steps, and none of an
        earlier epoch with ``reset_each_epoch``. Only a loss that ``takes_extra_negatives`` can."""
        if not self.takes_extra_negatives:
            takers = [loss_class.name for loss_class in LOSSES if loss_class.takes_extra_negatives]
            raise ValueError(
                f"The {self.name or type(self).__name__!r} loss takes no extra negatives, so it cannot contrast "
                f"queries with a pre-batch queue's keys; use one that does ({', '.join(takers)})."
            )
        self.prebatch = PrebatchQueue(num_batches, warmup_steps)
        self.prebatch_reset_each_epoch = reset_each_epoch

    @property
    def has_state(self) -> bool:
        """Whether the loss holds state that an exact resume needs (`loss_state`): its pre-batch queue."""
        return self.prebatch is not None

    def on_step_begin(self, step: int) -> None:
        """Optimisation step ``step`` (those done so far) begins: the queue's warm-up counts them."""
        if self.prebatch is not None:
            self.prebatch.step = step

    def on_epoch_begin(self) -> None:
        """An epoch begins: with ``prebatch_reset_each_epoch``, the queue drops the previous epoch's keys."""
        if self.prebatch is not None and self.prebatch_reset_each_epoch:
            self.prebatch.reset()

    def step_metrics(self) -> dict[str, float]:
        """What the trainer logs of the loss beside the step's losses: ``queue_fill``, how full the queue was when
        the last training batch read it (a host number)."""
        return {} if self.prebatch is None else {"queue_fill": self.prebatch.fill_used}

    def loss_state(self) -> dict[str, torch.Tensor]:
        """What a checkpoint saves of this loss for an exact resume: its queue's keys and ids (none without one)."""
        return {} if self.prebatch is None else self.prebatch.state_dict()

    def load_loss_state(self, state: dict[str, torch.Tensor], device: torch.device | str = "cpu") -> None:
        if self.prebatch is not None:
            self.prebatch.load_state_dict(state, device=device)


class NTXentLoss(ContrastiveLoss):
    """NT-Xent (SimCLR, CLEAR) over a batch of pairs: each of the 2B local views against the 2M - 2 views of the other
    sentences of the global batch (`losses.nt_xent`)."""

    name = "nt_xent"
    description = "NT-Xent (SimCLR, CLEAR), each of the 2N views of N pairs against the other 2N - 2 views"

    def compute(self, views: InBatchViews) -> tuple[torch.Tensor, torch.Tensor | float]:
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
        value = nt_xent(
            embeddings[:, 0],
            embeddings[:, 1],
            self.temperature,
            everyone[:, 0],
            everyone[:, 1],
            offset,
            negatives_mask=mask,
            similarity=self.similarity,
        )
        left_out = 0.0 if mask is None else mask.sum(dim=1).float()  # (2B,)
        return value, 2 * total - 2 - left_out


class InfoNCELoss(ContrastiveLoss):
    """InfoNCE (SimCSE, DPR): each local query against every positive of the global batch, the hard negatives (views
    2..) and the queued negatives (`losses.info_nce`)."""

    name = "info_nce"
    description = (
        "InfoNCE (SimCSE, DPR), each query against every positive of the batch, the hard negatives and queued "
        "negatives"
    )
    takes_extra_negatives = True

    def compute(self, views: InBatchViews) -> tuple[torch.Tensor, torch.Tensor | float]:
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
        value = info_nce(
            embeddings[:, 0],
            everyone[:, 1],
            self.temperature,
            hard_negatives=everyone[:, 2:] if num_hard else None,
            hard_negative_weight=self.hard_negative_weight,
            extra_negatives=extra_negatives if num_extra else None,
            negatives_mask=mask,
            positive_offset=offset,
            similarity=self.similarity,
        )
        left_out = 0.0 if mask is None else mask.sum(dim=1).float()  # (B,)
        return value, columns - 1 - left_out


class MatryoshkaLoss(ContrastiveLoss):
    """Matryoshka representation learning (Kusupati et al., 2022; sentence-transformers' ``MatryoshkaLoss``) around any
    loss: ``sum_m weights[m] * loss(first m dimensions of every vector)`` over the sizes ``dims`` (queued vectors
    truncated too; cosine similarities renormalise the truncated vectors). The views are gathered and queued once.

    Trained this way, the first m dimensions of an embedding are an embedding of their own (``encode(...,
    truncate_dim=m)``), for any m of ``dims``.

    Args:
        loss: the inner loss (its temperature, similarity and scoring are used).
        dims: the sizes m.
        weights: ``w_m``, one per dimension (default 1 each).
    """

    def __init__(self, loss: ContrastiveLoss, dims: Sequence[int], weights: Sequence[float] | None = None):
        super().__init__(loss.temperature, loss.similarity, loss.hard_negative_weight, loss.gather_across_devices)
        weights = [1.0] * len(dims) if weights is None else [float(weight) for weight in weights]
        if not dims or len(weights) != len(dims):
            raise ValueError(f"{len(dims)} Matryoshka dimensions {list(dims)} but {len(weights)} weights {weights}.")
        self.loss = loss
        self.dims = [int(dim) for dim in dims]
        self.weights = weights

    @property
    def name(self) -> str:
        return self.loss.name

    @property
    def description(self) -> str:
        return self.loss.description

    @property
    def takes_extra_negatives(self) -> bool:
        return self.loss.takes_extra_negatives

    def extra_repr(self) -> str:
        return f"dims={self.dims}, weights={self.weights}"

    def compute(self, views: InBatchViews) -> tuple[torch.Tensor, torch.Tensor | float]:
        total, negatives = 0.0, 0.0
        for dim, weight in zip(self.dims, self.weights, strict=True):
            value, negatives = self.loss.compute(views.truncated(dim))
            total = total + weight * value
        return total, negatives


# A checkpoint names its loss, but loading and encoding it never compute the loss: only training needs it registered.
LOSSES: Registry[type[ContrastiveLoss]] = Registry(
    "contrastive_loss",
    "contrastive_hf.models.objectives.register_loss",
    needed="training with it (loading and encoding a model do not need it)",
)


def register_loss(loss_class: type[ContrastiveLoss], *, replace: bool = False) -> type[ContrastiveLoss]:
    """Offer a `ContrastiveLoss` subclass to every part of the library under its ``name``; returns the class (so it
    decorates one)."""
    if not (isinstance(loss_class, type) and issubclass(loss_class, ContrastiveLoss)):
        raise TypeError(f"register_loss takes a ContrastiveLoss subclass, got {loss_class!r}.")
    return LOSSES.add(loss_class.name, loss_class, replace=replace)


def unregister_loss(name: str) -> type[ContrastiveLoss]:
    return LOSSES.remove(name)


def get_loss(name: str) -> type[ContrastiveLoss]:
    """The loss class registered as ``contrastive_loss`` ``name``; a `ValueError` naming the registered ones where
    there is none."""
    return LOSSES.get(name)


def loss_names() -> tuple[str, ...]:
    return LOSSES.names()


register_loss(NTXentLoss)
register_loss(InfoNCELoss)


def build_loss(config) -> ContrastiveLoss:
    """A model config's loss: the class registered as its ``contrastive_loss`` (``info_nce`` for a config without
    one, as DPR's) from the config's settings, in a `MatryoshkaLoss` when it has ``matryoshka_dims``."""
    loss = get_loss(getattr(config, "contrastive_loss", "info_nce")).from_config(config)
    dims = getattr(config, "matryoshka_dims", None)
    return MatryoshkaLoss(loss, dims, getattr(config, "matryoshka_weights", None)) if dims else loss


def build_registered_loss(config) -> ContrastiveLoss | None:
    """`build_loss` of ``config`` where its loss is registered now, else None: a checkpoint trained with a loss of
    one's own loads and encodes without it, and its loss is built when it is registered and first asked for."""
    return build_loss(config) if getattr(config, "contrastive_loss", "info_nce") in LOSSES else None


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
