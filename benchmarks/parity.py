"""The parity check the training benchmarks print before timing: each way of encoding a batch against one padded pass.

Dropout off (the model in eval mode), one batch through the forward of a `ContrastiveForPreTraining` or a
`DualEncoderModel`: the embeddings, the loss and the parameter gradients with each ``sub_batch_size`` against
``sub_batch_size=0``, optionally under autocast (bf16 on a GPU: then the differences include bf16 rounding, which
differs between paths).
"""

from __future__ import annotations

import contextlib
from dataclasses import replace

import torch


def encoding_parity(
    model, batch: dict, sub_batch_sizes: list, autocast_dtype: torch.dtype | None = None, kernel: str | None = None
) -> list[str]:
    """One line per ``sub_batch_size`` (0 excepted): max |embedding difference|, both losses, max |gradient
    difference| / max |gradient|. ``kernel`` forces the packed attention kernel (None: chosen per call)."""
    device = next(model.parameters()).device
    batch = {name: value.to(device) for name, value in batch.items() if value is not None}
    was_training, saved = model.training, model.config.sub_batch_size
    encoding_model = getattr(model, "contrastive", model)  # ContrastiveForPreTraining encodes with its inner model
    encoder = getattr(encoding_model, "encoder", None) or encoding_model.query_encoder
    saved_kernel = encoding_model.packed_attention_kernel
    model.eval()

    def run(sub_batch_size):
        model.config.sub_batch_size = sub_batch_size
        encoding_model.packed_attention_kernel = kernel
        model.zero_grad(set_to_none=True)
        autocast = (
            torch.autocast(device.type, dtype=autocast_dtype)
            if autocast_dtype is not None
            else contextlib.nullcontext()
        )
        with autocast:
            output = model(**batch)
        output.loss.backward()
        gradients = torch.cat([p.grad.flatten().float() for p in model.parameters() if p.grad is not None])
        return output.embeddings.detach().float(), output.loss.item(), gradients

    lines = []
    try:
        embeddings, loss, gradients = run(0)
        for sub_batch_size in sub_batch_sizes:
            if sub_batch_size == 0:
                continue
            other_embeddings, other_loss, other_gradients = run(sub_batch_size)
            path = replace(encoding_model.encoding_policy(), sub_batch_size=sub_batch_size).path(encoder, device)
            lines.append(
                f"sub_batch_size {sub_batch_size!s:>6} ({path}) vs padded: max |embedding difference| "
                f"{(other_embeddings - embeddings).abs().max().item():.1e}, loss {other_loss:.6f} vs {loss:.6f}, "
                "max |gradient difference| / max |gradient| "
                f"{((other_gradients - gradients).abs().max() / gradients.abs().max()).item():.1e}"
            )
    finally:
        model.zero_grad(set_to_none=True)
        model.config.sub_batch_size = saved
        encoding_model.packed_attention_kernel = saved_kernel
        model.train(was_training)
    return lines
