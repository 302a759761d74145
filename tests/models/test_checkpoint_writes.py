"""A save that fails while writing a file (contrastive_hf.models.checkpoint_writes) names the file and the cause, and
leaves what the folder held: every weights file is written under a temporary name and renamed into place once whole.

The failure is made where safetensors writes, `safetensors.torch.serialize_file` (which ``save_file`` calls, for
transformers' encoder weights and for ours alike): as a full disk makes it fail, it writes part of the file it was
given, then raises ``SafetensorError`` with the OS error it met."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
import safetensors.torch
import torch
from safetensors import SafetensorError

from contrastive_hf import ContrastiveConfig, ContrastiveForPreTraining, ContrastiveModel
from contrastive_hf.models.checkpoint_writes import CheckpointWriteError

from conftest import tiny_bert_config

FULL_DISK = "Error while serializing: I/O error: No space left on device (os error 28)"


def fail_writing(monkeypatch, folder: Path, relative: str) -> None:
    """Writing ``folder/relative`` (under whatever name it is written) fails as on a full disk, after writing part of
    the file; every other file is written."""
    real = safetensors.torch.serialize_file
    target = folder / relative

    def serialize_on_a_full_disk(tensors, filename, metadata=None):
        path = Path(filename)
        if path.parent == target.parent and target.name in path.name:  # the file, or its temporary name
            path.write_bytes(b"\x00" * 100)  # what was written before the disk filled up
            raise SafetensorError(FULL_DISK)
        return real(tensors, filename, metadata=metadata)

    monkeypatch.setattr(safetensors.torch, "serialize_file", serialize_on_a_full_disk)


def saved_files(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


@pytest.mark.parametrize(
    "relative",
    ["model.safetensors", "contrastive_heads.safetensors", "2_Dense/model.safetensors"],
    ids=["encoder", "heads", "dense"],
)
def test_a_full_disk_while_saving_names_the_file_and_keeps_the_earlier_checkpoint(relative, tmp_path, monkeypatch):
    config = ContrastiveConfig(encoder=tiny_bert_config(), projection_type="linear", projection_at_inference=True)
    model = ContrastiveForPreTraining(config)  # an MLM head never trained: in contrastive_heads.safetensors
    model.save_pretrained(tmp_path)
    before = saved_files(tmp_path)
    assert relative in before
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(1.0)  # the weights of a later step

    fail_writing(monkeypatch, tmp_path, relative)
    with pytest.raises(CheckpointWriteError) as error:
        model.save_pretrained(tmp_path)
    target = tmp_path / relative
    assert str(error.value) == (
        f"Could not write {target}: the disk is full ({FULL_DISK}). The {target.name} that was there is left as it "
        "was. Free some space or save to another disk."
    )
    assert error.value.errno == errno.ENOSPC  # what the checkpoints' full-disk report reads
    assert saved_files(tmp_path)[relative] == before[relative]  # not a byte of it lost
    assert not [name for name in saved_files(tmp_path) if ".tmp-" in name]  # no temporary file left behind
    monkeypatch.undo()
    loaded = ContrastiveModel.from_pretrained(tmp_path)  # the earlier checkpoint, still whole
    reference = ContrastiveModel.from_pretrained(tmp_path)
    torch.testing.assert_close(
        loaded.encoder.embeddings.word_embeddings.weight, reference.encoder.embeddings.word_embeddings.weight
    )


def test_a_first_save_that_fails_leaves_no_half_file_and_an_error_without_the_disk_says_its_cause(
    tmp_path, monkeypatch
):
    model = ContrastiveModel(ContrastiveConfig(encoder=tiny_bert_config()))
    real = safetensors.torch.serialize_file

    def refused(tensors, filename, metadata=None):
        raise SafetensorError("Error while serializing: I/O error: Permission denied (os error 13)")

    monkeypatch.setattr(safetensors.torch, "serialize_file", refused)
    with pytest.raises(CheckpointWriteError) as error:
        model.save_pretrained(tmp_path)
    assert str(error.value) == (
        f"Could not write {tmp_path / 'model.safetensors'}: Error while serializing: I/O error: Permission denied (os "
        "error 13). No model.safetensors was left there (nor half of one)."
    )
    assert error.value.errno == errno.EACCES and not (tmp_path / "model.safetensors").exists()
    assert not [name for name in os.listdir(tmp_path) if ".tmp-" in name]
    monkeypatch.setattr(safetensors.torch, "serialize_file", real)
    model.save_pretrained(tmp_path)  # the same folder, once the cause is gone
    assert ContrastiveModel.from_pretrained(tmp_path).config.pooler_type == model.config.pooler_type


def test_a_full_disk_at_a_trainers_checkpoint_weights_is_said_as_such_naming_the_file(
    tokenizer, tmp_path, monkeypatch
):
    """The Trainer's checkpoint saves the model's weights first: safetensors' error named no file and did not read as
    a full disk, so the checkpoint's report (`training/checkpoints.py`) passed it on raw."""
    from contrastive_hf.training.checkpoints import CheckpointSaveError

    from helpers.builders import make_queue_trainer

    trainer = make_queue_trainer(tokenizer, tmp_path, max_steps=2, save_strategy="steps", save_steps=1)
    fail_writing(monkeypatch, tmp_path / "checkpoint-2", "model.safetensors")
    with pytest.raises(CheckpointSaveError) as error:
        trainer.train()
    assert error.value.errno == errno.ENOSPC
    assert f"Saving the checkpoint {tmp_path / 'checkpoint-2'} failed: the disk is full" in str(error.value)
    assert f"{tmp_path / 'checkpoint-1'} is the latest complete checkpoint" in str(error.value)
    assert str(error.value.__cause__).startswith(
        f"Could not write {tmp_path / 'checkpoint-2' / 'model.safetensors'}: the disk is full"
    )
