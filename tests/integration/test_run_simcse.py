"""examples/run_simcse.py: SimCSE's per-mode defaults, and both modes end to end on real data with a tiny BERT."""

from __future__ import annotations

import csv
import json

import pytest
import torch
from transformers import AutoTokenizer

from contrastive_hf import ContrastiveModel
from contrastive_hf.commands.errors import UsageError
from contrastive_hf.recipes import simcse

from helpers.builders import DEMO, SNLI_TRIPLES, run_simcse_in_process, saved_settings, snli_slice


@pytest.fixture(scope="module")
def run_simcse():
    """What the script runs, as a module (its argument parsing and data loading, without training)."""
    from contrastive_hf.recipes.simcse import run

    return run


@pytest.mark.parametrize(
    "mode,batch,learning_rate,epochs,projection_at_inference",
    [("unsup", 64, 3e-5, 1, False), ("sup", 512, 5e-5, 3, True)],
)
def test_each_mode_applies_simcses_defaults(
    run_simcse, tmp_path, mode, batch, learning_rate, epochs, projection_at_inference
):
    model_args, data_args, _, training_args = run_simcse.parse_arguments(
        ["--mode", mode, "--output_dir", str(tmp_path)]
    )
    assert training_args.per_device_train_batch_size == batch
    assert training_args.learning_rate == learning_rate
    assert training_args.num_train_epochs == epochs
    assert model_args.projection_at_inference is projection_at_inference
    assert (model_args.temperature, data_args.max_seq_length, model_args.hard_negative_weight) == (0.05, 32, 0.0)
    assert model_args.pooler_type == "cls_before_pooler" and model_args.projection_type == "mlp"
    assert not model_args.do_mlm and model_args.mlm_weight == 0.1


def test_a_given_flag_overrides_the_mode_default_and_only_that_one(run_simcse, tmp_path):
    argv = ["--mode", "sup", "--learning_rate", "1e-4", "--projection_at_inference", "False", "--output_dir", "x"]
    model_args, _, _, training_args = run_simcse.parse_arguments(argv)
    assert training_args.learning_rate == 1e-4 and model_args.projection_at_inference is False
    assert training_args.per_device_train_batch_size == 512 and training_args.num_train_epochs == 3
    line = run_simcse.describe_hyperparameters("sup", model_args, training_args)
    assert "learning_rate (5e-05 -> 0.0001)" in line and "projection_at_inference (True -> False)" in line
    assert "num_train_epochs (" not in line

    # the same from a JSON file
    settings = tmp_path / "run.json"
    settings.write_text(json.dumps({"mode": "unsup", "num_train_epochs": 2, "output_dir": str(tmp_path)}))
    model_args, _, _, training_args = run_simcse.parse_arguments([str(settings)])
    assert training_args.num_train_epochs == 2 and training_args.learning_rate == 3e-5
    assert training_args.per_device_train_batch_size == 64


def test_global_batch_is_split_over_processes(run_simcse, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "4")
    _, _, _, training_args = run_simcse.parse_arguments(["--mode", "sup", "--output_dir", "x"])
    assert training_args.per_device_train_batch_size == 128  # SimCSE's 512 = 4 GPUs x 128


def test_pair_columns_the_data_lacks_are_a_usage_error(run_simcse, tmp_path):
    _, data_args, _, _ = run_simcse.parse_arguments(
        ["--mode", "sup", "--train_file", snli_slice(tmp_path / "triples.csv", 8), "--pair_columns", "foo,bar",
         "--output_dir", str(tmp_path / "out")]
    )  # fmt: skip
    tokenizer = AutoTokenizer.from_pretrained(DEMO / "tokenizer")
    collator = simcse.build_collator("sup", tokenizer, pair_columns=["foo", "bar"])
    with pytest.raises(UsageError, match=r"\['foo', 'bar'\] are not in .* --pair_columns"):
        run_simcse.load_pairs(data_args, collator, None)


def test_mode_is_required_and_checked(run_simcse, tmp_path, capsys):
    with pytest.raises(SystemExit):
        run_simcse.parse_arguments(["--output_dir", "x"])
    assert "--mode" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        run_simcse.parse_arguments(["--mode", "semi", "--output_dir", "x"])
    assert "invalid choice: 'semi'" in capsys.readouterr().err
    settings = tmp_path / "run.json"
    settings.write_text(json.dumps({"output_dir": "x"}))
    with pytest.raises(SystemExit):
        run_simcse.parse_arguments([str(settings)])
    assert f'{settings} must set "mode" (--mode): one of unsup, sup.' in capsys.readouterr().err
    settings.write_text(json.dumps({"output_dir": "x", "mode": "semi"}))
    with pytest.raises(SystemExit):
        run_simcse.parse_arguments([str(settings)])
    assert f"{settings}: \"mode\" must be one of unsup, sup, got 'semi'." in capsys.readouterr().err


def test_sup_batches_are_triplets_and_incomplete_rows_are_dropped(run_simcse, tmp_path, tokenizer):
    from contrastive_hf.data.collators import PairCollator

    path = snli_slice(tmp_path / "nli.csv", 8)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write("A man sleeps .,A person rests .,\n")  # no hard negative: dropped, not half-used
    _, data_args, _, _ = run_simcse.parse_arguments(["--mode", "sup", "--train_file", path, "--output_dir", "x"])
    collator = PairCollator(tokenizer, max_length=32)
    pairs = run_simcse.load_pairs(data_args, collator, cache_dir=None)
    assert len(pairs) == 8 and tuple(collator.columns) == ("sent0", "sent1", "hard_neg")
    batch = collator([pairs[i] for i in range(4)])
    assert batch["input_ids"].shape[:2] == (4, 3)  # anchor, entailment, contradiction
    first = next(csv.DictReader(open(path, encoding="utf-8")))
    assert tokenizer.decode(batch["input_ids"][0, 2], skip_special_tokens=True) == tokenizer.decode(
        tokenizer(first["hard_neg"])["input_ids"], skip_special_tokens=True
    )


def test_unsup_with_mlm_end_to_end(tmp_path):
    log, output_dir = run_simcse_in_process(
        tmp_path, "unsup", "--train_file", str(DEMO / "data" / "wiki1m_sample.txt"), "--max_train_samples", "96",
        "--do_mlm",
    )  # fmt: skip
    assert "SimCSE --mode unsup:" in log and "per_device_train_batch_size (64 -> 16)" in log
    config, training_args, history = saved_settings(output_dir)
    assert config["temperature"] == 0.05 and config["contrastive_loss"] == "info_nce"
    assert config["pooler_type"] == "cls_before_pooler" and config["projection_at_inference"] is False
    assert (config["projection_layers"], config["projection_activation"]) == (1, "tanh")
    assert config["mlm_weight"] == 0.1
    assert training_args.learning_rate == 3e-5 and training_args.per_device_train_batch_size == 16  # default, given
    assert any("mlm_loss" in entry and "cl_loss" in entry for entry in history)

    results = json.loads((output_dir / "eval_results.json").read_text())
    assert -100 <= results["eval_stsb_spearman_before"] <= 100 and -100 <= results["eval_stsb_spearman"] <= 100
    assert "before training" in log and "SentenceTransformer reload of" in log

    # the projection is for training only: the embedding is the raw [CLS] state
    model = ContrastiveModel.from_pretrained(output_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(output_dir)
    batch = tokenizer(["a man is playing a guitar .", "the cat sat"], padding=True, return_tensors="pt")
    with torch.no_grad():
        embeddings = model(**batch).pooler_output
        cls_states = model.encoder(**batch).last_hidden_state[:, 0]
    torch.testing.assert_close(embeddings, cls_states)
    card = (output_dir / "README.md").read_text()
    assert "SimCSE" in card and "`dropout`" in card and "0.1 x L_MLM" in card


def test_sup_end_to_end_with_hard_negatives_and_prebatch_queue(tmp_path):
    train_file = snli_slice(tmp_path / "nli.csv", 64)
    log, output_dir = run_simcse_in_process(
        tmp_path, "sup", "--train_file", train_file, "--learning_rate", "1e-4", "--prebatch_size", "1"
    )
    assert "Training on 64 (anchor, positive, hard negative) triplets from columns sent0, sent1, hard_neg" in log
    config, training_args, history = saved_settings(output_dir)
    assert config["temperature"] == 0.05 and config["hard_negative_weight"] == 0.0
    assert config["projection_at_inference"] is True and config["mlm_weight"] == 0.0
    assert training_args.learning_rate == 1e-4  # given
    assert training_args.num_train_epochs == 3 and training_args.prebatch_size == 1  # SimCSE's default; given
    assert any("cl_loss" in entry for entry in history) and not any("mlm_loss" in entry for entry in history)

    # supervised SimCSE keeps its MLP at inference: the embedding is tanh(W [CLS] + b)
    model = ContrastiveModel.from_pretrained(output_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(output_dir)
    batch = tokenizer(["two women are embracing .", "the men are fighting ."], padding=True, return_tensors="pt")
    with torch.no_grad():
        embeddings = model(**batch).pooler_output
        (dense,) = model.projection.layers
        expected = torch.tanh(dense(model.encoder(**batch).last_hidden_state[:, 0]))
    torch.testing.assert_close(embeddings, expected)
    card = (output_dir / "README.md").read_text()
    assert "hard negative hard_neg (contradiction)" in card and "pre-batch queue 1" in card
    assert "Supervised SimCSE trains on natural language inference pairs" in card
    assert "a hard negative per anchor; pre-batch negatives (the keys of the previous 1 batch(es))" in card


def test_sup_with_three_hard_negatives_and_matryoshka_dims_end_to_end(tmp_path):
    rows = list(csv.DictReader(open(SNLI_TRIPLES, newline="", encoding="utf-8")))[:40]
    train_file = tmp_path / "mined.csv"
    with open(train_file, "w", newline="", encoding="utf-8") as handle:  # the columns `contrastive-hf mine` writes
        writer = csv.writer(handle)
        writer.writerow(["query", "positive", "negative_1", "negative_2", "negative_3"])
        for i, row in enumerate(rows[:32]):
            writer.writerow(
                [row["sent0"], row["sent1"], row["hard_neg"], rows[i + 1]["hard_neg"], rows[i + 2]["sent1"]]
            )
    log, output_dir = run_simcse_in_process(
        tmp_path, "sup", "--train_file", str(train_file), "--matryoshka_dims", "32,16,8", "--matryoshka_weights",
        "1,1,0.5", "--num_train_epochs", "1",
    )  # fmt: skip
    assert "Training on 32 (anchor, positive, 3 hard negatives) rows from columns query, positive, negative_1" in log
    config, _, history = saved_settings(output_dir)
    assert config["matryoshka_dims"] == [32, 16, 8] and config["matryoshka_weights"] == [1.0, 1.0, 0.5]
    # batch 16 with three hard negatives each: up to 16 x 4 - 1 negatives per query
    assert all(40 < entry["negatives_per_query"] <= 63 for entry in history if "negatives_per_query" in entry)
    results = json.loads((output_dir / "eval_results.json").read_text())
    assert all(-100 <= results[f"eval_stsb_spearman_dim{dim}"] <= 100 for dim in (32, 16, 8))
    card = (output_dir / "README.md").read_text()
    assert "| Matryoshka dimensions | loss summed over the first 32 (weight 1), 16 (weight 1), 8 (weight 0.5)" in card
    assert "3 hard negatives per anchor" in card and "type: sts-dev-8" in card
