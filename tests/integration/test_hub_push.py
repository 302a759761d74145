"""Pushing to the Hub, end to end against a loopback server that speaks the Hub API (tests/helpers/fake_hub.py):
what is uploaded, and that no uploaded byte holds the Hub token or a local absolute path."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer, BertModel

from contrastive_hf import ContrastiveModel

from conftest import DEMO_TOKENIZER, REPO_ROOT, tiny_bert_config
from helpers.fake_hub import FakeHub
from helpers.launching import run_clear
from helpers.saved_files import assert_holds_none, local_paths

# its module-scoped pushes run once, on one pytest-xdist worker (make test: --dist loadgroup)
pytestmark = pytest.mark.xdist_group("hub_push")

TOKEN = "hf_SecretTokenThatMustNeverBeSaved0123"
DEMO_DATA = REPO_ROOT / "examples" / "demo" / "data"


def assert_clean(files: dict[str, bytes], tmp_path) -> None:
    """No byte holds the token or an absolute path of this machine."""
    assert_holds_none(files, [TOKEN, *local_paths(tmp_path)])


def tiny_encoder_config(tmp_path):
    path = tmp_path / "encoder.json"
    path.write_text(json.dumps({**tiny_bert_config().to_dict(), "model_type": "bert"}))
    return str(path)


def push_flags(repo: str) -> list[str]:
    return ["--push_to_hub", "--hub_model_id", repo, "--hub_token", TOKEN]


COMMON = ["--max_steps", "2", "--per_device_train_batch_size", "8", "--report_to", "none", "--save_strategy", "no"]
COMMON += ["--use_cpu", "true", "--disable_tqdm", "true", "--logging_steps", "1"]


def script_commands(tmp_path) -> dict[str, tuple[str, list[str]]]:
    """Every example script that can push, with a tiny model and the shipped data."""
    encoder = tiny_encoder_config(tmp_path)
    scratch = ["--config_name", encoder, "--tokenizer_name", str(DEMO_TOKENIZER)]
    wiki = ["--train_file", str(DEMO_DATA / "wiki1m_sample.txt"), "--max_train_samples", "32"]
    stsb = ["--stsb_dev_file", str(DEMO_DATA / "sts-dev.csv")]
    pretrained = tmp_path / "pretrained"
    BertModel(tiny_bert_config()).save_pretrained(pretrained)
    return {
        "clear": ("run_clear.py", [*scratch, *wiki, *stsb]),
        "simcse": ("run_simcse.py", ["--mode", "unsup", *scratch, *wiki]),
        "declutr": (
            "run_declutr.py",
            [*scratch, "--train_file", str(DEMO_DATA / "enwiki_paragraphs_sample.txt"), "--span_words", "8"],
        ),
        "sg_bert": (
            "run_sg_bert.py",
            ["--model_name_or_path", str(pretrained), "--tokenizer_name", str(DEMO_TOKENIZER), *wiki]
            + ["--projection_hidden_size", "16"],
        ),
        "dpr": (
            "run_dpr.py",
            [*scratch, "--train_file", str(DEMO_DATA / "nli_sample.csv"), "--eval_size", "16"]
            + ["--max_train_samples", "32", "--max_query_length", "64", "--max_passage_length", "64"],  # 64 positions
        ),
    }


SCRIPTS = ("clear", "simcse", "declutr", "sg_bert", "dpr")


@pytest.fixture(scope="module")
def pushes(tmp_path_factory) -> dict:
    """Every script of `script_commands` trained and pushed with ``--hub_token`` on the command line, one after the
    other in one process (tests/scripts/run_jobs.py: one interpreter start-up for all), to one loopback Hub:
    ``{"folder", "repos": what each repository holds, "tokens": the tokens the pushes were made with}``."""
    folder = tmp_path_factory.mktemp("pushes")
    commands = script_commands(folder)
    jobs = [
        {"name": name, "script": f"examples/{commands[name][0]}",
         "argv": [*commands[name][1], *COMMON, "--output_dir", str(folder / name / "out"),
                  *push_flags(f"tester/{name}-tiny")]}
        for name in SCRIPTS
    ]  # fmt: skip
    (folder / "jobs.json").write_text(json.dumps(jobs))
    with FakeHub() as hub:
        env = {**os.environ, "HF_ENDPOINT": hub.endpoint, "HF_HUB_OFFLINE": "0", "TOKENIZERS_PARALLELISM": "false",
               "OMP_NUM_THREADS": "1"}  # fmt: skip
        env.pop("HF_TOKEN", None)  # the token comes from the command line only
        command = [sys.executable, str(REPO_ROOT / "tests" / "scripts" / "run_jobs.py"), str(folder / "jobs.json"),
                   str(folder), "--keep-going"]  # fmt: skip
        result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=folder)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return {"folder": folder, "repos": hub.repos, "tokens": hub.tokens}


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_script_pushes_without_the_token_or_a_local_path(pushes, name):
    """--hub_token on the command line: the token authorises the push, and no uploaded byte holds it, nor a path of
    this machine (training_args.bin, config.json, trainer_state.json, the card...)."""
    folder = pushes["folder"]
    statuses = json.loads((folder / "statuses.rank0.json").read_text())
    assert statuses[name] == 0, (folder / f"{name}.rank0.log").read_text()[-3000:]
    files = pushes["repos"][f"tester/{name}-tiny"]
    assert "training_args.bin" in files and "README.md" in files
    assert_clean(files, folder)
    assert pushes["tokens"] and set(pushes["tokens"]) == {TOKEN}  # the pushes were made with the command line's
    saved = torch.load(folder / name / "out" / "training_args.bin", weights_only=False)
    assert saved.hub_token is None and saved.output_dir == "out"  # what the Trainer itself wrote


def test_run_clear_pushes_a_checkpoint_that_sentence_transformers_loads_as_readme_lists(repo_root, tmp_path):
    with FakeHub() as hub:
        env = {"HF_ENDPOINT": hub.endpoint, "HF_HUB_OFFLINE": "0", "HF_TOKEN": TOKEN}
        result, output_dir = run_clear(
            repo_root, tmp_path, "--push_to_hub", "--hub_model_id", "tester/clear-tiny", env=env
        )
    files = hub.repos["tester/clear-tiny"]
    expected = {  # README's "Model cards and the Hub" lists these
        "config.json",
        "model.safetensors",
        "contrastive_config.json",
        "contrastive_heads.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "modules.json",
        "sentence_bert_config.json",
        "config_sentence_transformers.json",
        "1_Pooling/config.json",
        "README.md",
        "training_args.bin",
    }
    assert expected <= set(files), sorted(files)
    assert not any(name.startswith("checkpoint-") or name.endswith(".py") for name in files)
    assert files["model.safetensors"] == (output_dir / "model.safetensors").read_bytes()  # what was saved locally
    assert json.loads(files["config.json"])["architectures"] == ["BertForMaskedLM"]  # CLEAR trains its MLM head
    card = files["README.md"].decode()
    assert "model-index" in card and "spearman_cosine" in card
    assert 'SentenceTransformer("tester/clear-tiny")' in card
    assert_clean(files, tmp_path)


def test_a_failed_push_leaves_the_checkpoint_intact_and_says_so(repo_root, tmp_path):
    with FakeHub(fail_commits=True) as hub:
        env = {"HF_ENDPOINT": hub.endpoint, "HF_HUB_OFFLINE": "0", "HF_TOKEN": TOKEN}
        result, output_dir = run_clear(
            repo_root, tmp_path, "--push_to_hub", "--hub_model_id", "tester/clear-tiny", env=env, check=False
        )
    assert result.returncode == 1
    assert "Pushing to the Hub failed" in result.stderr + result.stdout
    assert "is complete and unchanged" in result.stderr + result.stdout
    model = ContrastiveModel.from_pretrained(output_dir).eval()
    assert model(input_ids=torch.tensor([[2, 10, 11, 3]])).pooler_output.shape == (1, 32)
    assert np.isfinite(model.encode(["a man plays"])).all()
    assert (output_dir / "README.md").exists()


def test_no_saved_config_holds_the_local_path_its_encoder_was_loaded_from(tmp_path):
    """Every model family, loaded from a local folder, saves no trace of that folder (0.1 kept it in the encoder
    sub-config's _name_or_path)."""
    from transformers import BertForMaskedLM

    from contrastive_hf import ContrastiveForPreTraining, DualEncoderModel
    from contrastive_hf.models.modeling_multitask import MultitaskModel, TaskSpec

    source = tmp_path / "local-encoder"
    BertForMaskedLM(tiny_bert_config()).save_pretrained(source)
    models = {
        "contrastive": ContrastiveForPreTraining.from_encoder_pretrained(source, pooler_type="mean"),
        "dual": DualEncoderModel.from_encoder_pretrained(source),
        "multitask": MultitaskModel.from_sentence_encoder(
            source, [TaskSpec(name="sst", type="classification")], pooler_type="mean"
        ),
    }
    models["dual"].tokenizer = AutoTokenizer.from_pretrained(DEMO_TOKENIZER)  # two towers: each carries it
    for name, model in models.items():
        model.save_pretrained(tmp_path / name)
        files = {
            str(path.relative_to(tmp_path)): path.read_bytes()
            for path in (tmp_path / name).rglob("*")
            if path.is_file()
        }
        assert_clean(files, tmp_path)
