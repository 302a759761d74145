"""Trainers of every contrastive path on the repository's real text, for the tests that run their steps (host
synchronisations, torch.compile)."""

from __future__ import annotations

import torch
import torch._dynamo
from datasets import Dataset

from contrastive_hf import ContrastiveConfig, ContrastiveForPreTraining
from contrastive_hf.data.augmentations import add_del_token
from contrastive_hf.data.collators import ContrastiveDataCollator, PairCollator
from contrastive_hf.training.trainer import ContrastiveTrainer
from contrastive_hf.training.training_args import ContrastiveTrainingArguments

from conftest import tiny_bert_config
from helpers.batches import nli_rows, sentences
from helpers.gpu_contracts import HostSyncCounter

__all__ = ["COLLATORS", "contrastive_trainer", "syncs_of_a_step", "trained"]


COLLATORS = {
    "simcse": lambda tokenizer: ContrastiveDataCollator(tokenizer, augmentation="dropout", mlm=False, max_length=32),
    "clear": lambda tokenizer: ContrastiveDataCollator(tokenizer, augmentation="del_word", mlm=True, max_length=32),
    "clear_mlm_on_views": lambda tokenizer: ContrastiveDataCollator(
        tokenizer, augmentation="del_word", mlm=True, mlm_on_views=True, max_length=32
    ),
    "hard_negatives": lambda tokenizer: PairCollator(tokenizer),
    "prompts": lambda tokenizer: PairCollator(
        tokenizer, prompts={"query": "query: ", "document": "passage: "}, include_prompt=False
    ),
}


def _arguments(tmp_path, **extra) -> ContrastiveTrainingArguments:
    settings = dict(
        output_dir=str(tmp_path), per_device_train_batch_size=8, max_steps=3, logging_steps=100, report_to="none",
        save_strategy="no", use_cpu=True, bf16=False,
    )  # fmt: skip
    return ContrastiveTrainingArguments(**{**settings, **extra})


def contrastive_trainer(tokenizer, tmp_path, kind: str, sub_batch_size, **extra) -> ContrastiveTrainer:
    if kind.startswith("clear"):
        add_del_token(tokenizer)
    collator = COLLATORS[kind](tokenizer)
    collator.seed = 0
    pairs = kind in ("hard_negatives", "prompts")
    data = Dataset.from_list(nli_rows(64)) if pairs else Dataset.from_dict({"text": sentences(64)})
    torch.manual_seed(0)
    config = ContrastiveConfig(
        encoder=tiny_bert_config(vocab_size=len(tokenizer)),
        pooler_type="mean",
        sub_batch_size=sub_batch_size,
        contrastive_loss="nt_xent" if kind.startswith("clear") else "info_nce",
        mlm_weight=1.0 if kind.startswith("clear") else 0.0,
        prompts=collator.prompts if kind == "prompts" else None,
        include_prompt=kind != "prompts",
    )
    model = ContrastiveForPreTraining(config)
    return ContrastiveTrainer(
        model=model, args=_arguments(tmp_path, **extra), train_dataset=data, data_collator=collator
    )


def syncs_of_a_step(trainer) -> HostSyncCounter:
    """The host synchronisations of the second training step (the first one makes one-time choices)."""
    batches = iter(trainer.get_train_dataloader())
    trainer.create_optimizer_and_scheduler(num_training_steps=trainer.args.max_steps)
    trainer.current_gradient_accumulation_steps = 1
    trainer.training_step(trainer.model, next(batches))
    step = next(batches)
    with HostSyncCounter() as counter:
        trainer.training_step(trainer.model, step)
    return counter


def trained(
    tokenizer,
    tmp_path,
    kind,
    sub_batch_size,
    compile_: bool,
    backend: str = "aot_eager",
    fresh: bool = True,
    **options,
):
    """3 steps of `contrastive_trainer`, dropout off, with ``--torch_compile`` (``backend``) or without: ``(logged
    losses, final weights, trainer)``. ``fresh``: dynamo forgets every graph it compiled before (else the regions take
    the graphs of earlier runs whose guards they pass, as a process compiling several models would)."""
    if fresh:
        torch._dynamo.reset()
    trainer = contrastive_trainer(
        tokenizer, tmp_path, kind, sub_batch_size, max_steps=3, logging_steps=1, learning_rate=1e-3,
        torch_compile=compile_, torch_compile_backend=backend, **options,
    )  # fmt: skip
    for module in trainer.model.modules():  # dropout off: compiled and eager steps draw no random masks
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    return losses, {name: p.detach().clone() for name, p in trainer.model.named_parameters()}, trainer
