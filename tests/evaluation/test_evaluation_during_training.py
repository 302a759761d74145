"""STS evaluation during training: eval_stsb_spearman every eval_steps keeps the best checkpoint (SimCSE's selection),
through ContrastiveTrainer and through examples/run_clear.py, and `contrastive-hf plot` draws the run."""

from __future__ import annotations

import json
import runpy
import sys

import pytest
import torch
from datasets import Dataset
from PIL import Image
from transformers import TrainerCallback

from contrastive_hf import ContrastiveConfig, ContrastiveForPreTraining
from contrastive_hf.commands.cli import main as cli_main
from contrastive_hf.data.collators import ContrastiveDataCollator
from contrastive_hf.evaluation import STSData, read_stsbenchmark, sts_eval_metrics
from contrastive_hf.training.trainer import ContrastiveTrainer
from contrastive_hf.training.training_args import ContrastiveTrainingArguments

from conftest import DEMO_TOKENIZER, tiny_bert_config


@pytest.fixture
def stsb_dev(repo_root) -> STSData:
    data = read_stsbenchmark(repo_root / "examples" / "demo" / "data" / "sts-dev.csv")
    return STSData(data.sentences1[:64], data.sentences2[:64], data.scores[:64])


@pytest.mark.slow  # a run with STS-B evaluations: 1 s of CPU
def test_best_checkpoint_by_stsb_spearman_is_kept(repo_root, tokenizer, tmp_path, stsb_dev):
    torch.manual_seed(1)
    config = ContrastiveConfig(encoder=tiny_bert_config(vocab_size=len(tokenizer)), pooler_type="mean", mlm_weight=0.0)
    model = ContrastiveForPreTraining(config)
    corpus = (repo_root / "examples" / "demo" / "data" / "wiki1m_sample.txt").read_text().splitlines()[:96]
    args = ContrastiveTrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=16,
        max_steps=6,
        logging_steps=2,
        eval_strategy="steps",
        eval_steps=2,
        save_strategy="steps",
        save_steps=2,
        load_best_model_at_end=True,
        metric_for_best_model="eval_stsb_spearman",
        learning_rate=3e-3,
        report_to="none",
        disable_tqdm=True,
        use_cpu=True,
        seed=1,
    )
    trainer = ContrastiveTrainer(
        model=model,
        args=args,
        train_dataset=Dataset.from_dict({"text": corpus}),
        eval_dataset={"stsb": stsb_dev},
        data_collator=ContrastiveDataCollator(tokenizer, augmentation="dropout", mlm=False, max_length=24, seed=1),
        processing_class=tokenizer,
    )
    trainer.train()

    evaluations = [entry for entry in trainer.state.log_history if "eval_stsb_spearman" in entry]
    assert [entry["step"] for entry in evaluations] == [2, 4, 6]
    for entry in evaluations:
        assert {"eval_stsb_pearson", "eval_stsb_alignment", "eval_stsb_uniformity"} <= set(entry)
    best = max(evaluations, key=lambda entry: entry["eval_stsb_spearman"])
    assert trainer.state.best_metric == best["eval_stsb_spearman"]
    assert trainer.state.best_model_checkpoint.endswith(f"checkpoint-{best['step']}")
    # this run's best is not its last checkpoint, so the reload below is what restores it
    assert best["step"] != 6 and best["eval_stsb_spearman"] != evaluations[-1]["eval_stsb_spearman"]
    rescored = sts_eval_metrics(trainer.model, stsb_dev, tokenizer)
    assert rescored["eval_spearman"] == pytest.approx(best["eval_stsb_spearman"], abs=1e-4)
    assert rescored["eval_alignment"] == pytest.approx(best["eval_stsb_alignment"], abs=1e-5)


@pytest.mark.slow  # run_clear with STS-B evaluations, then plotted: 3 s of CPU
def test_run_clear_evaluates_every_eval_steps_and_plot_draws_the_run(repo_root, tmp_path, monkeypatch, capsys):
    encoder_config = tmp_path / "encoder.json"
    encoder_config.write_text(json.dumps({**tiny_bert_config().to_dict(), "model_type": "bert"}))
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join((repo_root / "examples/demo/data/wiki1m_sample.txt").read_text().splitlines()[:64]))
    stsb = tmp_path / "sts-dev.csv"
    stsb.write_text("\n".join((repo_root / "examples/demo/data/sts-dev.csv").read_text().splitlines()[:64]) + "\n")
    output_dir = tmp_path / "run"
    argv = [
        "run_clear.py",
        "--config_name", str(encoder_config),
        "--tokenizer_name", str(DEMO_TOKENIZER),
        "--train_file", str(corpus),
        "--stsb_dev_file", str(stsb),
        "--max_steps", "4",
        "--logging_steps", "1",
        "--per_device_train_batch_size", "16",
        "--max_seq_length", "24",
        "--eval_strategy", "steps",
        "--eval_steps", "2",
        "--save_strategy", "steps",
        "--save_steps", "2",
        "--load_best_model_at_end", "true",
        "--metric_for_best_model", "eval_stsb_spearman",
        "--report_to", "none",
        "--use_cpu", "true",
        "--output_dir", str(output_dir),
    ]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    runpy.run_path(str(repo_root / "examples" / "run_clear.py"), run_name="__main__")

    state = json.loads((output_dir / "trainer_state.json").read_text())
    steps = [entry["step"] for entry in state["log_history"] if "eval_stsb_spearman" in entry]
    assert steps == [0, 2, 4]  # STS-B before training recorded as step 0; step 4's evaluation is not repeated
    assert state["best_model_checkpoint"] is not None and state["best_metric"] is not None

    assert cli_main(["plot", str(output_dir), "--output-dir", str(tmp_path / "pictures")]) == 0
    for name in ("training_curves.png", "alignment_uniformity.png"):
        with Image.open(tmp_path / "pictures" / name) as image:
            assert image.format == "PNG" and image.width > 600 and image.height > 400
    assert "alignment_uniformity.png" in capsys.readouterr().out


def test_alignment_uniformity_plot_groups_points_by_name(tmp_path, monkeypatch):
    """One recipe's seeds (points sharing a name) share one color and one legend entry; with more than 10 entries
    no two share a color."""
    from contrastive_hf.evaluation import plots

    figures = []
    make_figure = plots._figure
    monkeypatch.setattr(plots, "_figure", lambda *size: figures.append(make_figure(*size)) or figures[-1])
    seeds = [plots.ModelPoint("recipe A", 0.1 + i / 100, -2.0 - i / 10) for i in range(3)]
    others = [plots.ModelPoint(f"model {i}", 0.3, -1.0 - i / 10) for i in range(11)]
    plots.plot_alignment_uniformity([], seeds + others, tmp_path / "points.png")

    axes = figures[0].axes[0]
    legend = [text.get_text() for text in axes.get_legend().get_texts()]
    assert legend == ["recipe A"] + [f"model {i}" for i in range(11)]
    first = axes.get_lines()[0]
    assert list(first.get_xdata()) == [point.uniformity for point in seeds]
    assert list(first.get_ydata()) == [point.alignment for point in seeds]
    colors = [tuple(line.get_color()) if not isinstance(line.get_color(), str) else line.get_color()
              for line in axes.get_lines()]  # fmt: skip
    assert len(set(colors)) == 12
    assert "training step" not in axes.get_title()


@pytest.mark.slow  # a run with STS-B evaluations and its resume: 1.5 s of CPU
def test_a_resumed_run_keeps_the_best_checkpoint_of_its_first_part(repo_root, tokenizer, tmp_path, stsb_dev):
    """The saved states name the best checkpoint by its folder alone (no local path in a saved file, the checkpoints'
    included); resumed, the Trainer looks for that name in the working directory and drops it as gone, and a run
    that ends before its next checkpoint (here: resumed at step 4, stopped at 5) had no best model to load at the
    end. It is found beside the checkpoint resumed, and loaded."""

    def run(max_steps: int, resume: str | None = None) -> ContrastiveTrainer:
        torch.manual_seed(1)
        config = ContrastiveConfig(
            encoder=tiny_bert_config(vocab_size=len(tokenizer)), pooler_type="mean", mlm_weight=0.0
        )
        corpus = (repo_root / "examples" / "demo" / "data" / "wiki1m_sample.txt").read_text().splitlines()[:96]
        args = ContrastiveTrainingArguments(
            output_dir=str(tmp_path), per_device_train_batch_size=16, max_steps=6, logging_steps=2,
            eval_strategy="steps", eval_steps=2, save_strategy="steps", save_steps=2, load_best_model_at_end=True,
            metric_for_best_model="eval_stsb_spearman", learning_rate=3e-3, report_to="none", disable_tqdm=True,
            use_cpu=True, seed=1,
        )  # fmt: skip
        trainer = ContrastiveTrainer(
            model=ContrastiveForPreTraining(config),
            args=args,
            train_dataset=Dataset.from_dict({"text": corpus}),
            eval_dataset={"stsb": stsb_dev},
            data_collator=ContrastiveDataCollator(tokenizer, augmentation="dropout", mlm=False, max_length=24, seed=1),
            processing_class=tokenizer,
        )
        trainer.add_callback(StopAt(max_steps))  # as an interrupted run stops
        trainer.train(resume_from_checkpoint=resume)
        return trainer

    first = run(4)
    for state in tmp_path.glob("checkpoint-*/trainer_state.json"):  # no local path: the folder's name alone
        assert str(tmp_path) not in state.read_text() and '"best_model_checkpoint": "checkpoint-' in state.read_text()
    evaluations = [entry for entry in first.state.log_history if "eval_stsb_spearman" in entry]
    best_first = max(evaluations, key=lambda entry: entry["eval_stsb_spearman"])
    resumed = run(5, resume=str(tmp_path / "checkpoint-4"))
    assert resumed.state.global_step == 5 and not (tmp_path / "checkpoint-5").exists()
    assert resumed.state.best_model_checkpoint == str(tmp_path / f"checkpoint-{best_first['step']}")
    rescored = sts_eval_metrics(resumed.model, stsb_dev, tokenizer)
    assert rescored["eval_spearman"] == pytest.approx(best_first["eval_stsb_spearman"], abs=1e-4)


class StopAt(TrainerCallback):
    def __init__(self, step: int):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step >= self.step:
            control.should_training_stop = True
