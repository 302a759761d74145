"""Contrastive objectives and representation-quality measures, as pure functions.

This module imports nothing but torch. The in-batch losses a model trains with are these functions registered with a
name in `objectives.py` (`register_loss`).

Every similarity and logit is computed in float32 at least (`loss_dtype`), also under fp16/bf16 autocast: with
tau = 0.05 a cosine of 1 becomes a logit of 20, and half precision loses the small differences between negatives that
the loss learns from.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = [
    "SIMILARITIES",
    "loss_dtype",
    "cosine_logits",
    "dot_logits",
    "similarity_logits",
    "duplicate_mask",
    "info_nce",
    "nt_xent",
    "alignment",
    "uniformity",
]

# cosine: SimCSE, CLEAR, SimCLR; dot: DPR's inner product (sentence-transformers' "dot" similarity)
SIMILARITIES = ("cosine", "dot")


def loss_dtype(*tensors: torch.Tensor) -> torch.dtype:
    """The precision similarities and losses of ``tensors`` are computed in: float32 for fp16, bf16 and float32
    inputs, float64 when one is float64 (a float64 model's loss keeps its precision, as the parity tests against
    sentence-transformers need)."""
    dtype = torch.float32
    for tensor in tensors:
        dtype = torch.promote_types(dtype, tensor.dtype)
    return dtype


def cosine_logits(a: torch.Tensor, b: torch.Tensor, temperature: float) -> torch.Tensor:
    """Cosine similarities of every row of ``a`` with every row of ``b``, divided by ``temperature``, in float32 (or
    float64 for float64 inputs)."""
    with torch.autocast(device_type=a.device.type, enabled=False):
        dtype = loss_dtype(a, b)
        a = F.normalize(a.to(dtype), dim=-1)
        b = F.normalize(b.to(dtype), dim=-1)
        return a @ b.T / temperature


def dot_logits(a: torch.Tensor, b: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Inner products of every row of ``a`` with every row of ``b``, divided by ``temperature``, in float32 (or
    float64 for float64 inputs).

    DPR's scores are unnormalised and grow with the vectors' norms (a BERT [CLS] vector has a norm around 10-20),
    so they are computed in float32 also under fp16/bf16 autocast.
    """
    with torch.autocast(device_type=a.device.type, enabled=False):
        dtype = loss_dtype(a, b)
        return a.to(dtype) @ b.to(dtype).T / temperature


def similarity_logits(a: torch.Tensor, b: torch.Tensor, similarity: str, temperature: float) -> torch.Tensor:
    """``(N, d), (C, d) -> (N, C)``: ``cosine`` or ``dot`` similarities over ``temperature``, in float32 at least."""
    if similarity == "cosine":
        return cosine_logits(a, b, temperature)
    if similarity == "dot":
        return dot_logits(a, b, temperature)
    raise ValueError(f"Unknown similarity {similarity!r}: choose one of {', '.join(SIMILARITIES)}.")


def duplicate_mask(row_ids: torch.Tensor, column_ids: torch.Tensor, positive_columns: torch.Tensor) -> torch.Tensor:
    """Which logits compare a row with a copy of itself: ``True`` where column j holds the same sentence as row i.

    Identical sentences (the same text twice in a batch, or again in a pre-batch queue) must never be each other's
    negatives: such a "negative" is a positive the loss would push away. Sentences are compared by id (e.g. a hash
    of their token ids, as the collators' ``sentence_ids``).

    Args:
        row_ids: ``(N,)`` or ``(N, R)`` ids a row stands for, e.g. its query's and its positive's sentence.
        column_ids: ``(C,)`` the sentence id of every column (keys, hard negatives, queued keys).
        positive_columns: ``(N,)`` each row's positive column, never masked.

    Returns:
        Boolean ``(N, C)``, ``True`` where the column is to be left out of that row's softmax.
    """
    if row_ids.dim() == 1:
        row_ids = row_ids[:, None]
    mask = (row_ids[:, :, None] == column_ids[None, None, :]).any(dim=1)  # (N, C)
    rows = torch.arange(mask.shape[0], device=mask.device)
    return mask.index_put((rows, positive_columns.to(mask.device)), mask.new_zeros(()))  # no host value


def info_nce(
    queries: torch.Tensor,
    keys: torch.Tensor,
    temperature: float,
    hard_negatives: torch.Tensor | None = None,
    hard_negative_weight: float = 0.0,
    extra_negatives: torch.Tensor | None = None,
    negatives_mask: torch.Tensor | None = None,
    positive_offset: int = 0,
    similarity: str = "cosine",
) -> torch.Tensor:
    r"""InfoNCE with in-batch negatives, in SimCSE's form (Gao et al., 2021, eq. (1) and (5)); DPR's loss with
    ``similarity="dot"`` (Karpukhin et al., 2020, eq. (2)).

    For query i with positive key i, the negatives are the other keys of the batch, every hard negative, and every
    extra negative (a pre-batch queue):

    .. math::
        \ell_i = -\log \frac{e^{\cos(q_i, k_i)/\tau}}
            {\sum_j e^{\cos(q_i, k_j)/\tau} + \sum_j e^{\cos(q_i, h_j)/\tau + w[i=j]} + \sum_m e^{\cos(q_i, e_m)/\tau}}

    where ``w = hard_negative_weight`` is added to the logit of the query's own hard negative (SimCSE's weighting;
    0 keeps plain InfoNCE). With several hard negatives per query (FlagEmbedding's ``train_group_size - 1``), each is
    a column, and w is added to each of the query's own. The loss is the mean of :math:`\ell_i` over the queries;
    :math:`\cos` becomes the inner product with ``similarity="dot"``.

    Args:
        queries: ``(N, d)`` anchors.
        keys: ``(M, d)`` keys, ``M >= N``; key ``positive_offset + i`` is the positive of query i, and every other
            key is a negative.
        temperature: tau > 0 (1 for DPR's unscaled inner products).
        hard_negatives: optional ``(M, d)``, or ``(M, k, d)`` for k per query; row ``positive_offset + i`` holds the
            hard negatives of query i. Every hard negative is a negative of every query.
        hard_negative_weight: SimCSE's w, added to the logit of each query's own hard negatives.
        extra_negatives: optional ``(K, d)`` negatives shared by every query (e.g. a queue of earlier batches' keys).
        negatives_mask: optional boolean ``(N, M + [M * k] + [K])`` of logits to exclude (e.g. duplicate sentences);
            ``True`` removes a column from that query's softmax. Positives must not be masked.
        positive_offset: where this process's queries sit among ``keys`` when the keys were gathered from every
            device (the number of sentences of the processes before it); 0 on one device.
        similarity: ``cosine`` or ``dot``.

    Returns:
        Scalar loss (float32; float64 for float64 inputs).

    Inputs: (anchor, positive) pairs, optionally with hard negatives (SimCSE's NLI triples, DPR's question,
    passage, negative passage); the pairing is the rows' order.

    Example:

    ```python
    >>> queries, positives = torch.randn(4, 8), torch.randn(4, 8)
    >>> loss = info_nce(queries, positives, temperature=0.05)  # each query against the 4 positives
    ```
    """
    if queries.shape[0] + positive_offset > keys.shape[0]:
        raise ValueError(f"info_nce needs at least as many keys as queries, got {keys.shape[0]} < {queries.shape[0]}.")
    logits = [similarity_logits(queries, keys, similarity, temperature)]  # (N, M)
    labels = torch.arange(queries.shape[0], device=queries.device) + positive_offset
    if hard_negatives is not None:
        if hard_negatives.dim() == 2:
            hard_negatives = hard_negatives.unsqueeze(1)  # (M, 1, d)
        per_query = hard_negatives.shape[1]
        flat = hard_negatives.reshape(-1, hard_negatives.shape[-1])  # (M * k, d), query-major
        hard_logits = similarity_logits(queries, flat, similarity, temperature)  # (N, M * k)
        if hard_negative_weight:
            own = labels[:, None] * per_query + torch.arange(per_query, device=labels.device)  # (N, k)
            weights = torch.zeros_like(hard_logits).scatter_(1, own, hard_negative_weight)
            hard_logits = hard_logits + weights
        logits.append(hard_logits)
    if extra_negatives is not None and extra_negatives.shape[0] > 0:
        logits.append(similarity_logits(queries, extra_negatives.to(queries.dtype), similarity, temperature))  # (N, K)
    logits = torch.cat(logits, dim=1)
    if negatives_mask is not None:
        logits = logits.masked_fill(negatives_mask, float("-inf"))
    return F.cross_entropy(logits, labels)


def nt_xent(
    z1: torch.Tensor,
    z2: torch.Tensor,
    temperature: float,
    all_z1: torch.Tensor | None = None,
    all_z2: torch.Tensor | None = None,
    offset: int = 0,
    negatives_mask: torch.Tensor | None = None,
    similarity: str = "cosine",
) -> torch.Tensor:
    r"""NT-Xent over the 2N views of a batch (SimCLR, Chen et al., 2020; CLEAR, Wu et al., 2020, eq. (1)-(2)).

    With :math:`z = [z_1; z_2]` the 2N views and :math:`p(i)` the other view of the same sentence,

    .. math::
        \ell_i = -\log \frac{e^{\cos(z_i, z_{p(i)})/\tau}}{\sum_{j \ne i} e^{\cos(z_i, z_j)/\tau}}

    so that each view's negatives are the other 2N-2 views. CLEAR's eq. (2) sums :math:`\ell_i` over the 2N views;
    this returns their mean, which keeps the loss's scale (and the learning rate that suits it) independent of the
    batch size.

    Args:
        z1, z2: ``(N, d)`` first and second views; row i of each comes from sentence i.
        temperature: tau > 0.
        all_z1, all_z2: optional ``(M, d)`` views of the global batch gathered from every device, in which this
            process's rows start at ``offset``. Then the 2N local views are scored against all 2M views (their
            negatives are the other 2M-2), and the mean over devices of this loss is the global batch's loss.
        negatives_mask: optional boolean ``(2N, 2M)`` of logits to exclude (e.g. duplicate sentences), rows
            ``[z1; z2]`` against columns ``[all_z1; all_z2]``. A view's positive (its other view) must not be masked;
            its own column is left out here, whatever the mask says.
        similarity: ``cosine`` (SimCLR's) or ``dot``.

    Returns:
        Scalar loss (float32; float64 for float64 inputs).

    Inputs: two views of each sentence (CLEAR's augmentations, SimCSE's dropout), no labels: the pairing is the
    rows' order.

    Example:

    ```python
    >>> z1, z2 = torch.randn(4, 8), torch.randn(4, 8)  # two views of 4 sentences
    >>> loss = nt_xent(z1, z2, temperature=0.05)  # each view against the other view and 6 negatives
    ```
    """
    if z1.shape != z2.shape:
        raise ValueError(f"nt_xent needs two views of the same shape, got {tuple(z1.shape)} and {tuple(z2.shape)}.")
    if all_z1 is None:
        all_z1, all_z2, offset = z1, z2, 0
    n, m = z1.shape[0], all_z1.shape[0]
    local = torch.cat([z1, z2], dim=0)  # (2N, d)
    logits = similarity_logits(local, torch.cat([all_z1, all_z2], dim=0), similarity, temperature)  # (2N, 2M)
    # built on the device: a tensor made on the host and copied over would make the host wait for the GPU
    rows = torch.arange(2 * n, device=local.device)
    views = torch.arange(n, device=local.device)
    own = torch.cat([views, views + m]) + offset  # each view's own column
    other = torch.cat([views + m, views]) + offset  # its other view
    logits = logits.index_put((rows, own), logits.new_full((), float("-inf")))
    if negatives_mask is not None:
        logits = logits.masked_fill(negatives_mask, float("-inf"))
    return F.cross_entropy(logits, other)


def alignment(x: torch.Tensor, y: torch.Tensor, alpha: float = 2.0) -> torch.Tensor:
    r"""Alignment of positive pairs (Wang & Isola, 2020, eq. (4)): :math:`E\,\|f(x) - f(y)\|_2^\alpha`.

    Rows of ``x`` and ``y`` are the two sides of the positive pairs; both are L2-normalised first. Lower is better.

    Inputs: ``(N, d)`` embeddings of each pair's two sides (e.g. the two views of a training batch, or STS-B pairs
    scored above 4). Example: ``alignment(views[:, 0], views[:, 1])`` is 0 when every pair's two sides coincide.
    """
    with torch.autocast(device_type=x.device.type, enabled=False):
        dtype = loss_dtype(x, y)
        x = F.normalize(x.to(dtype), dim=-1)
        y = F.normalize(y.to(dtype), dim=-1)
        return (x - y).norm(p=2, dim=1).pow(alpha).mean()


def uniformity(x: torch.Tensor, t: float = 2.0) -> torch.Tensor:
    r"""Uniformity (Wang & Isola, 2020, eq. (5)): :math:`\log E_{i<j}\, e^{-t \|f(x_i) - f(x_j)\|_2^2}`.

    Rows of ``x`` are L2-normalised first; the expectation runs over all distinct pairs. Lower is better.

    Inputs: ``(N, d)`` embeddings, N >= 2, of different sentences. Example: ``uniformity(embeddings)`` is 0 when all
    embeddings are equal (a collapsed encoder) and about -4 for uniformly spread 768-d vectors (t = 2).
    """
    if x.shape[0] < 2:
        raise ValueError("uniformity needs at least two embeddings.")
    with torch.autocast(device_type=x.device.type, enabled=False):
        x = F.normalize(x.to(loss_dtype(x)), dim=-1)
        squared_distances = torch.pdist(x, p=2).pow(2)  # (n(n-1)/2,)
        return squared_distances.mul(-t).exp().mean().log()
