"""The weights a DeepSpeed run saves: whole, and in float32 from the optimiser's master weights.

With ``--bf16`` or ``--fp16``, DeepSpeed keeps the model itself in 16 bits and the float32 master weights in the
optimiser (sharded by ZeRO stages 1-3). The Trainer's save takes the model's 16-bit weights (ZeRO-3: gathered by
``stage3_gather_16bit_weights_on_model_save``), so a bf16 run wrote a bf16 checkpoint: every weight rounded to 8
bits of mantissa, and a reload in mixed dtypes (issue 30). `master_state_dict` gathers each parameter's float32
master instead (DeepSpeed's ``safe_get_full_fp32_param``, under every stage), as a run without DeepSpeed saves its
float32 weights.
"""

from __future__ import annotations

import torch

__all__ = ["master_state_dict", "SavesMasterWeights", "ZeroCannotSaveError"]


class ZeroCannotSaveError(ValueError):
    """A DeepSpeed ZeRO-3 configuration under which the trained model could not be saved whole (no
    ``stage3_gather_16bit_weights_on_model_save``), refused before training: a setting the user fixes, which the
    example scripts end with as a usage error (one line, exit status 2)."""


@torch.no_grad()
def master_state_dict(model: torch.nn.Module, keep: bool = True) -> dict[str, torch.Tensor] | None:
    """``model``'s state dict (every key of ``model.state_dict()``), each parameter whole and in float32 from the
    DeepSpeed optimiser's master copy, on the CPU; a parameter the optimiser does not hold (a frozen one) is
    gathered as the model holds it and cast to float32, buffers are taken as they are.

    A collective under DeepSpeed: every process must call it, in the same order; only where ``keep`` (the process
    that writes the files) is the result built, the others return None.
    """
    import deepspeed
    from deepspeed.utils import safe_get_full_fp32_param

    state = {} if keep else None
    for name, value in model.state_dict(keep_vars=True).items():  # the same names in the same order everywhere
        if isinstance(value, torch.nn.Parameter):
            master = safe_get_full_fp32_param(value)  # an all-reduce of the shards: on every process
            if master is None:  # no optimiser state: the model's own copy, gathered under ZeRO-3
                with deepspeed.zero.GatheredParameters([value]):
                    master = value.detach().clone()
            value = master
        if keep:
            value = value.detach().to("cpu", copy=True)
            state[name] = value.float() if value.is_floating_point() else value
    return state


class SavesMasterWeights:
    """A `transformers.Trainer` mixin: under DeepSpeed, `save_model` (the end of training and every checkpoint's
    weights) writes the float32 master weights, gathered whole (`master_state_dict`), where the Trainer's own save
    writes the 16-bit copy a ``--bf16`` or ``--fp16`` run computes with. Without DeepSpeed, the Trainer's save."""

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        if not self.is_deepspeed_enabled:
            return super().save_model(output_dir, _internal_call=_internal_call)
        state_dict = master_state_dict(self.model, keep=self.args.should_save)  # every process takes part
        self._save(output_dir, state_dict=state_dict)
        if self.args.push_to_hub and not _internal_call:
            self.push_to_hub(commit_message="Model save", revision=self.args.hub_revision)
        return None
