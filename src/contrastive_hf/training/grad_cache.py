"""GradCache (Gao et al., 2021, "Scaling Deep Contrastive Learning Batch Size under Memory Limited Setup").

In-batch negatives make the contrastive loss of a batch one function of all its embeddings, so a batch does not
split into independent micro-batches: gradient accumulation over micro-batches of k sentences trains with k - 1
negatives per query, not B - 1. GradCache keeps the whole batch's loss while holding the activations of only one
chunk at a time:

1. embed every chunk without building a graph, remembering the random state (dropout) each chunk started from;
2. compute the contrastive loss on the detached embeddings of the whole batch, and its gradient with respect to
   each embedding (cheap: the embeddings are a (B, S, d) tensor);
3. for each chunk, replay its forward pass with the graph from the same random state (so dropout draws the same
   masks and the embeddings are the ones of step 1) and back-propagate the cached embedding gradients: the
   parameter gradients add up to those of the full-batch loss.

Each chunk's pass also carries its share of the MLM loss. Peak memory is that of one chunk plus the (B, S, d)
embeddings, whatever the batch size; the price is a second forward pass.

The chunks' backward passes are one optimizer step: every chunk but the last only adds its gradients to this
process's, and the last one synchronises them across processes (and, under DeepSpeed, steps). How that is done
depends on the engine, and is all `ChunkBackward` knows: DDP's ``no_sync`` (`AcceleratorChunkBackward`), or
DeepSpeed's gradient-accumulation boundary under ZeRO-1, 2 and 3 (`DeepSpeedChunkBackward`); `chunk_backward`
picks the one an `Accelerator` needs.

The chunks' passes are collective under most engines: DDP all-reduces in the last chunk's backward, ZeRO-2 reduces in
every chunk's backward, ZeRO-3 gathers parameters in every forward (steps 1 and 3). So every process runs the same
number of chunks, that of the largest batch of any process (the processes exchange their batch sizes first: a
ragged last batch, uneven streamed shards): a process with fewer sentences pads steps 1 and 3 with replays of one of
its own sentences whose cached gradient and MLM share are zero, which add nothing to its gradients.
"""

from __future__ import annotations

import contextlib
from typing import Protocol, runtime_checkable

import numpy as np
import torch

from ..models.distributed import gather_sizes
from ..models.host_data import host_array

__all__ = [
    "GradCacheModel",
    "RandomState",
    "ChunkBackward",
    "AcceleratorChunkBackward",
    "DeepSpeedChunkBackward",
    "chunk_backward",
    "chunk_count",
    "grad_cache_step",
    "GradCacheResult",
]


@runtime_checkable
class GradCacheModel(Protocol):
    """What GradCache needs of a model; `ContrastiveForPreTraining` and `DualEncoderModel` implement it.

    - ``view_input_names``: the batch entries ``embed_views`` takes, each with the batch in dim 0 (GradCache slices
      them into chunks).
    - ``embed_views(**views)``: the ``(B, S, d)`` view embeddings of those entries (step 1).
    - ``compute_contrastive_loss(embeddings, sentence_ids)``: ``(loss, negatives_per_query)`` of the whole batch's
      embeddings (step 2), by the model's loss (which gathers the other processes' views and reads its pre-batch
      queue when it has one).
    - the model's forward, given a chunk and ``cached_embedding_gradients`` (the step-2 gradient of that chunk's
      embeddings), returns an output whose ``loss`` is ``cl_weight * sum(embeddings * gradients)``
      (`objectives.cached_gradient_surrogate`), plus, when the chunk carries MLM inputs, ``mlm_weight *
      mlm_loss_share * L_MLM(chunk)``, and whose ``mlm_loss`` (if the model has one) is ``mlm_loss_share *
      L_MLM(chunk)`` (step 3). The replay goes through the forward of the prepared (DDP / DeepSpeed) model, so that
      its gradient synchronisation sees every chunk.
    - ``config.cl_weight`` and ``config.mlm_weight``, read with defaults 1 and 0 when absent.
    """

    view_input_names: tuple[str, ...]

    def embed_views(self, **views: torch.Tensor) -> torch.Tensor: ...

    def compute_contrastive_loss(
        self, embeddings: torch.Tensor, sentence_ids: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]: ...


class RandomState:
    """The CPU random state and, on a CUDA device, that device's: what dropout draws from."""

    def __init__(self, device: torch.device):
        self.cpu = torch.get_rng_state()
        self.device = device if device.type == "cuda" else None
        self.cuda = torch.cuda.get_rng_state(device) if self.device is not None else None

    def restore(self) -> None:
        torch.set_rng_state(self.cpu)
        if self.device is not None:
            torch.cuda.set_rng_state(self.cuda, self.device)


class ChunkBackward:
    """How GradCache's chunks back-propagate so that together they are one optimizer step (step 3).

    Every chunk but the last is forwarded and back-propagated inside `accumulating()` with ``backward(loss,
    last=False)``: its gradients stay on this process, added to the earlier chunks'. The last chunk's
    ``backward(loss, last=True)`` ends the step: the gradients of all chunks are synchronised across processes there,
    once. This base class is a single process, with nothing to synchronise: ``loss.backward()``.
    """

    def accumulating(self) -> contextlib.AbstractContextManager:
        """Context of the forward and backward pass of every chunk but the last."""
        return contextlib.nullcontext()

    def backward(self, loss: torch.Tensor, last: bool) -> None:
        loss.backward()


class AcceleratorChunkBackward(ChunkBackward):
    """Under Accelerate without DeepSpeed (one process, DDP): ``accelerator.backward`` for every chunk, inside
    ``accelerator.no_sync(model)`` for all but the last, so that DDP all-reduces the summed gradients once."""

    def __init__(self, accelerator, model: torch.nn.Module):
        self.accelerator = accelerator
        self.model = model

    def accumulating(self) -> contextlib.AbstractContextManager:
        return self.accelerator.no_sync(self.model)

    def backward(self, loss: torch.Tensor, last: bool) -> None:
        self.accelerator.backward(loss)


class DeepSpeedChunkBackward(ChunkBackward):
    """Under DeepSpeed ZeRO-1, 2 or 3 (through Accelerate): the chunks are the micro-steps of one DeepSpeed step.

    DeepSpeed's ``no_sync`` refuses ZeRO-2/3 (they reduce and partition gradients as they are produced), and
    ``accelerator.backward`` under DeepSpeed also steps the optimizer. So every chunk but the last goes through
    the engine's backward outside its gradient-accumulation boundary: ZeRO-1 accumulates the gradients locally,
    ZeRO-2/3 reduce them into this process's partition and accumulate them there. The last chunk goes through
    ``accelerator.backward``, at the boundary when the Trainer synchronises this batch (its last gradient-
    accumulation micro-batch), where DeepSpeed reduces what is left, clips and steps. As the Trainer does under
    DeepSpeed, the loss arrives already divided by the gradient accumulation steps (``scale_wrt_gas=False``).

    ZeRO-2 communicates in every backward pass and ZeRO-3 in every forward pass too: `grad_cache_step` runs the same
    number of chunks on every process, whatever their batch sizes.
    """

    def __init__(self, accelerator):
        self.accelerator = accelerator

    def backward(self, loss: torch.Tensor, last: bool) -> None:
        if last:
            self.accelerator.backward(loss, scale_wrt_gas=False)
        else:
            self.accelerator.deepspeed_engine_wrapped.backward(loss, sync_gradients=False, scale_wrt_gas=False)


def chunk_backward(accelerator, model: torch.nn.Module) -> ChunkBackward:
    """The `ChunkBackward` of an Accelerate setup; ``model`` is the model as prepared for training."""
    from accelerate.utils import DistributedType

    if accelerator.distributed_type == DistributedType.DEEPSPEED:
        return DeepSpeedChunkBackward(accelerator)
    return AcceleratorChunkBackward(accelerator, model)


class GradCacheResult:
    """What one GradCache step computed, unscaled: the losses and the whole batch's detached embeddings."""

    def __init__(self, loss, cl_loss, mlm_loss, embeddings, negatives_per_query):
        self.loss = loss
        self.cl_loss = cl_loss
        self.mlm_loss = mlm_loss
        self.embeddings = embeddings
        self.negatives_per_query = negatives_per_query


def chunk_count(batch_sizes: list[int], chunk_size: int) -> int:
    """How many chunks every process runs for one batch: those of the largest batch of any process (``batch_sizes``:
    every process's, `distributed.gather_sizes`), so that the chunks' collectives line up across processes."""
    return -(-max(batch_sizes) // chunk_size)


class MaskedTokens:
    """The masked tokens of a batch's MLM copy, by rows: how many each chunk of rows holds (its share of the MLM
    loss) and their positions within it. From the collator's ``mlm_positions`` on the host (`models.host_data`),
    nothing is read back from the device; without them they are counted on the device (a read back per chunk)."""

    def __init__(self, labels: torch.Tensor, positions=None):
        self.labels = labels
        self.row_size = int(np.prod(labels.shape[1:]))  # positions are flat indices into the labels
        self.positions = None if positions is None else host_array(positions)
        self.total = max(len(self.positions) if self.positions is not None else int((labels != -100).sum()), 1)

    def of_rows(self, start: int, end: int) -> tuple[int, np.ndarray | None]:
        """``(count, positions)`` of rows ``start:end``: positions relative to the chunk (None without host ones)."""
        if self.positions is None:
            return int((self.labels[start:end] != -100).sum()), None
        low, high = np.searchsorted(self.positions, [start * self.row_size, end * self.row_size])
        return int(high - low), self.positions[low:high] - start * self.row_size


def gathers_weights_for_embed_views(model: torch.nn.Module) -> None:
    """Make a model sharded by torch's FSDP2 (`fully_shard`) gather its weights for ``embed_views`` too, which
    GradCache calls outside ``forward``: FSDP2 gathers a module's shards around its ``forward`` alone, and the weights
    of the root (the embeddings, the heads) would stay shards (`register_fsdp_forward_method`). DeepSpeed ZeRO-3
    gathers in every submodule's forward, and needs nothing."""
    try:
        from torch.distributed.fsdp import FSDPModule, register_fsdp_forward_method
    except ImportError:  # a torch without FSDP2: nothing of it to wrap
        return
    if isinstance(model, FSDPModule) and not getattr(model, "_embed_views_gathers", False):
        register_fsdp_forward_method(model, "embed_views")
        model._embed_views_gathers = True


def grad_cache_step(
    model: torch.nn.Module,
    unwrapped: torch.nn.Module,
    inputs: dict[str, torch.Tensor],
    chunk_size: int,
    backward: ChunkBackward | None = None,
    loss_scale: float = 1.0,
    check_finite=None,
    batch_sizes: list[int] | None = None,
) -> GradCacheResult:
    """Forward and backward of one batch in chunks of ``chunk_size`` sentences, with the full batch's loss.

    With several processes, call it on every process, whatever its batch size: each runs `chunk_count` chunks, a
    process with fewer sentences padding with zero-weighted replays (see the module's docstring).

    Args:
        model: the model as prepared for training (DDP-wrapped, a DeepSpeed engine): the replayed passes go through
            it so that its gradient synchronisation sees every chunk and happens once, on the last.
        unwrapped: the bare model, a `GradCacheModel`.
        inputs: the batch (views ``(B, S, L)``, optional ``sentence_ids`` and MLM copy).
        chunk_size: sentences per chunk.
        backward: how the chunks back-propagate as one step (`chunk_backward` of an Accelerator); default: one
            process, ``loss.backward()``.
        loss_scale: factor on what is back-propagated (1 / gradient accumulation steps).
        check_finite: called with ``{"cl_loss": ...}`` before anything is back-propagated.
        batch_sizes: every process's batch size, in rank order, when the caller already gathered them
            (`distributed.gather_sizes`); else they are exchanged here.
    """
    backward = ChunkBackward() if backward is None else backward
    gathers_weights_for_embed_views(unwrapped)
    names = [name for name in unwrapped.view_input_names if inputs.get(name) is not None]
    batch_size = inputs[names[0]].shape[0]
    device = inputs[names[0]].device
    batch_sizes = gather_sizes(batch_size, device) if batch_sizes is None else list(batch_sizes)
    if min(batch_sizes) == 0:  # raised on every process at once: each knows every size
        raise ValueError(
            f"GradCache got per-process batch sizes {batch_sizes} (process 0 first): every process needs at least "
            "one sentence, which it replays to keep its chunks' collectives in step with the other processes'."
        )
    starts = list(range(0, batch_size, chunk_size))
    num_chunks = chunk_count(batch_sizes, chunk_size)
    padding = num_chunks - len(starts)  # zero-weighted replays of this process's first sentence

    # 1. every chunk's embeddings, without a graph; the random state each chunk started from is kept for step 3
    states, pieces = [], []
    with torch.no_grad():
        for start in starts:
            states.append(RandomState(device))
            pieces.append(unwrapped.embed_views(**{name: inputs[name][start : start + chunk_size] for name in names}))
        for _ in range(padding):  # ZeRO-3 gathers the parameters in each forward pass
            unwrapped.embed_views(**{name: inputs[name][:1] for name in names})
    # float32 (float64 stays float64), whatever the forward computed in: the cached gradients of a batch of B
    # sentences are about 1 / B each, below float16's smallest normal number for large batches, and no loss scale
    # reaches them (GradScaler scales the replay's loss, not this gradient)
    embeddings = torch.cat(pieces).detach()  # (B, S, d)
    embeddings = embeddings.to(torch.promote_types(embeddings.dtype, torch.float32)).requires_grad_()

    # 2. the whole batch's contrastive loss and its gradient with respect to each embedding
    cl_loss = negatives = None
    gradients = None
    config = unwrapped.config
    cl_weight, mlm_weight = getattr(config, "cl_weight", 1.0), getattr(config, "mlm_weight", 0.0)
    if cl_weight > 0:
        cl_loss, negatives = unwrapped.compute_contrastive_loss(embeddings, inputs.get("sentence_ids"))
        if check_finite is not None:
            check_finite({"cl_loss": cl_loss})
        (gradients,) = torch.autograd.grad(cl_loss, embeddings)

    # 3. replay each chunk with its graph and back-propagate the cached gradients (plus the chunk's MLM share)
    labels = inputs.get("mlm_labels")
    with_mlm = labels is not None and mlm_weight > 0
    masked = MaskedTokens(labels, inputs.get("mlm_positions")) if with_mlm else None
    mlm_loss = None
    for index in range(num_chunks):
        padded = index >= len(starts)
        start, end = (0, 1) if padded else (starts[index], starts[index] + chunk_size)
        chunk = {name: inputs[name][start:end] for name in names}
        share = 1.0
        if with_mlm:
            for name in ("mlm_input_ids", "mlm_attention_mask", "mlm_labels", "mlm_lengths"):
                if inputs.get(name) is not None:
                    chunk[name] = inputs[name][start:end]
            count, positions = masked.of_rows(start, end)
            if positions is not None:
                chunk["mlm_positions"] = positions
            share = 0.0 if padded else count / masked.total
        if gradients is not None:
            cached = gradients[start:end]
            chunk["cached_embedding_gradients"] = torch.zeros_like(cached) if padded else cached
        last = index == num_chunks - 1
        with contextlib.nullcontext() if last else backward.accumulating():
            if not padded:
                states[index].restore()
            outputs = model(**chunk, **({"mlm_loss_share": share} if with_mlm else {}))
            if with_mlm and check_finite is not None:
                check_finite({"mlm_loss": outputs.mlm_loss})
            backward.backward(outputs.loss * loss_scale, last)
        chunk_mlm_loss = getattr(outputs, "mlm_loss", None)
        if chunk_mlm_loss is not None and not padded:
            mlm_loss = chunk_mlm_loss.detach() if mlm_loss is None else mlm_loss + chunk_mlm_loss.detach()

    loss = 0.0
    if cl_loss is not None:
        loss = loss + cl_weight * cl_loss.detach()
    if mlm_loss is not None:
        loss = loss + mlm_weight * mlm_loss
    return GradCacheResult(
        loss=torch.as_tensor(loss, device=device, dtype=torch.float32),
        cl_loss=None if cl_loss is None else cl_loss.detach(),
        mlm_loss=mlm_loss,
        embeddings=embeddings.detach(),
        negatives_per_query=negatives,
    )
