"""Input that cannot work gets a clear error instead of a silent run or a traceback: prompts that leave no room for
text, a truncation wider than the embedding, a resume with changed settings, weights that are not finite, files
that are not UTF-8 or JSON, models that are nowhere, and more negatives than there are candidates. Each error names
the value or file and what to do."""

from __future__ import annotations

import shutil
import sys

import pytest
import torch

from contrastive_hf import ContrastiveConfig, ContrastiveForPreTraining, ContrastiveModel
from contrastive_hf.commands.scripts import UsageError
from contrastive_hf.data.collators import PairCollator
from contrastive_hf.models.configuration_dual_encoder import DualEncoderConfig
from contrastive_hf.recipes.dpr import QueryPassageCollator

from conftest import REPO_ROOT, tiny_bert_config

LONG_PROMPT = "represent this sentence for searching relevant passages: "  # 15 tokens with [CLS] and [SEP]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, request):
    """A saved tiny contrastive_hf checkpoint (hidden size 32) with the demo tokenizer."""
    from transformers import AutoTokenizer

    from conftest import DEMO_TOKENIZER

    tokenizer = AutoTokenizer.from_pretrained(DEMO_TOKENIZER)
    folder = tmp_path_factory.mktemp("checkpoint")
    model = ContrastiveForPreTraining(ContrastiveConfig(encoder=tiny_bert_config(vocab_size=len(tokenizer))))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def run_simcse():
    sys.path.insert(0, str(REPO_ROOT / "examples"))
    try:
        import run_simcse

        yield run_simcse
    finally:
        sys.path.remove(str(REPO_ROOT / "examples"))


def simcse_sup_arguments(checkpoint, tmp_path, *extra: str) -> list[str]:
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("sent0,sent1,hard_neg\nA man plays.,Someone plays.,A cat sleeps.\nA dog runs.,It moves.,No.\n")
    return [
        "--mode", "sup", "--model_name_or_path", str(checkpoint), "--train_file", str(pairs),
        "--output_dir", str(tmp_path / "out"), "--max_steps", "1", "--per_device_train_batch_size", "2",
        "--report_to", "none", "--save_strategy", "no", "--use_cpu", "true", *extra,
    ]  # fmt: skip


# ----------------------------------------------------------------------------------------------------
# a. A prompt that fills the maximum length
# ----------------------------------------------------------------------------------------------------


def test_a_prompt_that_fills_the_maximum_length_is_refused_by_the_collators(tokenizer):
    with pytest.raises(ValueError) as error:
        PairCollator(tokenizer, max_length=15, prompts={"query": LONG_PROMPT})
    assert str(error.value) == (
        f"The prompt {LONG_PROMPT!r} takes 15 tokens with the special ones, and queries (the anchors) are cut at "
        "max_length=15: every one would be the prompt alone, the same for all, with nothing of its text. Shorten "
        "the prompt or set max_length (--max_seq_length) to at least 16."
    )
    PairCollator(tokenizer, max_length=16, prompts={"query": LONG_PROMPT})  # one token of text: allowed
    with pytest.raises(ValueError, match=r"documents \(positives and negatives\) are cut at max_passage_length=8"):
        QueryPassageCollator(tokenizer, max_passage_length=8, prompts={"query": "q: ", "document": LONG_PROMPT})
    with pytest.raises(ValueError, match="queries .* are cut at max_query_length=4: .* set max_query_length to"):
        QueryPassageCollator(tokenizer, max_query_length=4, prompts={"query": "query: "})


def test_a_prompt_that_fills_the_maximum_length_is_refused_by_encode(tokenizer):
    config = ContrastiveConfig(encoder=tiny_bert_config(vocab_size=len(tokenizer)), prompts={"long": LONG_PROMPT})
    model = ContrastiveModel(config)
    model.encode(["a sentence"], tokenizer=tokenizer, prompt_name="long", max_length=16)
    with pytest.raises(ValueError, match="takes 15 tokens .* sentences are cut at max_length=12"):
        model.encode(["a sentence"], tokenizer=tokenizer, prompt_name="long", max_length=12)


def test_run_simcse_refuses_a_prompt_that_fills_max_seq_length_as_a_usage_error(run_simcse, checkpoint, tmp_path):
    arguments = simcse_sup_arguments(checkpoint, tmp_path, "--max_seq_length", "8", "--query_prompt", LONG_PROMPT)
    with pytest.raises(UsageError, match=r"set max_length \(--max_seq_length\) to at least 16"):
        run_simcse.main(arguments)


# ----------------------------------------------------------------------------------------------------
# b. --truncate_dim wider than the embedding
# ----------------------------------------------------------------------------------------------------


def test_truncate_dim_above_the_embedding_size_is_refused():
    message = (
        "truncate_dim must be a size in 1..32 (the size of the model's embeddings) or None, got 33: an embedding "
        "cannot be truncated to more dimensions than it has."
    )
    with pytest.raises(ValueError) as error:
        ContrastiveConfig(encoder=tiny_bert_config(), truncate_dim=33)
    assert str(error.value) == message
    ContrastiveConfig(encoder=tiny_bert_config(), truncate_dim=32)
    with pytest.raises(ValueError, match=r"1\.\.16 .* got 17"):  # the projected embedding is what is returned
        ContrastiveConfig(encoder=tiny_bert_config(), projection_dim=16, projection_at_inference=True, truncate_dim=17)
    with pytest.raises(ValueError, match=r"1\.\.32 .* got 64"):
        DualEncoderConfig(query_encoder=tiny_bert_config(), truncate_dim=64)


def test_run_simcse_refuses_truncate_dim_above_the_embedding_size_as_a_usage_error(run_simcse, checkpoint, tmp_path):
    with pytest.raises(UsageError, match=r"truncate_dim must be a size in 1\.\.32 .* got 10000"):
        run_simcse.main(simcse_sup_arguments(checkpoint, tmp_path, "--truncate_dim", "10000"))


# ----------------------------------------------------------------------------------------------------
# d. Weights that are not finite
# ----------------------------------------------------------------------------------------------------


def poisoned_copy(checkpoint, tmp_path, file: str, tensor: str, value: float = float("nan")):
    """A copy of ``checkpoint`` whose ``tensor`` in ``file`` holds ``value`` in one place."""
    from safetensors.torch import load_file, save_file

    copy = tmp_path / "poisoned"
    shutil.copytree(checkpoint, copy)
    weights = load_file(copy / file)
    weights[tensor][0] = value
    save_file(weights, copy / file, metadata={"format": "pt"})
    return copy


def test_checkpoint_weights_that_are_not_finite_are_refused_at_load_naming_file_and_tensor(checkpoint, tmp_path):
    tensor = "encoder.layer.1.output.dense.weight"
    poisoned = poisoned_copy(checkpoint, tmp_path, "model.safetensors", tensor)
    with pytest.raises(ValueError) as error:
        ContrastiveModel.from_pretrained(poisoned)
    assert str(error.value) == (
        f"{poisoned / 'model.safetensors'} holds NaN or infinite values in 1 tensor(s): {tensor}. It was saved from "
        "a run whose loss diverged, or it is damaged: load an earlier checkpoint."
    )
    model = ContrastiveForPreTraining.from_pretrained(checkpoint)
    with pytest.raises(ValueError, match=f"model.safetensors holds NaN .*: {tensor}"):
        model.load_saved_weights(poisoned)  # what a Trainer resuming from the checkpoint calls


def test_head_weights_that_are_not_finite_are_refused_at_load(checkpoint, tmp_path):
    poisoned = poisoned_copy(checkpoint, tmp_path, "contrastive_heads.safetensors", "mlm_head.bias", float("inf"))
    with pytest.raises(ValueError, match=r"contrastive_heads\.safetensors holds NaN or infinite .*: mlm_head\.bias\."):
        ContrastiveForPreTraining.from_pretrained(poisoned)


def test_a_model_whose_weights_are_not_finite_is_refused_when_training_starts(tokenizer, tmp_path):
    from datasets import Dataset

    from contrastive_hf.data.collators import ContrastiveDataCollator
    from contrastive_hf.training.trainer import ContrastiveTrainer
    from contrastive_hf.training.training_args import ContrastiveTrainingArguments

    model = ContrastiveForPreTraining(ContrastiveConfig(encoder=tiny_bert_config(vocab_size=len(tokenizer))))
    with torch.no_grad():
        model.contrastive.encoder.embeddings.word_embeddings.weight[3, 0] = float("nan")
    args = ContrastiveTrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=4, report_to="none")
    with pytest.raises(ValueError) as error:
        ContrastiveTrainer(
            model=model,
            args=args,
            train_dataset=Dataset.from_dict({"text": ["a b", "c d", "e f", "g h"]}),
            data_collator=ContrastiveDataCollator(tokenizer, augmentation="dropout", mlm=False),
        )
    assert str(error.value).startswith(
        "The model to train (ContrastiveForPreTraining) holds NaN or infinite values in 1 tensor(s): "
        "contrastive.encoder.embeddings.word_embeddings.weight. It was saved from a run whose loss diverged, or it "
        "is damaged: load it from a checkpoint saved before the loss diverged"
    )
