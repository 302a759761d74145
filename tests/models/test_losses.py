"""Contrastive losses against slow references written straight from the formulas (python loops, float64)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from contrastive_hf.models.losses import alignment, cosine_logits, duplicate_mask, info_nce, nt_xent, uniformity

ATOL = 1e-5
RTOL = 1e-4


# ----------------------------------------------------------------------------------------------------
# Slow references: one scalar at a time, nothing vectorised.
# ----------------------------------------------------------------------------------------------------


def _norm(v: torch.Tensor) -> torch.Tensor:
    return torch.sqrt(sum(v[c] * v[c] for c in range(v.shape[0])))


def _cos(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    dot = sum(a[c] * b[c] for c in range(a.shape[0]))
    return dot / (_norm(a) * _norm(b))


def ref_info_nce(q, k, tau, hard=None, weight=0.0, extra=None, mask=None):
    """-1/N sum_i log( e^{s_ii} / sum_{columns c not masked} e^{s_ic} ), columns = keys | hard (+w on i==j) | extra."""
    n, m = q.shape[0], k.shape[0]
    total = 0.0
    for i in range(n):
        columns = [_cos(q[i], k[j]) / tau for j in range(m)]
        if hard is not None:
            columns += [_cos(q[i], hard[j]) / tau + (weight if i == j else 0.0) for j in range(hard.shape[0])]
        if extra is not None:
            columns += [_cos(q[i], extra[e]) / tau for e in range(extra.shape[0])]
        denominator = 0.0
        for c, logit in enumerate(columns):
            if mask is not None and bool(mask[i, c]):
                continue
            denominator = denominator + torch.exp(logit)
        total = total - (columns[i] - torch.log(denominator))
    return total / n


def ref_nt_xent(z1, z2, tau):
    """Mean over the 2N views of -log(e^{cos(z_i, z_p(i))/tau} / sum_{j != i} e^{cos(z_i, z_j)/tau})."""
    n = z1.shape[0]
    views = [z1[i] for i in range(n)] + [z2[i] for i in range(n)]
    total = 0.0
    for i in range(2 * n):
        partner = i + n if i < n else i - n
        denominator = 0.0
        for j in range(2 * n):
            if j != i:
                denominator = denominator + torch.exp(_cos(views[i], views[j]) / tau)
        total = total - (_cos(views[i], views[partner]) / tau - torch.log(denominator))
    return total / (2 * n)


def ref_alignment(x, y, alpha):
    total = 0.0
    for i in range(x.shape[0]):
        xi, yi = x[i] / _norm(x[i]), y[i] / _norm(y[i])
        squared = sum((xi[c] - yi[c]) ** 2 for c in range(x.shape[1]))
        total = total + torch.sqrt(squared) ** alpha
    return total / x.shape[0]


def ref_uniformity(x, t):
    n = x.shape[0]
    normalised = [x[i] / _norm(x[i]) for i in range(n)]
    total, pairs = 0.0, 0
    for i in range(n):
        for j in range(i + 1, n):
            squared = sum((normalised[i][c] - normalised[j][c]) ** 2 for c in range(x.shape[1]))
            total = total + torch.exp(-t * squared)
            pairs += 1
    return torch.log(total / pairs)


# ----------------------------------------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------------------------------------


def _randn(*shape, seed):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=generator, dtype=torch.float64).requires_grad_(True)


def _check_value_and_grads(loss, reference, inputs):
    assert loss.dtype == torch.float64  # float64 embeddings keep their precision (half precision is raised to float32)
    assert loss.dim() == 0
    torch.testing.assert_close(loss.double(), reference.double(), atol=ATOL, rtol=RTOL)
    grads = torch.autograd.grad(loss, inputs)
    reference_grads = torch.autograd.grad(reference, inputs)
    for grad, reference_grad in zip(grads, reference_grads, strict=True):
        assert torch.isfinite(grad).all()
        torch.testing.assert_close(grad.double(), reference_grad, atol=ATOL, rtol=RTOL)


# ----------------------------------------------------------------------------------------------------
# cosine_logits
# ----------------------------------------------------------------------------------------------------


def test_cosine_logits_matches_loop():
    a, b = _randn(3, 5, seed=1), _randn(4, 5, seed=2)
    logits = cosine_logits(a, b, 0.1)
    assert logits.shape == (3, 4)
    assert logits.dtype == torch.float64  # as precise as the inputs, float32 at least
    for i in range(3):
        for j in range(4):
            assert logits[i, j].item() == pytest.approx((_cos(a[i], b[j]) / 0.1).item(), abs=ATOL)


# ----------------------------------------------------------------------------------------------------
# info_nce
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("temperature", [0.05, 0.5])
def test_info_nce_plain(temperature):
    q, k = _randn(5, 8, seed=10), _randn(5, 8, seed=11)
    _check_value_and_grads(info_nce(q, k, temperature), ref_info_nce(q, k, temperature), (q, k))


def test_info_nce_more_keys_than_queries():
    q, k = _randn(3, 6, seed=12), _randn(5, 6, seed=13)
    _check_value_and_grads(info_nce(q, k, 0.1), ref_info_nce(q, k, 0.1), (q, k))


@pytest.mark.parametrize("weight", [0.0, 1.5, -2.0])
def test_info_nce_hard_negatives(weight):
    q, k, h = _randn(4, 6, seed=20), _randn(4, 6, seed=21), _randn(4, 6, seed=22)
    loss = info_nce(q, k, 0.05, hard_negatives=h, hard_negative_weight=weight)
    _check_value_and_grads(loss, ref_info_nce(q, k, 0.05, hard=h, weight=weight), (q, k, h))


def test_info_nce_hard_negative_weight_only_on_own_hard_negative():
    """w goes on the diagonal of the hard block: putting it on the whole block would give a different loss."""
    q, k, h = _randn(4, 6, seed=23), _randn(4, 6, seed=24), _randn(4, 6, seed=25)
    loss = info_nce(q, k, 0.1, hard_negatives=h, hard_negative_weight=3.0)
    with torch.no_grad():
        q64, k64, h64 = q.detach(), k.detach(), h.detach()
        # the weight ignored, or added to the whole hard block: both must differ from the real loss
        ignored = ref_info_nce(q64, k64, 0.1, hard=h64, weight=0.0)
        shifted = 0.0
        for i in range(4):
            columns = [_cos(q64[i], k64[j]) / 0.1 for j in range(4)]
            columns += [_cos(q64[i], h64[j]) / 0.1 + 3.0 for j in range(4)]
            shifted -= columns[i] - torch.log(sum(torch.exp(c) for c in columns))
        shifted /= 4
    assert abs(loss.item() - ignored.item()) > 1e-3
    assert abs(loss.item() - shifted.item()) > 1e-3
    assert loss.item() == pytest.approx(ref_info_nce(q64, k64, 0.1, hard=h64, weight=3.0).item(), abs=ATOL)


def test_info_nce_extra_negatives():
    q, k, e = _randn(4, 6, seed=30), _randn(4, 6, seed=31), _randn(7, 6, seed=32)
    _check_value_and_grads(info_nce(q, k, 0.05, extra_negatives=e), ref_info_nce(q, k, 0.05, extra=e), (q, k, e))


def test_info_nce_empty_extra_negatives_is_ignored():
    q, k = _randn(4, 6, seed=33), _randn(4, 6, seed=34)
    empty = torch.zeros(0, 6, dtype=torch.float64)
    loss = info_nce(q, k, 0.05, extra_negatives=empty)
    assert loss.item() == pytest.approx(ref_info_nce(q, k, 0.05).item(), abs=ATOL)


def test_info_nce_all_blocks_with_mask():
    q, k, h, e = (_randn(4, 6, seed=s) for s in (40, 41, 42, 43))
    e = e[:3]
    generator = torch.Generator().manual_seed(44)
    mask = torch.rand(4, 4 + 4 + 3, generator=generator) < 0.3
    mask[torch.arange(4), torch.arange(4)] = False  # positives are never masked
    assert mask.any()
    loss = info_nce(q, k, 0.05, hard_negatives=h, hard_negative_weight=0.7, extra_negatives=e, negatives_mask=mask)
    reference = ref_info_nce(q, k, 0.05, hard=h, weight=0.7, extra=e, mask=mask)
    _check_value_and_grads(loss, reference, (q, k, h))


def test_info_nce_mask_everything_but_positive_gives_zero():
    q, k = _randn(3, 5, seed=50), _randn(3, 5, seed=51)
    mask = ~torch.eye(3, dtype=torch.bool)
    assert info_nce(q, k, 0.05, negatives_mask=mask).item() == pytest.approx(0.0, abs=1e-6)


def test_info_nce_closed_form_orthonormal():
    """q = k = e_i: loss = log(1 + (N - 1) e^{-1/tau})."""
    n, tau = 4, 0.2
    basis = torch.eye(n, 6)
    expected = math.log(1 + (n - 1) * math.exp(-1 / tau))
    assert info_nce(basis, basis.clone(), tau).item() == pytest.approx(expected, rel=1e-5)


def test_info_nce_scale_invariant():
    q, k = _randn(4, 6, seed=52), _randn(4, 6, seed=53)
    torch.testing.assert_close(info_nce(q * 3.0, k * 0.25, 0.05), info_nce(q, k, 0.05), atol=ATOL, rtol=RTOL)


def test_info_nce_fewer_keys_than_queries_raises():
    with pytest.raises(ValueError, match="keys"):
        info_nce(torch.randn(4, 5), torch.randn(3, 5), 0.05)


# ----------------------------------------------------------------------------------------------------
# nt_xent
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("n", "temperature"), [(1, 0.5), (3, 0.05), (5, 0.3)])
def test_nt_xent_matches_loop(n, temperature):
    z1, z2 = _randn(n, 7, seed=60 + n), _randn(n, 7, seed=70 + n)
    _check_value_and_grads(nt_xent(z1, z2, temperature), ref_nt_xent(z1, z2, temperature), (z1, z2))


def test_nt_xent_is_mean_not_sum_closed_form():
    """z1 = z2 = e_i: each view has cos 1 with its partner and 0 with the 2N-2 others."""
    tau = 0.5
    for n in (3, 6):
        basis = torch.eye(n, 8)
        per_view = math.log(1 + (2 * n - 2) * math.exp(-1 / tau))
        loss = nt_xent(basis, basis.clone(), tau).item()
        assert loss == pytest.approx(per_view, rel=1e-5)  # the mean over the 2N views
        assert loss != pytest.approx(2 * n * per_view, rel=1e-2)  # not CLEAR's sum


def test_nt_xent_shape_mismatch_raises():
    with pytest.raises(ValueError, match="same shape"):
        nt_xent(torch.randn(3, 4), torch.randn(4, 4), 0.05)
    with pytest.raises(ValueError):
        nt_xent(torch.randn(3, 4), torch.randn(3, 5), 0.05)


# ----------------------------------------------------------------------------------------------------
# alignment / uniformity
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("alpha", [1.0, 2.0, 3.0])
def test_alignment_matches_loop(alpha):
    x, y = _randn(6, 5, seed=80), _randn(6, 5, seed=81)
    _check_value_and_grads(alignment(x, y, alpha), ref_alignment(x, y, alpha), (x, y))


def test_alignment_closed_forms():
    x = torch.tensor([[2.0, 0.0], [0.0, 5.0]])
    assert alignment(x, x * 3.0).item() == pytest.approx(0.0, abs=1e-7)
    orthogonal = torch.tensor([[0.0, 1.0], [7.0, 0.0]])
    assert alignment(x, orthogonal, alpha=2).item() == pytest.approx(2.0, abs=1e-6)
    assert alignment(x, orthogonal, alpha=1).item() == pytest.approx(math.sqrt(2), abs=1e-6)


@pytest.mark.parametrize("t", [1.0, 2.0])
def test_uniformity_matches_loop(t):
    x = _randn(6, 4, seed=90)
    _check_value_and_grads(uniformity(x, t), ref_uniformity(x, t), (x,))


def test_uniformity_closed_form_antipodal():
    x = torch.tensor([[1.0, 0.0], [-3.0, 0.0]])
    assert uniformity(x, t=2.0).item() == pytest.approx(-8.0, abs=1e-5)


@pytest.mark.parametrize("rows", [0, 1])
def test_uniformity_needs_two_rows(rows):
    with pytest.raises(ValueError):
        uniformity(torch.randn(rows, 4))


# ----------------------------------------------------------------------------------------------------
# float32 under bf16 autocast
# ----------------------------------------------------------------------------------------------------


def _bf16_features(seed: int, rows: int = 4):
    """Embeddings as a model under autocast would produce them: the output of a linear layer, in bfloat16."""
    generator = torch.Generator().manual_seed(seed)
    layer = torch.nn.Linear(8, 6)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(6, 8, generator=generator))
        layer.bias.copy_(torch.randn(6, generator=generator))
    return layer, torch.randn(rows, 8, generator=generator)


def test_autocast_is_active_in_these_tests():
    a = torch.randn(3, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert (a @ a.T).dtype == torch.bfloat16  # otherwise the tests below would prove nothing


@pytest.mark.parametrize("name", ["cosine_logits", "info_nce", "nt_xent", "alignment", "uniformity"])
def test_float32_under_bf16_autocast(name):
    q_layer, q_in = _bf16_features(100)
    k_layer, k_in = _bf16_features(101)
    calls = {
        "cosine_logits": lambda q, k: cosine_logits(q, k, 0.05),
        "info_nce": lambda q, k: info_nce(q, k, 0.05, hard_negatives=k.flip(0), hard_negative_weight=0.5),
        "nt_xent": lambda q, k: nt_xent(q, k, 0.05),
        "alignment": lambda q, k: alignment(q, k),
        "uniformity": lambda q, k: uniformity(torch.cat([q, k])),
    }
    with torch.autocast("cpu", dtype=torch.bfloat16):
        q, k = q_layer(q_in), k_layer(k_in)
        assert q.dtype == torch.bfloat16
        result = calls[name](q, k)
    assert result.dtype == torch.float32
    # same bf16 embeddings, everything in float32 outside autocast
    expected = calls[name](q.detach().float(), k.detach().float())
    torch.testing.assert_close(result.detach(), expected, atol=1e-5, rtol=1e-5)
    # the float32 logits of the bf16 embeddings, against float64 math
    if name == "cosine_logits":
        qn = torch.nn.functional.normalize(q.detach().float(), dim=-1)
        kn = torch.nn.functional.normalize(k.detach().float(), dim=-1)
        exact = (qn.double() @ kn.double().T) / 0.05
        torch.testing.assert_close(result.double(), exact, atol=1e-4, rtol=1e-5)


# ----------------------------------------------------------------------------------------------------
# Duplicates are never negatives
# ----------------------------------------------------------------------------------------------------


def test_duplicate_mask_leaves_out_copies_of_the_query_and_its_positive_but_never_the_positive():
    row_ids = torch.tensor([[7, 7], [8, 9], [7, 7]])  # (query, positive) sentence ids; rows 0 and 2 are one sentence
    column_ids = torch.tensor([7, 9, 7, 9, 5])
    mask = duplicate_mask(row_ids, column_ids, positive_columns=torch.tensor([0, 1, 2]))
    expected = torch.tensor(
        [
            [False, False, True, False, False],  # column 2 is the same sentence as query 0
            [False, False, False, True, False],  # column 3 repeats the positive of query 1
            [True, False, False, False, False],
        ]
    )
    assert torch.equal(mask, expected)


def reference_masked_info_nce(queries, keys, temperature, excluded):
    """-log softmax over the columns that are not excluded, written as a loop."""
    losses = []
    for i in range(queries.shape[0]):
        similarities = [
            torch.exp(F.cosine_similarity(queries[i], keys[j], dim=0) / temperature)
            for j in range(keys.shape[0])
            if not excluded[i][j]
        ]
        positive = torch.exp(F.cosine_similarity(queries[i], keys[i], dim=0) / temperature)
        losses.append(-torch.log(positive / torch.stack(similarities).sum()))
    return torch.stack(losses).mean()


def test_info_nce_with_a_duplicate_mask_equals_the_loop_reference():
    generator = torch.Generator().manual_seed(0)
    queries, keys = torch.randn(4, 8, generator=generator), torch.randn(4, 8, generator=generator)
    ids = torch.tensor([1, 2, 1, 3])  # sentence 0 is in the batch twice
    mask = duplicate_mask(torch.stack([ids, ids], dim=1), ids, torch.arange(4))
    assert mask.sum() == 2
    got = info_nce(queries, keys, 0.1, negatives_mask=mask)
    torch.testing.assert_close(got, reference_masked_info_nce(queries, keys, 0.1, mask.tolist()))
    assert not torch.allclose(got, info_nce(queries, keys, 0.1))


def test_nt_xent_with_a_duplicate_mask_drops_the_copies_views():
    generator = torch.Generator().manual_seed(0)
    z1, z2 = torch.randn(3, 8, generator=generator), torch.randn(3, 8, generator=generator)
    ids = torch.tensor([4, 5, 4])
    rows = torch.cat([ids, ids])
    positive = torch.tensor([3, 4, 5, 0, 1, 2])
    mask = duplicate_mask(rows, rows, positive)
    got = nt_xent(z1, z2, 0.2, negatives_mask=mask)
    # reference: with sentence 2 (the copy of sentence 0) dropped from view 0's and view 0+N's negatives, etc.
    z = torch.cat([z1, z2])
    losses = []
    for i in range(6):
        kept = [j for j in range(6) if j != i and not mask[i, j]]
        logits = torch.stack([F.cosine_similarity(z[i], z[j], dim=0) / 0.2 for j in kept])
        losses.append(-F.log_softmax(logits, dim=0)[kept.index(int(positive[i]))])
    torch.testing.assert_close(got, torch.stack(losses).mean())
