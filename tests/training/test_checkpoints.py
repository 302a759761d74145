"""Checkpoints that are whole or say loudly that they are not (`contrastive_hf.training.checkpoints`): a save that
was killed or ran out of disk leaves a checkpoint that resuming skips (with a warning) or refuses (listing what is
wrong), a full disk says so, ``save_total_limit`` never deletes the last complete checkpoint, and a resume with
another data layout (processes, batch size, gradient accumulation, streaming) is refused before training."""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import time
from types import SimpleNamespace

import pytest
import torch
from transformers import TrainerCallback

from contrastive_hf.hub.model_card import card_info_from_trainer
from contrastive_hf.training import trainer as trainer_module
from contrastive_hf.training.checkpoints import (
    INCOMPLETE_MARKER,
    CheckpointLayout,
    CheckpointSaveError,
    IncompleteCheckpointError,
)
from contrastive_hf.training.resume_changes import DataLayoutChangedError
from contrastive_hf.training.trainer import LOSS_STATE_FILE

from helpers.builders import QUEUE_SENTENCES, make_dual_encoder_trainer, make_queue_trainer

LAYOUT = CheckpointLayout()


class _CountSteps(TrainerCallback):
    def __init__(self):
        self.steps = 0

    def on_step_end(self, args, state, control, **kwargs):
        self.steps += 1


def _train(tokenizer, output_dir, max_steps=4, resume=None, **extra):
    """Train (saving every 2 steps), resuming from ``resume``; returns the trainer and how many steps it took."""
    trainer = make_queue_trainer(
        tokenizer, output_dir, max_steps=max_steps, save_strategy="steps", save_steps=2, logging_steps=1, **extra
    )
    counter = _CountSteps()
    trainer.add_callback(counter)
    trainer.train(resume_from_checkpoint=resume)
    return trainer, counter.steps


def _truncate(path, keep=0.5):
    content = path.read_bytes()
    path.write_bytes(content[: int(len(content) * keep)])


def test_a_finished_save_leaves_a_complete_checkpoint_without_the_marker(tokenizer, tmp_path):
    trainer, _ = _train(tokenizer, tmp_path, prebatch_size=2)
    for step in (2, 4):
        folder = tmp_path / f"checkpoint-{step}"
        assert not (folder / INCOMPLETE_MARKER).exists()
        assert (folder / LOSS_STATE_FILE).exists()
        assert trainer.checkpoint_layout().problems(str(folder)) == []


@pytest.mark.parametrize("killed", ["while_writing_the_model", "while_writing_the_queue"])
def test_resuming_the_latest_skips_a_half_written_checkpoint_with_a_warning(tokenizer, tmp_path, caplog, killed):
    _train(tokenizer, tmp_path, prebatch_size=2)
    newest = tmp_path / "checkpoint-4"
    if killed == "while_writing_the_model":  # what transformers' own save leaves: no trainer_state.json (written last)
        _truncate(newest / "model.safetensors")
        for name in ("optimizer.pt", "scheduler.pt", "rng_state.pth", "trainer_state.json", LOSS_STATE_FILE):
            (newest / name).unlink()
    else:  # the last file, after trainer_state.json: only the marker tells
        (newest / INCOMPLETE_MARKER).write_text("saving")
        _truncate(newest / LOSS_STATE_FILE)

    with caplog.at_level(logging.WARNING, logger="contrastive_hf.training.checkpoints"):
        trainer, steps = _train(tokenizer, tmp_path, resume=True, prebatch_size=2)
    assert steps == 2  # resumed at step 2, not 4
    warning = " ".join(record.getMessage() for record in caplog.records)
    assert f"Skipping the incomplete checkpoint {newest}" in warning
    assert f"resuming from {tmp_path / 'checkpoint-2'}" in warning
    assert ("model.safetensors is truncated" if killed == "while_writing_the_model" else INCOMPLETE_MARKER) in warning
    # the resumed run saved step 4 again, whole
    assert trainer.checkpoint_layout().problems(str(newest)) == []


def test_resuming_an_incomplete_checkpoint_by_name_lists_what_is_missing(tokenizer, tmp_path):
    _train(tokenizer, tmp_path)
    newest = tmp_path / "checkpoint-4"
    (newest / "optimizer.pt").unlink()  # transformers alone would resume with a fresh optimizer, silently
    (newest / "rng_state.pth").unlink()
    trainer = make_queue_trainer(tokenizer, tmp_path, max_steps=6)
    with pytest.raises(IncompleteCheckpointError) as caught:
        trainer.train(resume_from_checkpoint=str(newest))
    message = str(caught.value)
    assert f"Cannot resume from {newest}" in message
    assert "missing optimizer.pt" in message and "missing rng_state.pth" in message
    assert f"Resume from {tmp_path / 'checkpoint-2'}" in message and "--save_only_model" in message

    _truncate(newest / "model.safetensors", keep=0.9)
    with pytest.raises(IncompleteCheckpointError, match=r"model\.safetensors is truncated or corrupt"):
        trainer.train(resume_from_checkpoint=str(newest))
    with pytest.raises(IncompleteCheckpointError, match="no such folder"):
        trainer.train(resume_from_checkpoint=str(tmp_path / "checkpoint-8"))


@pytest.mark.parametrize("by_name", [True, False])
def test_a_deepspeed_checkpoint_resumed_without_deepspeed_says_so_not_that_it_is_incomplete(
    tokenizer, tmp_path, by_name
):
    _train(tokenizer, tmp_path)
    newest = tmp_path / "checkpoint-4"
    # what a ZeRO run writes instead of optimizer.pt: DeepSpeed's own states, one folder per saved step
    (newest / "optimizer.pt").unlink()
    (newest / "global_step4").mkdir()
    torch.save({}, newest / "global_step4" / "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt")
    torch.save({}, newest / "global_step4" / "zero_pp_rank_0_mp_rank_00_model_states.pt")
    (newest / "latest").write_text("global_step4")
    shutil.rmtree(tmp_path / "checkpoint-2")  # the newest checkpoint is the one a resume would take
    trainer = make_queue_trainer(tokenizer, tmp_path, max_steps=6)
    with pytest.raises(IncompleteCheckpointError) as caught:
        trainer.train(resume_from_checkpoint=str(newest) if by_name else True)
    assert str(caught.value) == (
        f"Cannot resume from {newest} without DeepSpeed: it was written by a DeepSpeed run, which keeps the "
        "optimizer state in global_step4/ (DeepSpeed's format), not in optimizer.pt. Resume it under DeepSpeed with "
        "the config it was trained with (e.g. accelerate launch --config_file ds_configs/accelerate_zero3.yaml ...), "
        f"or start a new run from its weights with --model_name_or_path {newest}."
    )


@pytest.mark.parametrize("latest", [True, "true", "latest"])  # strings: a script's --resume_from_checkpoint
def test_resuming_the_latest_with_no_complete_checkpoint_says_so(tokenizer, tmp_path, latest):
    trainer = make_queue_trainer(tokenizer, tmp_path, max_steps=2)
    (tmp_path / "checkpoint-2").mkdir()  # a save killed before it wrote anything
    with pytest.raises(IncompleteCheckpointError, match="no complete checkpoint") as caught:
        trainer.train(resume_from_checkpoint=latest)
    assert f"{tmp_path / 'checkpoint-2'} (missing trainer_state.json" in str(caught.value)


@pytest.mark.slow  # a run saving until the disk is full: 1 s of CPU
def test_a_full_disk_says_so_and_keeps_the_previous_checkpoint(tokenizer, tmp_path, monkeypatch, caplog):
    real_save_file = trainer_module.save_file

    def save_file_on_a_full_disk(tensors, path, *args, **kwargs):
        if "checkpoint-4" in str(path):  # the queue, the last file of the checkpoint
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real_save_file(tensors, path, *args, **kwargs)

    monkeypatch.setattr(trainer_module, "save_file", save_file_on_a_full_disk)
    with pytest.raises(CheckpointSaveError) as caught:
        _train(tokenizer, tmp_path, prebatch_size=2, save_total_limit=1)
    message = str(caught.value)
    assert caught.value.errno == errno.ENOSPC
    assert f"{tmp_path / 'checkpoint-4'} failed: the disk is full" in message
    assert f"{tmp_path / 'checkpoint-2'} is the latest complete checkpoint" in message
    assert "--output_dir" in message and "--save_total_limit" in message
    layout = CheckpointLayout(extra_files=(LOSS_STATE_FILE,))
    assert layout.problems(str(tmp_path / "checkpoint-2")) == []  # not rotated away by the failed save
    assert (tmp_path / "checkpoint-4" / INCOMPLETE_MARKER).exists()

    monkeypatch.setattr(trainer_module, "save_file", real_save_file)
    with caplog.at_level(logging.WARNING, logger="contrastive_hf.training.checkpoints"):
        _, steps = _train(tokenizer, tmp_path, resume=True, prebatch_size=2, save_total_limit=1)
    assert steps == 2 and "Skipping the incomplete checkpoint" in caplog.text


def test_torchs_write_error_on_a_full_disk_says_the_disk_is_full(tokenizer, tmp_path, monkeypatch):
    real_save = torch.save

    def failing_save(obj, path, *args, **kwargs):
        if str(path).endswith(os.path.join("checkpoint-4", "optimizer.pt")):  # what a full disk gave in issue 13
            raise RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos 4206208 vs 4206096")
        return real_save(obj, path, *args, **kwargs)

    monkeypatch.setattr(torch, "save", failing_save)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: SimpleNamespace(total=2**40, used=2**40, free=0))
    with pytest.raises(CheckpointSaveError, match="the disk is full"):
        _train(tokenizer, tmp_path / "full")

    # the same error with room on the disk is not a full disk: it goes through, naming the incomplete checkpoint
    monkeypatch.setattr(shutil, "disk_usage", lambda path: SimpleNamespace(total=2**40, used=0, free=2**40))
    with pytest.raises(RuntimeError, match="unexpected pos") as caught:
        _train(tokenizer, tmp_path / "room")
    assert not isinstance(caught.value, CheckpointSaveError)
    note = " ".join(caught.value.__notes__)
    assert f"{tmp_path / 'room' / 'checkpoint-4'} is incomplete" in note
    assert f"{tmp_path / 'room' / 'checkpoint-2'} is the latest complete checkpoint" in note


def test_rotation_never_deletes_the_last_complete_checkpoint_for_a_newer_incomplete_one(tokenizer, tmp_path):
    _train(tokenizer, tmp_path, max_steps=2)
    # A save of step 6 killed in an earlier run; newer by step number, and by time too here (another node's clock
    # on a shared filesystem): transformers' rotation keeps "the most recent" checkpoint, which is this one.
    stale = tmp_path / "checkpoint-6"
    shutil.copytree(tmp_path / "checkpoint-2", stale)
    (stale / INCOMPLETE_MARKER).write_text("saving")
    os.utime(stale, (time.time() + 3600, time.time() + 3600))

    _train(tokenizer, tmp_path, max_steps=4, resume=str(tmp_path / "checkpoint-2"), save_total_limit=1)
    assert LAYOUT.problems(str(tmp_path / "checkpoint-4")) == []
    assert sorted(os.listdir(tmp_path)) == ["checkpoint-4"]  # the incomplete one went first, then the oldest


def test_a_dual_encoders_checkpoint_is_checked_tower_by_tower(tokenizer, tmp_path):
    trainer = make_dual_encoder_trainer(tokenizer, tmp_path, max_steps=2, save_strategy="steps", save_steps=2)
    trainer.train()
    layout, checkpoint = trainer.checkpoint_layout(), tmp_path / "checkpoint-2"
    assert layout.weight_folders == ("query_0_Transformer", "document_0_Transformer")  # no weights at the root
    assert layout.problems(str(checkpoint)) == []
    (checkpoint / "document_0_Transformer" / "model.safetensors").unlink()
    with pytest.raises(IncompleteCheckpointError, match="missing the model's weights \\(document_0_Transformer/"):
        trainer.train(resume_from_checkpoint=str(checkpoint))


def _set_recorded_layout(checkpoint, **values):
    """Change the data layout ``checkpoint``'s trainer_state.json records (None: remove the record, as a checkpoint
    written before it was recorded)."""
    path = checkpoint / "trainer_state.json"
    state = json.loads(path.read_text())
    if values.get("record", True) is None:
        del state["stateful_callbacks"]["DataLayout"]
    else:
        state["stateful_callbacks"]["DataLayout"]["args"].update(values)
    path.write_text(json.dumps(state))


def test_a_resume_with_another_data_layout_is_refused_before_training(tokenizer, tmp_path):
    """The reported defect: a checkpoint resumed with another batch size, gradient accumulation or number of processes
    skipped its step count in batches of the new size (rows never trained, no warning). It is now refused, naming
    the old and new values and what to do, before a step is taken."""
    _train(tokenizer, tmp_path / "run", max_steps=2)
    checkpoint = tmp_path / "run" / "checkpoint-2"
    recorded = json.loads((checkpoint / "trainer_state.json").read_text())["stateful_callbacks"]["DataLayout"]
    digest = recorded["args"].pop("rows_digest")
    assert recorded["args"] == {"world_size": 1, "per_device_train_batch_size": 4, "gradient_accumulation_steps": 1,
                                "streaming": False, "dataloader_num_workers": 0, "seed": 0, "data_seed": None,
                                "rows": 24, "views": "dropout", "max_length": 16}  # fmt: skip
    assert len(digest) == 16
    counter = _CountSteps()
    for name, old, new in [("per_device_train_batch_size", 4, 8), ("gradient_accumulation_steps", 1, 2)]:
        trainer = make_queue_trainer(tokenizer, tmp_path / "resumed", max_steps=4, **{name: new})
        trainer.add_callback(counter)
        with pytest.raises(DataLayoutChangedError) as caught:
            trainer.train(resume_from_checkpoint=str(checkpoint))
        assert str(caught.value) == (
            f"Cannot resume from {checkpoint} with other data than it was trained with: --{name} {old} -> {new}. The "
            "checkpoint counts where training is at step 2 of its own batches; resumed on other batches, some "
            "examples of the epoch (or stream) would never be trained on and others twice, or seen with other views. "
            f"Resume with its settings (--{name} {old}), or start a new run from its weights (--model_name_or_path "
            f"{checkpoint}, without --resume_from_checkpoint), or resume anyway with --resume_with_changed_data true "
            "(the log says what the epoch skips or repeats)."
        )
    # what a unit test cannot launch, recorded by the checkpoint: 2 processes; streaming (the launches are in
    # tests/integration/test_data_ledger.py)
    _set_recorded_layout(checkpoint, world_size=2, streaming=True)
    trainer = make_queue_trainer(tokenizer, tmp_path / "resumed", max_steps=4)
    trainer.add_callback(counter)
    with pytest.raises(DataLayoutChangedError) as caught:
        trainer.train(resume_from_checkpoint=str(checkpoint))
    assert "trained with: processes (world size) 2 -> 1, --streaming True -> False." in str(caught.value)
    assert "Resume with its settings (accelerate launch --num_processes 2, --streaming true)" in str(caught.value)
    assert counter.steps == 0 and not list((tmp_path / "resumed").glob("checkpoint-*"))  # refused before training


@pytest.mark.slow  # a run and its resumes: 1 s of CPU
def test_a_checkpoint_without_a_recorded_layout_is_compared_by_its_arguments_and_random_states(tokenizer, tmp_path):
    """A checkpoint written before the layout was recorded: its training_args.bin gives the batch size, its
    rng_state files the number of processes (one each, or rng_state.pth alone); the same layout resumes and saves."""
    _train(tokenizer, tmp_path, max_steps=2)
    checkpoint = tmp_path / "checkpoint-2"
    _set_recorded_layout(checkpoint, record=None)
    with pytest.raises(DataLayoutChangedError, match="trained with: --per_device_train_batch_size 4 -> 2"):
        _train(tokenizer, tmp_path, max_steps=4, resume=str(checkpoint), per_device_train_batch_size=2)
    trainer, steps = _train(tokenizer, tmp_path, max_steps=4, resume=str(checkpoint))
    assert steps == 2 and LAYOUT.problems(str(tmp_path / "checkpoint-4")) == []  # resumed and saved its record
    state = json.loads((tmp_path / "checkpoint-4" / "trainer_state.json").read_text())
    assert state["stateful_callbacks"]["DataLayout"]["args"]["per_device_train_batch_size"] == 4
    (checkpoint / "rng_state.pth").rename(checkpoint / "rng_state_0.pth")
    shutil.copy(checkpoint / "rng_state_0.pth", checkpoint / "rng_state_1.pth")
    with pytest.raises(DataLayoutChangedError, match=r"trained with: processes \(world size\) 2 -> 1\."):
        _train(tokenizer, tmp_path, max_steps=4, resume=str(checkpoint))


@pytest.mark.slow  # a run and five resumes: 1.5 s of CPU
def test_a_resume_on_other_rows_seed_or_views_is_refused_and_resume_anyway_says_what_the_epoch_skips(
    tokenizer, tmp_path, caplog
):
    """The reported defects: a resume after the corpus grew (or another --max_train_samples) skipped 2 batches of a
    new order (19 of 80 rows never trained in that epoch and 19 twice), saying nothing; another --seed was warned
    about without saying that rows are skipped; other --augmentations or --max_seq_length, nothing. Each is refused
    before training with the value to give back; --resume_with_changed_data resumes, saying what the epoch skips."""
    from contrastive_hf.data.collators import ContrastiveDataCollator

    _train(tokenizer, tmp_path / "run", max_steps=2)
    checkpoint = str(tmp_path / "run" / "checkpoint-2")
    grown = [*QUEUE_SENTENCES, *(f"an appended sentence {i}" for i in range(8))]
    edited = [sentence.replace("topic", "subject") for sentence in QUEUE_SENTENCES]
    cases = [
        ({"sentences": grown}, "training rows 24 -> 32", "the same training data (24 rows: the same files and"),
        ({"sentences": edited}, "other training rows (the same number, other content)", "the same rows"),
        ({"seed": 1}, "--seed 0 -> 1", "--seed 0"),
        ({"views": "reorder"}, "views (--augmentations) 'dropout' -> 'reorder'", "its views (dropout)"),
    ]
    counter = _CountSteps()
    for change, changed, restore in cases:
        trainer = make_queue_trainer(tokenizer, tmp_path / "resumed", max_steps=4, **change)
        trainer.add_callback(counter)
        with pytest.raises(DataLayoutChangedError) as caught:
            trainer.train(resume_from_checkpoint=checkpoint)
        assert f"with other data than it was trained with: {changed}." in str(caught.value)
        assert f"Resume with its settings ({restore}" in str(caught.value)
    trainer = make_queue_trainer(tokenizer, tmp_path / "resumed", max_steps=4)
    trainer.data_collator = ContrastiveDataCollator(tokenizer, augmentation="dropout", mlm=False, max_length=12)
    trainer.add_callback(counter)
    with pytest.raises(DataLayoutChangedError, match="trained with: --max_seq_length 16 -> 12."):
        trainer.train(resume_from_checkpoint=checkpoint)
    assert counter.steps == 0  # each refused before a step

    # resumed anyway: 8 rows of 24 trained before the save, 8 of 32 skipped in the new order
    trainer = make_queue_trainer(
        tokenizer, tmp_path / "anyway", max_steps=4, sentences=grown, resume_with_changed_data=True
    )
    trainer.add_callback(counter)
    with caplog.at_level(logging.WARNING, logger="contrastive_hf"):
        trainer.train(resume_from_checkpoint=checkpoint)
    assert counter.steps == 2
    assert (
        f"Resuming from {checkpoint} with other data than it was trained with (--resume_with_changed_data): training "
        "rows 24 -> 32. At step 2 the saved run had trained 8 of the 24 rows of its epoch 1; this run skips the "
        "first 8 of its 32 rows in its own order and trains the rest. In another order, up to 8 rows go untrained "
        "this epoch and up to 8 train twice (about 6 and 6 for random orders)."
    ) in caplog.text
    # what it trained on is recorded: a later resume compares with the new data; the card names the change
    state = json.loads((tmp_path / "anyway" / "checkpoint-4" / "trainer_state.json").read_text())
    assert state["stateful_callbacks"]["DataLayout"]["args"]["rows"] == 32
    card = card_info_from_trainer(trainer)
    assert card.hyperparameters["data changed when resumed"] == "at step 2: training rows 24 -> 32"

    caplog.clear()  # only the views changed: the same rows in the same order
    trainer = make_queue_trainer(
        tokenizer, tmp_path / "views", max_steps=3, views="reorder", resume_with_changed_data=True
    )
    with caplog.at_level(logging.WARNING, logger="contrastive_hf"):
        trainer.train(resume_from_checkpoint=checkpoint)
    assert "views (--augmentations) 'dropout' -> 'reorder'. The rows and their order are the same" in caplog.text


def test_a_checkpoint_recorded_before_rows_seed_and_views_were_compared_by_what_it_recorded(tokenizer, tmp_path):
    """A checkpoint whose layout record predates rows, views and seeds: the seed from its training_args.bin, the
    rest not compared, so it resumes onto grown data (the resume cannot tell) and refuses another seed."""
    _train(tokenizer, tmp_path, max_steps=2)
    checkpoint = tmp_path / "checkpoint-2"
    path = checkpoint / "trainer_state.json"
    state = json.loads(path.read_text())
    for name in ("seed", "data_seed", "rows", "rows_digest", "views", "max_length"):
        del state["stateful_callbacks"]["DataLayout"]["args"][name]
    path.write_text(json.dumps(state))
    with pytest.raises(DataLayoutChangedError, match="trained with: --seed 0 -> 3."):
        _train(tokenizer, tmp_path, max_steps=4, resume=str(checkpoint), seed=3)
    grown = [*QUEUE_SENTENCES, "one more sentence"]
    _, steps = _train(tokenizer, tmp_path, max_steps=4, resume=str(checkpoint), sentences=grown)
    assert steps == 2


def test_a_resume_with_other_augmentation_settings_is_refused_naming_each_flag(tokenizer, tmp_path):
    """The views' hyper-parameters are part of what a checkpoint was trained on: another --span_ratio is refused
    before training, naming the flag and the values to give back."""
    from contrastive_hf.data.collators import ContrastiveDataCollator

    _train(tokenizer, tmp_path / "run", max_steps=2, views="reorder")
    checkpoint = str(tmp_path / "run" / "checkpoint-2")
    state = json.loads((tmp_path / "run" / "checkpoint-2" / "trainer_state.json").read_text())
    recorded = state["stateful_callbacks"]["DataLayout"]["args"]
    assert recorded["view_settings"] == {"num_reordered_pairs": 5, "span_ratio": 0.05}
    trainer = make_queue_trainer(tokenizer, tmp_path / "resumed", max_steps=4, views="reorder")
    trainer.data_collator = ContrastiveDataCollator(
        tokenizer, augmentation="reorder", view_settings={"span_ratio": 0.2}, mlm=False, max_length=16, seed=0
    )
    with pytest.raises(DataLayoutChangedError) as caught:
        trainer.train(resume_from_checkpoint=checkpoint)
    assert "with other data than it was trained with: --span_ratio 0.05 -> 0.2." in str(caught.value)
    assert "Resume with its settings (its views' settings (--num_reordered_pairs 5 --span_ratio 0.05))" in str(
        caught.value
    )
    _, steps = _train(tokenizer, tmp_path / "run", max_steps=4, resume=checkpoint, views="reorder")
    assert steps == 2  # the same settings resume
