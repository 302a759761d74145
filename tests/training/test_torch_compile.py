"""``--torch_compile`` on every path (issue 32): regional compilation (each transformer layer, the embeddings and the
heads compiled; the step around them, driven by host data, as written), which trains as eager training does and,
with the packed batches' changing token counts, compiles a bounded number of graphs however long the run.

These use dynamo with AOTAutograd (backend ``aot_eager``: the graphs, their functionalization and backward, without
code generation, which takes minutes on a CPU); tests/integration/test_torch_compile_inductor.py compiles one path
with inductor.
"""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
from transformers import TrainerCallback

from helpers.steps import contrastive_trainer, trained

# dynamo traces every region of a tiny model: 10-40 s of CPU a path, make test-fast leaves them out; the paths share
# their graphs, on one pytest-xdist worker (make test: --dist loadgroup)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("torch_compile")]

PATHS = [
    ("simcse", 0, {}),
    ("simcse", "sorted", {}),
    ("simcse", "packed", {}),
    ("clear", "packed", {}),
    ("prompts", "packed", {}),
    ("clear", "packed", {"grad_cache_chunk_size": 3}),
]


@pytest.fixture(scope="module")
def compiled_graphs_shared():
    """The paths share the graphs they compile (a layer's graph for packed batches serves every packed path), as the
    regions of several models compiled in one process do: the module starts from none, dynamo keeps room for every
    path's graphs of a code object (its default, 8, is for one model), and a region that would need more fails the
    test instead of running eager unseen."""
    torch._dynamo.reset()
    with torch._dynamo.config.patch(recompile_limit=64, fail_on_recompile_limit_hit=True):
        yield
    torch._dynamo.reset()


@pytest.mark.parametrize(("kind", "sub_batch_size", "options"), PATHS)
def test_every_path_trains_under_torch_compile_as_in_eager(
    tokenizer, tmp_path, kind, sub_batch_size, options, compiled_graphs_shared
):
    eager_losses, eager_weights, _ = trained(tokenizer, tmp_path / "eager", kind, sub_batch_size, False, **options)
    losses, weights, trainer = trained(
        tokenizer, tmp_path / "compiled", kind, sub_batch_size, True, fresh=False, **options
    )
    assert trainer.model_wrapped is not trainer.model  # the regions were compiled
    assert any(type(module).__name__ == "OptimizedModule" for module in trainer.model_wrapped.modules())
    assert losses == pytest.approx(eager_losses, rel=1e-4)
    for name, weight in eager_weights.items():
        torch.testing.assert_close(weights[name], weight, atol=1e-5, rtol=1e-4, msg=name)


def test_a_run_of_changing_batch_shapes_compiles_a_bounded_number_of_graphs(tokenizer, tmp_path):
    """Packed batches change their token count at every step: after the first steps the compiled regions take it as
    a dynamic size, and the rest of the run compiles nothing more."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()  # the counts of this run alone
    trainer = contrastive_trainer(
        tokenizer, tmp_path, "clear", "packed", max_steps=24, logging_steps=100, torch_compile=True,
        torch_compile_backend="aot_eager", per_device_train_batch_size=4,
    )  # fmt: skip
    counts = []

    class CountGraphs(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            counts.append(torch._dynamo.utils.counters["stats"]["unique_graphs"])

    trainer.add_callback(CountGraphs())
    trainer.train()
    assert len(counts) == 24
    assert counts[4] == counts[-1], counts  # nothing compiled after the fifth step
    assert counts[-1] <= 16, counts
