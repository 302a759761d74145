"""ContrastiveTrainer dropped into an existing HF script: transformers' run_mlm.py (tests/scripts/run_mlm.py, a
condensed copy with transformers alone) with examples/drop_in/run_mlm.diff applied (tests/scripts/
run_mlm_contrastive.py): the model class, the collator and the Trainer/TrainingArguments changed, the script's own
metrics, saving and model card working as they do with transformers' masked-LM models."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys

import pytest
import torch
from transformers import AutoModelForMaskedLM, AutoTokenizer, BertForMaskedLM, pipeline

import contrastive_hf

from conftest import DEMO_TOKENIZER, REPO_ROOT, tiny_bert_config

# its module-scoped run of transformers' script runs once, on one pytest-xdist worker (make test: --dist loadgroup)
pytestmark = pytest.mark.xdist_group("drop_in")

SCRIPTS = REPO_ROOT / "tests" / "scripts"
SCRIPT = SCRIPTS / "run_mlm_contrastive.py"
PLAIN_SCRIPT = SCRIPTS / "run_mlm.py"  # transformers alone: what the diff is applied to
DIFF = REPO_ROOT / "examples" / "drop_in" / "run_mlm.diff"
SENTENCES = REPO_ROOT / "examples" / "demo" / "data" / "wiki1m_sample.txt"


def write_data(folder) -> tuple[str, str]:
    lines = SENTENCES.read_text(encoding="utf-8").splitlines()
    train_file, validation_file = folder / "train.txt", folder / "validation.txt"
    train_file.write_text("\n".join(lines[:256]) + "\n", encoding="utf-8")
    validation_file.write_text("\n".join(lines[256:288]) + "\n", encoding="utf-8")
    return str(train_file), str(validation_file)


def pretrained_masked_lm(folder):
    """A local BertForMaskedLM checkpoint to start from: ``--model_name_or_path`` is a local path for the card."""
    torch.manual_seed(0)
    path = folder / "tiny-bert-mlm"
    BertForMaskedLM(tiny_bert_config()).save_pretrained(path)
    AutoTokenizer.from_pretrained(DEMO_TOKENIZER).save_pretrained(path)
    return path


def run_mlm(folder, *extra: str, script=SCRIPT) -> subprocess.CompletedProcess:
    train_file, validation_file = write_data(folder)
    command = [
        sys.executable, str(script),
        "--model_name_or_path", str(pretrained_masked_lm(folder)),
        "--train_file", train_file,
        "--validation_file", validation_file,
        "--max_seq_length", "32",
        "--do_train", "--do_eval",
        "--per_device_train_batch_size", "16",
        "--report_to", "none",
        "--save_strategy", "no",
        "--use_cpu", "true",
        "--output_dir", str(folder / "out"),
        *extra,
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=folder)


def succeeded(result: subprocess.CompletedProcess) -> None:
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """run_mlm_contrastive.py, line by line, 40 steps from a local BertForMaskedLM, then its evaluation."""
    folder = tmp_path_factory.mktemp("run_mlm")
    arguments = ("--line_by_line", "True", "--max_steps", "40", "--learning_rate", "1e-3", "--logging_steps", "5")
    succeeded(run_mlm(folder, *arguments))
    return folder, folder / "out"


def test_the_diff_turns_run_mlm_into_the_tested_copy(tmp_path):
    shutil.copy(PLAIN_SCRIPT, tmp_path / "run_mlm.py")
    with DIFF.open("rb") as diff:
        subprocess.run(["patch", "-p1"], stdin=diff, cwd=tmp_path, check=True, capture_output=True)
    assert (tmp_path / "run_mlm.py").read_bytes() == SCRIPT.read_bytes()


def test_the_guide_shows_the_diff_as_it_is():
    guide = (REPO_ROOT / "docs" / "guides" / "python-api.md").read_text(encoding="utf-8")
    shown = guide.split("```diff\n", 1)[1].split("```", 1)[0]
    diff = DIFF.read_text(encoding="utf-8")
    assert shown == diff[diff.index("--- a/run_mlm.py") :]


def test_run_mlm_with_contrastive_trainer_trains_mlm_and_cl_and_saves_a_loadable_model(trained):
    _, output_dir = trained
    history = json.loads((output_dir / "trainer_state.json").read_text())["log_history"]
    logs = [entry for entry in history if "loss" in entry]
    assert len(logs) == 8
    assert all("mlm_loss" in entry and "cl_loss" in entry for entry in logs)  # both parts of the objective
    for name in ("loss", "mlm_loss"):
        first, last = [entry[name] for entry in logs[:2]], [entry[name] for entry in logs[-2:]]
        assert sum(last) < sum(first) - 0.2, (name, first, last)
    eval_loss = json.loads((output_dir / "eval_results.json").read_text())["eval_loss"]
    assert math.isfinite(eval_loss) and eval_loss > 0

    tokenizer = AutoTokenizer.from_pretrained(output_dir)
    assert "[DEL]" in tokenizer.get_vocab()  # the drop-in's one extra step, saved with the model
    pretraining = contrastive_hf.ContrastiveForPreTraining.from_pretrained(output_dir)
    assert pretraining.config.encoder.vocab_size == len(tokenizer)
    model = contrastive_hf.ContrastiveModel.from_pretrained(output_dir).eval()
    sentences = ["a man is playing a guitar .", "the cat sat"]
    embeddings = model.encode(sentences, tokenizer=tokenizer, convert_to_tensor=True)
    torch.testing.assert_close(
        embeddings, pretraining.contrastive.encode(sentences, tokenizer=tokenizer, convert_to_tensor=True)
    )
    assert embeddings.shape == (2, 32) and torch.isfinite(embeddings).all()


def test_run_mlm_s_own_compute_metrics_report_the_mlm_accuracy(trained):
    _, output_dir = trained
    metrics = json.loads((output_dir / "eval_results.json").read_text())
    # the accuracy of the argmax of the model's MLM logits on the masked tokens, by run_mlm's metric functions (that
    # it is that accuracy, exactly: tests/training/test_trainer.py)
    assert 0.0 <= metrics["eval_accuracy"] <= 1.0, metrics
    assert metrics["perplexity"] == pytest.approx(math.exp(metrics["eval_loss"]))


def test_the_saved_folder_is_a_fill_mask_model_with_the_trained_head(trained):
    folder, output_dir = trained
    config = json.loads((output_dir / "config.json").read_text())
    assert config["architectures"] == ["BertForMaskedLM"]
    masked_lm, loading = AutoModelForMaskedLM.from_pretrained(output_dir, output_loading_info=True)
    assert not loading["missing_keys"] and not loading["mismatched_keys"]
    ours = contrastive_hf.ContrastiveForPreTraining.from_pretrained(output_dir).eval()
    head, theirs = ours.mlm_head, masked_lm.cls.predictions
    for mine, transformers_own in (
        (head.dense.weight, theirs.transform.dense.weight),
        (head.dense.bias, theirs.transform.dense.bias),
        (head.layer_norm.weight, theirs.transform.LayerNorm.weight),
        (head.layer_norm.bias, theirs.transform.LayerNorm.bias),
        (head.bias, theirs.bias),
    ):
        torch.testing.assert_close(transformers_own, mine, rtol=0, atol=0)
    start = BertForMaskedLM.from_pretrained(folder / "tiny-bert-mlm").cls.predictions.transform.dense.weight
    assert not torch.equal(start, head.dense.weight)  # trained: not the head the run started from

    tokenizer = AutoTokenizer.from_pretrained(output_dir)
    text = f"the man is playing the {tokenizer.mask_token} ."
    predicted = pipeline("fill-mask", model=str(output_dir), device="cpu")(text, top_k=1)[0]["token"]
    encoded = tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        logits = ours.mlm_logits(encoded["input_ids"], encoded["attention_mask"])  # (1, L, vocab)
    at = int((encoded["input_ids"][0] == tokenizer.mask_token_id).nonzero())
    assert predicted == int(logits[0, at].argmax())


def test_no_file_of_the_run_names_its_local_paths(trained):
    folder, output_dir = trained
    card = (output_dir / "README.md").read_text()
    assert "base_model:" not in card.split("---")[1]  # --model_name_or_path was a local folder: no Hub id to name
    for path in output_dir.rglob("*"):
        if path.is_file():
            assert str(folder).encode() not in path.read_bytes(), path


def test_run_mlm_s_grouped_windows_are_refused_with_the_fix(tmp_path):
    # run_mlm.py's default: every text concatenated and cut into max_seq_length windows (group_texts)
    result = run_mlm(tmp_path, "--max_steps", "2")
    assert result.returncode != 0
    assert "do not start with [CLS]" in result.stderr and "--line_by_line true" in result.stderr, result.stderr[-3000:]


def test_the_script_the_diff_applies_to_runs_with_transformers_alone(tmp_path):
    """The base of the diff is a working run_mlm.py: BertForMaskedLM with its metric functions, the accuracy the
    contrastive copy reports too."""
    succeeded(run_mlm(tmp_path, "--line_by_line", "True", "--max_steps", "2", script=PLAIN_SCRIPT))
    metrics = json.loads((tmp_path / "out" / "eval_results.json").read_text())
    assert 0.0 <= metrics["eval_accuracy"] <= 1.0 and math.isfinite(metrics["perplexity"])
