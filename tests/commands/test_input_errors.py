"""Input that cannot work gets a clear error instead of a silent run or a traceback: prompts that leave no room for
text, a truncation wider than the embedding, a resume with changed settings, weights that are not finite, files
that are not UTF-8 or JSON, models that are nowhere, and more negatives than there are candidates. Each error names
the value or file and what to do."""

from __future__ import annotations

import errno
import os
import re
import shutil
import sys

import pytest
import torch

from contrastive_hf import ContrastiveConfig, ContrastiveForPreTraining, ContrastiveModel
from contrastive_hf.data.collators import PairCollator
from contrastive_hf.models.configuration_dual_encoder import DualEncoderConfig
from contrastive_hf.recipes.dpr import QueryPassageCollator

from conftest import DEMO_DATA, tiny_bert_config, usage_error
from helpers.builders import MULTITASK_TASKS, multitask_trainer, tiny_multitask_model

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


def test_run_simcse_refuses_a_prompt_that_fills_max_seq_length_as_a_usage_error(checkpoint, tmp_path, capsys):
    arguments = simcse_sup_arguments(checkpoint, tmp_path, "--max_seq_length", "8", "--query_prompt", LONG_PROMPT)
    error = usage_error("run_simcse", arguments, capsys)
    assert error.startswith("run_simcse.py: error: The prompt") and "--max_seq_length) to at least 16." in error


@pytest.mark.parametrize("where", ["a_file", "under_a_file", "read_only"])
def test_an_output_dir_the_run_cannot_write_is_one_usage_line_before_anything_loads(
    where, checkpoint, tmp_path, capsys, monkeypatch
):
    from types import SimpleNamespace

    from contrastive_hf.commands import arguments

    a_file = tmp_path / "results.txt"
    a_file.write_text("not a folder\n")
    output_dir = {"a_file": a_file, "under_a_file": a_file / "run", "read_only": tmp_path / "ro" / "run"}[where]
    if where == "read_only":  # what creating a file on a read-only file system raises, whoever runs the test
        (tmp_path / "ro").mkdir()

        def read_only(*args, **kwargs):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))

        monkeypatch.setattr(arguments, "tempfile", SimpleNamespace(TemporaryFile=read_only))
    error = usage_error(
        "run_simcse", simcse_sup_arguments(checkpoint, tmp_path, "--output_dir", str(output_dir)), capsys
    )
    expected = {
        "a_file": f"--output_dir {a_file} is a file, not a folder: give a folder for the run's files.",
        "under_a_file": f"--output_dir {output_dir} lies under {a_file}, a file, not a folder: give a folder for the "
        "run's files.",
        "read_only": f"--output_dir {output_dir}: cannot write in {tmp_path / 'ro'} (Read-only file system): give a "
        "folder where the run can write its checkpoints and model.",
    }[where]
    assert error.splitlines()[-1].endswith(f": error: {expected}")  # argparse's line, after its one-line usage
    assert "Traceback" not in error and not (tmp_path / "ro" / "run").exists()


def test_an_unknown_augmentation_is_one_usage_line_before_anything_loads(tmp_path, capsys):
    # a model that is nowhere: loading it would be another error
    arguments = ["--model_name_or_path", "nobody/no-such-model", "--augmentations", "subs+nope", "--output_dir",
                 str(tmp_path / "out"), "--train_file", str(DEMO_DATA / "wiki1m_sample.txt")]  # fmt: skip
    usage, error = usage_error("run_clear", arguments, capsys).splitlines()  # argparse's one-line usage, the error
    assert usage.startswith("usage: ")
    assert error.split(": error: ", 1)[1] == (
        "Unknown augmentation 'nope': choose one of dropout, del_word, del_span, reorder, subs, "
        "composed with '+' (CLEAR's names, e.g. subs+del_span) or mixed with ',' (each view draws one, e.g. "
        "del_word,reorder); one of your own: register it with "
        "contrastive_hf.data.augmentations.register_augmentation."
    )


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


def test_run_simcse_refuses_truncate_dim_above_the_embedding_size_as_a_usage_error(checkpoint, tmp_path, capsys):
    error = usage_error("run_simcse", simcse_sup_arguments(checkpoint, tmp_path, "--truncate_dim", "10000"), capsys)
    assert error.startswith("run_simcse.py: error: truncate_dim must be a size in 1..32") and "got 10000" in error


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
    tensor = "encoder.layer.1.output.dense.weight"  # named as the encoder names it: BertForMaskedLM's bert.<name>
    poisoned = poisoned_copy(checkpoint, tmp_path, "model.safetensors", f"bert.{tensor}")
    with pytest.raises(ValueError) as error:
        ContrastiveModel.from_pretrained(poisoned)
    assert str(error.value) == (
        f"{poisoned / 'model.safetensors'} holds NaN or infinite values in 1 tensor(s): {tensor}. It was saved from "
        "a run whose loss diverged, or it is damaged: load an earlier checkpoint."
    )
    model = ContrastiveForPreTraining.from_pretrained(checkpoint)
    with pytest.raises(ValueError, match=f"model.safetensors holds NaN .*: {tensor}"):
        model.load_saved_weights(poisoned)  # what a Trainer resuming from the checkpoint calls


@pytest.mark.parametrize(
    ("file", "tensor", "named"),
    [
        ("contrastive_heads.safetensors", "projection.layers.0.bias", "projection.layers.0.bias"),
        ("model.safetensors", "cls.predictions.bias", "mlm_head.bias"),  # the trained MLM head, with the encoder
    ],
)
def test_head_weights_that_are_not_finite_are_refused_at_load(checkpoint, tmp_path, file, tensor, named):
    poisoned = poisoned_copy(checkpoint, tmp_path, file, tensor, float("inf"))
    with pytest.raises(ValueError, match=rf"{re.escape(file)} holds NaN or infinite .*: {re.escape(named)}\."):
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


# ----------------------------------------------------------------------------------------------------
# e. Errors that name the file and line; models that are nowhere
# ----------------------------------------------------------------------------------------------------


def cli_error(arguments: list[str], capsys) -> str:
    """The one line `contrastive-hf` prints for ``arguments``, which it refuses with status 2 (argparse, refusing an
    option's value, exits with it)."""
    from contrastive_hf.commands.cli import main

    try:
        status = main(arguments)
    except SystemExit as exit_:
        status = exit_.code
    assert status == 2
    error = capsys.readouterr().err  # progress bars (datasets') first, then the error
    assert "Traceback" not in error, error
    return error.rstrip("\n").splitlines()[-1]


def test_evaluate_names_the_line_of_an_sts_file_that_is_not_utf8(checkpoint, tmp_path, capsys):
    lines = (DEMO_DATA / "sts-dev.csv").read_bytes().splitlines(keepends=True)[:5]
    lines[3] = lines[3].replace(b"man", b"m\xe9n", 1)  # Latin-1
    sts = tmp_path / "sts-dev.csv"
    sts.write_bytes(b"".join(lines))
    column = lines[3].index(b"\xe9") + 1
    assert cli_error(["evaluate", str(checkpoint), "--stsb-file", str(sts), "--no-progress"], capsys) == (
        f"contrastive-hf evaluate: error: {sts}:4: not utf-8 text (byte 0xe9 at byte {column} of the line); save "
        "the file as utf-8, e.g. `iconv -f latin1 -t utf-8 FILE > NEW_FILE` for a Latin-1 file."
    )


@pytest.mark.parametrize("which", ["pairs", "corpus"])
def test_mine_names_the_file_and_the_byte_that_is_not_utf8(which, checkpoint, tmp_path, capsys):
    # the pairs file's error named no file: "'utf-8' codec can't decode byte 0xe9 in position 24"
    latin = tmp_path / f"{which}.csv"
    header = b"query,positive\n" if which == "pairs" else b"text\n"
    latin.write_bytes(header + b"who is it?,Someone.\nwho is th\xe9re?,Someone is there.\n")
    pairs = tmp_path / "utf8.csv"
    pairs.write_text("query,positive\nwho?,Someone.\nwhat?,Something.\n")
    arguments = ["mine", str(latin if which == "pairs" else pairs), "--model", str(checkpoint)]
    arguments += ["--output", str(tmp_path / "mined.csv")] + (["--corpus", str(latin)] if which == "corpus" else [])
    offset = latin.read_bytes().index(b"\xe9")
    assert cli_error(arguments, capsys) == (
        f"contrastive-hf mine: error: {latin} is not UTF-8 text: the bytes b'\\xe9' at byte {offset} (line 3) cannot "
        f"be decoded. Convert the file to UTF-8 and give the converted file (e.g. `iconv -f latin1 -t utf-8 "
        f"{which}.csv > utf8-{which}.csv` for Latin-1 text)."
    )


def test_plot_names_the_line_and_column_of_malformed_json(tmp_path, capsys):
    state = tmp_path / "trainer_state.json"
    state.write_text('{\n  "log_history": [\n    {"loss": 1.0 "step": 1}\n  ]\n}\n')
    assert cli_error(["plot", str(state), "--output-dir", str(tmp_path)], capsys) == (
        f"contrastive-hf plot: error: {state}:3:18: not valid JSON (Expecting ',' delimiter); was the file cut short "
        "or edited by hand?"
    )


@pytest.mark.parametrize("command", ["mine", "evaluate"])
def test_a_model_that_is_nowhere_is_one_usage_line(command, tmp_path, capsys, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("query,positive\nwho?,Someone.\nwhat?,Something.\n")
    arguments = {
        "mine": lambda model: ["mine", str(pairs), "--model", model, "--output", str(tmp_path / "mined.csv")],
        "evaluate": lambda model: ["evaluate", model, "--stsb-file", str(DEMO_DATA / "sts-dev.csv")],
    }[command]
    prefix = f"contrastive-hf {command}: error: "
    assert cli_error(arguments("nobody/no-such-model"), capsys) == prefix + (
        "nobody/no-such-model is neither a local folder nor in the Hub cache, and HF_HUB_OFFLINE keeps the Hub off: "
        "give the folder of a checkpoint, or download the model first (without HF_HUB_OFFLINE)."
    )
    missing = str(tmp_path / "models" / "mine")
    assert cli_error(arguments(missing), capsys) == prefix + f"{missing}: no such folder (relative to {os.getcwd()})."


def test_evaluate_says_a_folder_holds_no_checkpoint(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    arguments = ["evaluate", str(empty), "--stsb-file", str(DEMO_DATA / "sts-dev.csv")]
    error = cli_error(arguments, capsys)
    assert error == (
        f"contrastive-hf evaluate: error: {empty} holds no checkpoint (no model was saved in this folder): give the "
        "folder a model was saved to (save_pretrained, a training run's output_dir) or a Hub id."
    )
    assert "config.json" not in error
    for step in (5, 10):
        (empty / f"checkpoint-{step}").mkdir()  # a training run's output_dir, stopped before its final save
    assert cli_error(arguments, capsys) == (
        f"contrastive-hf evaluate: error: {empty} holds no model of its own, only training checkpoints: give one of "
        f"them, e.g. {empty / 'checkpoint-10'}."
    )


@pytest.mark.parametrize("command", ["evaluate", "mine"])
def test_evaluate_and_mine_point_at_the_merged_model_beside_a_lora_adapter(command, checkpoint, tmp_path, capsys):
    from contrastive_hf.hub.adapters import add_adapter, lora_config

    base = ContrastiveForPreTraining.from_pretrained(checkpoint)
    adapter = tmp_path / "lora-run"  # what a --lora_r run leaves in output_dir
    add_adapter(base, lora_config(base, r=4)).save_pretrained(adapter)
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("query,positive\nwho?,Someone.\nwhat?,Something.\n")
    arguments = {
        "evaluate": ["evaluate", str(adapter), "--stsb-file", str(DEMO_DATA / "sts-dev.csv")],
        "mine": ["mine", str(pairs), "--model", str(adapter), "--output", str(tmp_path / "mined.csv")],
    }[command]
    prefix = f"contrastive-hf {command}: error: {adapter} is a LoRA adapter (adapter_config.json), not a whole model: "
    merged = f"{adapter}-merged"
    suffix = " or load the adapter with peft onto its base model (its README.md shows how) and save the merged model."
    assert cli_error(arguments, capsys) == (
        f"{prefix}evaluate the merged model a --lora_r run saves beside it ({merged}, not there),{suffix}"
    )
    shutil.copytree(checkpoint, merged)
    assert cli_error(arguments, capsys) == f"{prefix}evaluate {merged}, the merged model saved beside it,{suffix}"


@pytest.mark.parametrize(
    ("option", "value", "expected"),
    [
        ("--batch-size", "0", "argument --batch-size: must be an integer >= 1, got 0"),
        ("--max-length", "0", "argument --max-length: must be an integer >= 1, got 0"),
        (
            "--kfold",
            "1",
            "argument --kfold: must be an integer >= 2 (cross-validation needs two folds or more), got 1",
        ),
    ],
)
def test_evaluate_refuses_an_option_out_of_range_naming_it_for_any_task(option, value, expected, tmp_path, capsys):
    arguments = ["evaluate", str(tmp_path), "--stsb-file", str(DEMO_DATA / "sts-dev.csv"), option, value]
    assert cli_error(arguments, capsys) == f"contrastive-hf evaluate: error: {expected}"  # STS: no GLUE option
    if option != "--kfold":
        pairs = ["mine", str(DEMO_DATA / "sts-dev.csv"), "--model", str(tmp_path), "--output", "mined.csv"]
        assert cli_error([*pairs, option, value], capsys) == f"contrastive-hf mine: error: {expected}"


def test_evaluate_names_an_empty_sst_file(checkpoint, tmp_path, capsys):
    import shutil

    from conftest import TEST_DATA

    sst = tmp_path / "SST" / "binary"
    shutil.copytree(TEST_DATA / "senteval" / "SST" / "Binary", sst)
    (sst / "sentiment-test").write_text("")
    arguments = ["evaluate", str(checkpoint), "--tasks", "SST2", "--data-dir", str(tmp_path), "--no-progress"]
    assert cli_error([*arguments, "--output", str(tmp_path / "results.json")], capsys) == (
        f"contrastive-hf evaluate: error: {sst / 'sentiment-test'} has no rows (no 'sentence<TAB>label' line): "
        "SST-2's test split is empty. Copy the file again from SentEval's data."
    )


@pytest.mark.parametrize("command", ["evaluate", "mine"])
def test_an_output_that_is_a_folder_is_refused_before_any_work(command, checkpoint, tmp_path, capsys):
    folder = tmp_path / "results"
    folder.mkdir()
    arguments = {
        "evaluate": ["evaluate", str(checkpoint), "--stsb-file", str(DEMO_DATA / "sts-dev.csv")],
        "mine": ["mine", str(tmp_path / "no-pairs-needed.csv"), "--model", str(checkpoint)],
    }[command]
    assert cli_error([*arguments, "--output", str(folder)], capsys) == (
        f"contrastive-hf {command}: error: --output {folder} is a folder: give the path of the file to write, e.g. "
        f"{folder / 'results.json'}."
    )
    assert list(folder.iterdir()) == []


@pytest.mark.parametrize("content", ["query,positive\n", ""], ids=["header-only", "empty"])
def test_mine_names_a_pairs_or_corpus_file_without_rows(content, checkpoint, tmp_path, capsys):
    pairs, empty = tmp_path / "pairs.csv", tmp_path / "nothing.csv"
    pairs.write_text("query,positive\nwho?,Someone.\nwhat?,Something.\n")
    empty.write_text(content)
    mine = ["mine", "--model", str(checkpoint), "--output", str(tmp_path / "mined.csv")]
    assert cli_error([*mine, str(empty)], capsys) == (
        f"contrastive-hf mine: error: {empty} has no rows: it is empty or holds a header alone. Give a file of "
        "(query, positive) pairs: a header such as query,positive, then one pair per row."
    )
    assert cli_error([*mine, str(pairs), "--corpus", str(empty)], capsys) == (
        f"contrastive-hf mine: error: {empty} has no rows: it is empty or holds a header alone. Give a file of "
        "passages: one per line (.txt), or per row under a header (.csv, .json)."
    )


@pytest.mark.parametrize("command", ["evaluate", "evaluate-glue", "mine"])
def test_a_max_length_beyond_the_models_positions_is_one_usage_line(command, checkpoint, tmp_path, capsys):
    # it crashed with an index error in the embeddings at the first sentence longer than the 64 positions
    from conftest import TEST_DATA

    pairs = tmp_path / "pairs.csv"
    pairs.write_text("query,positive\nwho?,Someone.\nwhat?,Something.\n")
    arguments = {
        "evaluate": ["evaluate", str(checkpoint), "--stsb-file", str(DEMO_DATA / "sts-dev.csv")],
        "evaluate-glue": ["evaluate", str(checkpoint), "--tasks", "glue/sst2", "--data-dir", str(TEST_DATA / "glue")],
        "mine": ["mine", str(pairs), "--model", str(checkpoint), "--output", str(tmp_path / "mined.csv")],
    }[command]
    consequence = "example would stop fine-tuning" if command == "evaluate-glue" else "input would stop encoding"
    assert cli_error([*arguments, "--max-length", "100000", "--output", str(tmp_path / "out.json")], capsys) == (
        f"contrastive-hf {command.split('-')[0]}: error: max_length=100000 (--max-length) is longer than the "
        f"encoder's position embeddings, which take at most 64 tokens: the first longer {consequence} with an index "
        "error. Set --max-length to 64 or less, or use an encoder with more positions (max_position_embeddings in "
        "its config)."
    )
    assert not (tmp_path / "out.json").exists()


# ----------------------------------------------------------------------------------------------------
# f. More negatives than there are candidates
# ----------------------------------------------------------------------------------------------------


def test_mine_says_how_many_candidates_there_are(checkpoint, tmp_path, capsys):
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("sent0,sent1,hard_neg\nA man plays.,Someone plays.,A cat sleeps.\nA dog runs.,It moves.,No.\n")
    arguments = ["mine", str(pairs), "--model", str(checkpoint), "--output", str(tmp_path / "mined.csv")]
    assert cli_error([*arguments, "--num-negatives", "10"], capsys) == (
        "contrastive-hf mine: error: num_negatives=10 (--num-negatives), but there are 4 distinct candidate passages "
        "(the positives, and the corpus), of which a query can take at most 3 as negatives (never its own positives "
        "or its own text): add passages (--corpus) or ask for at most 3 negatives."
    )
    assert cli_error([*arguments, "--num-negatives", "3", "--max-candidates", "2"], capsys) == (
        "contrastive-hf mine: error: num_negatives=3 (--num-negatives) is more than the max_candidates=2 "
        "(--max-candidates) considered per query: no query could get that many. Raise max_candidates or ask for "
        "fewer negatives."
    )


# ----------------------------------------------------------------------------------------------------
# c. Resuming with other settings
# ----------------------------------------------------------------------------------------------------


def pretraining_trainer(tokenizer, output_dir, seed: int = 42, **config):
    from datasets import Dataset

    from contrastive_hf.data.collators import ContrastiveDataCollator
    from contrastive_hf.training.trainer import ContrastiveTrainer
    from contrastive_hf.training.training_args import ContrastiveTrainingArguments

    model = ContrastiveForPreTraining(
        ContrastiveConfig(encoder=tiny_bert_config(vocab_size=len(tokenizer)), mlm_weight=0.0, **config)
    )
    args = ContrastiveTrainingArguments(
        output_dir=str(output_dir),
        per_device_train_batch_size=4,
        max_steps=2,
        save_steps=2,
        seed=seed,
        report_to="none",
        disable_tqdm=True,
    )
    return ContrastiveTrainer(
        model=model,
        args=args,
        train_dataset=Dataset.from_dict({"text": [f"sentence number {i}" for i in range(8)]}),
        data_collator=ContrastiveDataCollator(tokenizer, augmentation="dropout", mlm=False),
    )


def test_resuming_with_other_model_loss_or_seed_settings_warns_with_old_and_new_values(tokenizer, tmp_path, caplog):
    pretraining_trainer(tokenizer, tmp_path, pooler_type="mean").train()
    checkpoint = str(tmp_path / "checkpoint-2")

    # how views are encoded (sub_batch_size) changes nothing that is learned: no warning
    same = pretraining_trainer(tokenizer, tmp_path, pooler_type="mean", sub_batch_size="sorted")
    same.args.max_steps = 3
    with caplog.at_level("WARNING", logger="contrastive_hf"):
        same.train(resume_from_checkpoint=checkpoint)
    assert "settings other than" not in caplog.text

    caplog.clear()
    changed = pretraining_trainer(tokenizer, tmp_path, temperature=0.1, pooler_type="max", cl_weight=2.0)
    changed.args.max_steps = 3
    with caplog.at_level("WARNING", logger="contrastive_hf"):
        changed.train(resume_from_checkpoint=checkpoint)
    assert (
        f"Resuming from {checkpoint} with settings other than the ones it was trained with: pooler_type 'mean' -> "
        "'max', temperature 0.05 -> 0.1, cl_weight 1.0 -> 2.0. The run goes on with the new values; "
        "give the old ones for an exact resume."
    ) in caplog.text


def test_resuming_with_the_same_fraction_of_steps_warns_of_no_mismatch(tokenizer, tmp_path, caplog, monkeypatch):
    """transformers compares the steps given (logging_steps 0.02, the default: a fraction of the run) with those the
    checkpoint's trainer_state.json stores, resolved (1 step): only a real difference is a mismatch."""
    import logging

    from transformers.utils import logging as transformers_logging

    monkeypatch.setattr(transformers_logging._get_library_root_logger(), "propagate", True)  # to caplog
    logging.Logger.warning_once.cache_clear()  # transformers says each message once per process
    pretraining_trainer(tokenizer, tmp_path).train()
    checkpoint = str(tmp_path / "checkpoint-2")

    resumed = pretraining_trainer(tokenizer, tmp_path)
    resumed.args.max_steps = 3  # 2% of 3 steps: still 1 step, as the checkpoint's 2% of 2
    with caplog.at_level("WARNING", logger="transformers.trainer_utils"):
        resumed.train(resume_from_checkpoint=checkpoint)
    assert "do not match" not in caplog.text
    assert resumed.args.logging_steps == 0.02  # the fraction, as given, in what is saved next

    caplog.clear()
    changed = pretraining_trainer(tokenizer, tmp_path)
    changed.args.max_steps, changed.args.logging_steps = 3, 2
    with caplog.at_level("WARNING", logger="transformers.trainer_utils"):
        changed.train(resume_from_checkpoint=checkpoint)
    assert "logging_steps: 2 (from args) != 1 (from trainer_state.json)" in caplog.text


class _RunsCodeWhenUnpickled:
    def __reduce__(self):
        return (sys.exit, (3,))


def test_the_saved_training_arguments_are_read_without_running_what_the_pickle_names(tmp_path):
    from contrastive_hf.training.resume_changes import changed_settings

    torch.save({"payload": _RunsCodeWhenUnpickled()}, tmp_path / "training_args.bin")
    assert changed_settings(str(tmp_path), model=None, args=object()) == []  # no SystemExit: nothing was run


def test_resuming_a_multitask_run_with_other_task_weights_warns(tokenizer, tmp_path, caplog):
    from dataclasses import replace

    multitask_trainer(
        tiny_multitask_model(tokenizer), tokenizer, tmp_path, save_strategy="steps", save_steps=3
    ).train()
    checkpoint = str(tmp_path / "out" / "checkpoint-3")
    reweighted = [replace(MULTITASK_TASKS[0], loss_weight=2.0), *MULTITASK_TASKS[1:]]
    resumed = multitask_trainer(
        tiny_multitask_model(tokenizer, reweighted), tokenizer, tmp_path, max_steps=4, task_schedule="random"
    )
    with caplog.at_level("WARNING", logger="contrastive_hf"):
        resumed.train(resume_from_checkpoint=checkpoint)
    assert (
        f"Resuming from {checkpoint} with settings other than the ones it was trained with: tasks.sst.loss_weight "
        "1.0 -> 2.0, task_schedule 'super_batch' -> 'random'."
    ) in caplog.text


def test_run_multitask_names_a_pairs_file_without_query_and_positive_columns(checkpoint, tmp_path, capsys):
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("premise,hypothesis\nA man plays.,Someone plays.\n")
    arguments = ["--model_name_or_path", str(checkpoint), "--pairs_file", str(pairs),
                 "--output_dir", str(tmp_path / "out"), "--report_to", "none", "--use_cpu", "true"]  # fmt: skip
    error = usage_error("run_multitask", arguments, capsys).splitlines()[-1]  # after datasets' progress bar
    assert error.startswith("run_multitask.py: error: PairCollator needs columns anchor,positive,hard_negative or ")
    assert error.endswith(f"the features have ['hypothesis', 'premise']. Name the columns of {pairs} so (e.g. sent0, "
                          "sent1, hard_neg).")  # fmt: skip
