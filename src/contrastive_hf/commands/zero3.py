"""The model whole in one process under DeepSpeed ZeRO-3, which otherwise shards every parameter across the
processes: while it is built (`built_whole`), and while its weights are read (`whole_parameters`)."""

from __future__ import annotations

from contextlib import contextmanager, nullcontext

from transformers.integrations import is_deepspeed_zero3_enabled, set_hf_deepspeed_config, unset_hf_deepspeed_config

__all__ = ["built_whole", "whole_parameters"]


@contextmanager
def built_whole(training_args):
    """Build the model whole in this process, even under DeepSpeed ZeRO-3.

    Under ZeRO-3, transformers creates every model inside `deepspeed.zero.Init`, which shards each parameter across
    the processes as soon as it exists, while wrapping a pretrained encoder, copying its MLM head and resizing the
    vocabulary for [DEL] read and write whole weights. A sentence encoder fits in each process's memory, and
    `deepspeed.initialize` shards the whole model when training starts.
    """
    plugin = getattr(training_args, "deepspeed_plugin", None)
    holder = getattr(plugin, "dschf", None) or getattr(training_args, "hf_deepspeed_config", None)
    if holder is None or not is_deepspeed_zero3_enabled():
        yield
        return
    unset_hf_deepspeed_config()
    try:
        yield
    finally:
        set_hf_deepspeed_config(holder)  # the Trainer's DeepSpeed integration reads it again


def whole_parameters(model):
    """Every parameter of ``model`` whole in this process while the context lasts: DeepSpeed ZeRO-3 keeps only a
    shard of each (entering gathers them, a collective: every process must enter). A no-op otherwise."""
    if not is_deepspeed_zero3_enabled():
        return nullcontext()
    import deepspeed

    return deepspeed.zero.GatheredParameters(list(model.parameters()))
