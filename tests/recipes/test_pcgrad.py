"""PCGrad (Yu et al., 2020): the projection against hand-computed vectors, the Gram-matrix form against Algorithm 1
written out on vectors, shared vs task-specific parameters, and one task = plain SGD."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from contrastive_hf.recipes.multitask.pcgrad import (
    combine_task_gradients,
    pcgrad,
    pcgrad_backward,
    pcgrad_coefficients,
    project_conflicting,
    project_conflicting_reference,
    random_orders,
)


def vector(*values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


def test_conflicting_pair_by_hand():
    # g1 . g2 = -1 < 0: g1 - (g1.g2 / |g2|^2) g2 = (1, 0) + 1/2 (-1, 1) and g2 - (g2.g1 / |g1|^2) g1 = (-1, 1) + (1, 0)
    g1, g2 = vector(1.0, 0.0), vector(-1.0, 1.0)
    projected = project_conflicting([g1, g2], orders=[[1], [0]])
    torch.testing.assert_close(projected[0], vector(0.5, 0.5))
    torch.testing.assert_close(projected[1], vector(0.0, 1.0))
    assert torch.dot(projected[0], g2).abs() < 1e-6 and torch.dot(projected[1], g1).abs() < 1e-6  # normal planes
    torch.testing.assert_close(pcgrad([g1, g2], orders=[[1], [0]]), vector(0.5, 1.5))
    plain_sum = g1 + g2  # (0, 1): the conflicting parts cancelled each other
    assert not torch.allclose(pcgrad([g1, g2], orders=[[1], [0]]), plain_sum)


def test_non_conflicting_pair_is_unchanged():
    g1, g2 = vector(1.0, 0.0), vector(1.0, 1.0)  # g1 . g2 = 1 > 0
    projected = project_conflicting([g1, g2], orders=[[1], [0]])
    torch.testing.assert_close(projected[0], g1)
    torch.testing.assert_close(projected[1], g2)
    torch.testing.assert_close(pcgrad([g1, g2], orders=[[1], [0]]), g1 + g2)


def test_orthogonal_and_zero_gradients_are_left_alone():
    g1, g2, zero = vector(1.0, 0.0), vector(0.0, 2.0), vector(0.0, 0.0)
    torch.testing.assert_close(pcgrad([g1, g2, zero], generator=torch.Generator().manual_seed(0)), g1 + g2)
    assert torch.isfinite(pcgrad([zero, zero], orders=[[1], [0]])).all()


def test_three_tasks_by_hand_in_a_given_order():
    # g1 against g2 first: (1, 0) -> (0.5, 0.5), which now conflicts with g3 = (-1, -1): -> (0, 0).
    g1, g2, g3 = vector(1.0, 0.0), vector(-1.0, 1.0), vector(-1.0, -1.0)
    orders = [[1, 2], [0, 2], [1, 0]]
    projected = project_conflicting([g1, g2, g3], orders=orders)
    torch.testing.assert_close(projected[0], vector(0.0, 0.0))
    # g2 . g1 = -1 -> (0, 1); (0, 1) . g3 = -1 -> (0, 1) + 1/2 (-1, -1) = (-0.5, 0.5)
    torch.testing.assert_close(projected[1], vector(-0.5, 0.5))
    # g3 . g2 = 0: unchanged; g3 . g1 = -1 -> (-1, -1) + (1, 0) = (0, -1)
    torch.testing.assert_close(projected[2], vector(0.0, -1.0))


@pytest.mark.parametrize("num_tasks", [2, 3, 5])
def test_gram_matrix_form_matches_algorithm_1_on_vectors(num_tasks):
    generator = torch.Generator().manual_seed(num_tasks)
    for _ in range(20):
        gradients = [torch.randn(7, generator=generator) for _ in range(num_tasks)]
        orders = random_orders(num_tasks, generator)
        reference = project_conflicting_reference(gradients, orders)
        fast = project_conflicting(gradients, orders=orders)
        for expected, got in zip(reference, fast, strict=True):
            torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(pcgrad(gradients, orders=orders), sum(reference), atol=1e-5, rtol=1e-5)


def test_the_order_matters_and_is_drawn_from_the_generator():
    torch.manual_seed(0)
    gradients = [torch.randn(4) for _ in range(4)]
    results = {
        tuple(pcgrad(gradients, orders=random_orders(4, torch.Generator().manual_seed(s))).tolist()) for s in range(30)
    }
    assert len(results) > 1  # with several conflicting tasks, the random order changes the update
    first = pcgrad(gradients, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(pcgrad(gradients, generator=torch.Generator().manual_seed(3)), first)


def test_random_orders_are_permutations_of_the_other_tasks():
    orders = random_orders(5, torch.Generator().manual_seed(1))
    for task, order in enumerate(orders):
        assert sorted(order) == [other for other in range(5) if other != task]
    with pytest.raises(ValueError, match="must list every other task exactly once"):
        pcgrad_coefficients(torch.eye(3, dtype=torch.float64), [[1, 2], [0, 0], [0, 1]])


def test_one_task_is_the_plain_gradient():
    gradient = torch.randn(6)
    torch.testing.assert_close(pcgrad([gradient]), gradient)
    update, stats = combine_task_gradients([[gradient, None]])
    torch.testing.assert_close(update[0], gradient)
    assert update[1] is None and stats.task_pairs == 0


def test_shared_parameters_are_projected_and_task_heads_keep_their_gradient():
    # parameters: a shared (2,) vector, task 0's head, task 1's head
    shared_0, shared_1 = vector(1.0, 0.0), vector(-1.0, 1.0)
    head_0, head_1 = vector(3.0), vector(5.0)
    update, stats = combine_task_gradients([[shared_0, head_0, None], [shared_1, None, head_1]], orders=[[1], [0]])
    torch.testing.assert_close(update[0], vector(0.5, 1.5))  # as in the hand-computed pair
    torch.testing.assert_close(update[1], head_0)
    torch.testing.assert_close(update[2], head_1)
    assert stats.conflicting_pairs == 1 and stats.task_pairs == 1 and stats.conflict_fraction == 1.0
    torch.testing.assert_close(stats.cosines[0, 1], torch.tensor(-(0.5**0.5)))


def test_parameter_lists_match_the_reference_on_the_shared_vector():
    generator = torch.Generator().manual_seed(7)
    shapes = [(3, 2), (4,), (2, 2)]
    tasks = [[torch.randn(shape, generator=generator) for shape in shapes] for _ in range(3)]
    tasks[2][1] = None  # task 2 does not reach the second (still shared by tasks 0 and 1) parameter
    orders = random_orders(3, generator)
    update, _ = combine_task_gradients(tasks, orders=orders)
    flat = [
        torch.cat([(g if g is not None else torch.zeros(s)).reshape(-1) for g, s in zip(t, shapes, strict=True)])
        for t in tasks
    ]
    expected = sum(project_conflicting_reference(flat, orders))
    torch.testing.assert_close(torch.cat([u.reshape(-1) for u in update]), expected, atol=1e-5, rtol=1e-5)


class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.shared = nn.Linear(4, 3)
        self.head_a = nn.Linear(3, 1)
        self.head_b = nn.Linear(3, 2)

    def losses(self, x, y_a, y_b):
        hidden = torch.tanh(self.shared(x))
        loss_a = nn.functional.mse_loss(self.head_a(hidden).squeeze(-1), y_a)
        loss_b = nn.functional.cross_entropy(self.head_b(hidden), y_b)
        return loss_a, loss_b


def batch(seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    return (
        torch.randn(8, 4, generator=generator),
        torch.randn(8, generator=generator),
        torch.randint(0, 2, (8,), generator=generator),
    )


def test_one_task_step_equals_plain_sgd():
    torch.manual_seed(0)
    model = TwoHeads()
    twin = TwoHeads()
    twin.load_state_dict(model.state_dict())
    x, y_a, y_b = batch()
    sgd, twin_sgd = torch.optim.SGD(model.parameters(), lr=0.1), torch.optim.SGD(twin.parameters(), lr=0.1)

    loss_a, _ = model.losses(x, y_a, y_b)
    pcgrad_backward([loss_a], model.parameters())
    sgd.step()
    twin_loss, _ = twin.losses(x, y_a, y_b)
    twin_loss.backward()
    twin_sgd.step()
    for (name, p), q in zip(model.named_parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(p, q, msg=name)


def test_pcgrad_backward_adds_the_projected_update_to_grad():
    torch.manual_seed(1)
    model = TwoHeads()
    x, y_a, y_b = batch(1)
    parameters = list(model.parameters())
    manual = [
        torch.autograd.grad(loss, parameters, allow_unused=True, retain_graph=True)
        for loss in model.losses(x, y_a, y_b)
    ]
    flat = [torch.cat([g.reshape(-1) for g in grads[:2]]) for grads in manual]  # the shared layer's weight and bias
    orders = [[1], [0]]
    expected_shared = sum(project_conflicting_reference(flat, orders))

    for p in parameters:
        p.grad = torch.ones_like(p)  # pcgrad_backward accumulates, as backward() does
    stats = pcgrad_backward(list(model.losses(x, y_a, y_b)), parameters, orders=orders)
    shared = torch.cat([parameters[0].grad.reshape(-1), parameters[1].grad.reshape(-1)]) - 1
    torch.testing.assert_close(shared, expected_shared, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(model.head_a.weight.grad - 1, manual[0][2])  # heads: their own task's gradient
    torch.testing.assert_close(model.head_b.weight.grad - 1, manual[1][4])
    assert stats.task_pairs == 1
