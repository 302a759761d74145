"""End to end through the example scripts: a CLEAR composition with a synonym table on a streamed corpus
(run_clear.py), and DeCLUTR-style span views with hard negatives on the shipped Wikipedia sample (run_declutr.py)."""

from __future__ import annotations

import json
import sys

import contrastive_hf  # noqa: F401  (registers the model type)

from conftest import tiny_bert_config
from helpers.in_process import run_script


def _run(repo_root, tmp_path, script, *flags):
    config = tiny_bert_config().to_dict()
    config["model_type"] = "bert"
    (tmp_path / "encoder.json").write_text(json.dumps(config))
    command = [
        sys.executable, str(repo_root / "examples" / script),
        "--config_name", str(tmp_path / "encoder.json"),
        "--tokenizer_name", str(repo_root / "examples" / "demo" / "tokenizer"),
        "--max_steps", "2", "--logging_steps", "1", "--per_device_train_batch_size", "8",
        "--report_to", "none", "--save_strategy", "no", "--use_cpu", "true", "--disable_tqdm", "true",
        "--output_dir", str(tmp_path / "out"),
        *flags,
    ]  # fmt: skip
    result = run_script(command[1], command[2:], cwd=tmp_path, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout + result.stderr, tmp_path / "out"


def test_run_clear_with_a_composition_a_synonym_table_and_streaming(repo_root, tmp_path):
    lines = (repo_root / "examples" / "demo" / "data" / "wiki1m_sample.txt").read_text().splitlines()[:40]
    (tmp_path / "corpus.txt").write_text("\n".join(lines[:20] + [""] + lines[20:]) + "\n")
    (tmp_path / "synonyms.json").write_text(json.dumps({"south": ["southern"], "state": ["province", "country"]}))
    log, output_dir = _run(
        repo_root, tmp_path, "run_clear.py",
        "--train_file", str(tmp_path / "corpus.txt"), "--streaming", "true",
        "--augmentations", "subs+del_span", "--synonyms_file", str(tmp_path / "synonyms.json"),
        "--max_seq_length", "24",
    )  # fmt: skip
    assert "Skipped 1 empty line(s)" in log
    state = json.loads((output_dir / "trainer_state.json").read_text())
    assert state["global_step"] == 2
    assert all(entry["cl_loss"] > 0 and entry["mlm_loss"] > 0 for entry in state["log_history"] if "loss" in entry)
    assert "subs+del_span" in (output_dir / "README.md").read_text()
    assert "[DEL]" in (output_dir / "tokenizer.json").read_text()  # del_span needs it
    assert isinstance(contrastive_hf.ContrastiveModel.from_pretrained(output_dir), contrastive_hf.ContrastiveModel)


def test_run_declutr_neighbouring_slices_with_hard_negatives(repo_root, tmp_path):
    log, output_dir = _run(
        repo_root, tmp_path, "run_declutr.py",
        "--train_file", str(repo_root / "examples" / "demo" / "data" / "enwiki_paragraphs_sample.txt"),
        "--max_train_samples", "200", "--span_view", "neighbouring_slice", "--hard_negatives", "--span_words", "16",
        "--max_seq_length", "48",
    )  # fmt: skip
    assert "document(s) of 200, shorter than the 48 words" in log  # short documents skipped and counted
    state = json.loads((output_dir / "trainer_state.json").read_text())
    assert state["global_step"] == 2
    assert all(entry["cl_loss"] > 0 for entry in state["log_history"] if "loss" in entry)
    assert json.loads((output_dir / "contrastive_config.json").read_text())["contrastive_loss"] == "info_nce"
    assert isinstance(contrastive_hf.ContrastiveModel.from_pretrained(output_dir), contrastive_hf.ContrastiveModel)
