from __future__ import annotations

import pytest
import torch

from contrastive_hf import ContrastiveModel
from contrastive_hf.data.reading import load_corpus
from contrastive_hf.training.trainer import STEP_METRICS, ContrastiveTrainer
from contrastive_hf.training.training_args import ContrastiveTrainingArguments

from conftest import REPO_ROOT
from helpers.builders import SENTENCES, make_trainer


def test_trainer_logs_both_losses_and_updates_the_model(tokenizer, tmp_path):
    trainer = make_trainer(tokenizer, tmp_path)
    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    trainer.train()
    logged = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert len(logged) == 2
    for entry in logged:
        assert entry["mlm_loss"] > 0 and entry["cl_loss"] > 0
    changed = [name for name, p in trainer.model.named_parameters() if not torch.equal(p, before[name])]
    assert any(name.startswith("mlm_head") for name in changed)
    assert any(name.startswith("contrastive.projection") for name in changed)
    assert any("encoder.layer.0" in name for name in changed)


def test_the_bar_shows_the_losses_which_are_logged_every_2_percent_of_the_steps(tokenizer, tmp_path, capsys):
    default = ContrastiveTrainingArguments(output_dir=str(tmp_path)).logging_steps
    trainer = make_trainer(tokenizer, tmp_path, max_steps=4, logging_steps=default, disable_tqdm=False)
    trainer.train()
    assert default == 0.02  # 50 points to plot however long the run; here, every step
    assert [entry["step"] for entry in trainer.state.log_history if "loss" in entry] == [1, 2, 3, 4]
    printed = capsys.readouterr()
    assert "4/4" in printed.err and "mlm_loss=" in printed.err and "cl_loss=" in printed.err  # on the bar
    assert "{'loss'" not in printed.out + printed.err  # not a dict printed under the bar at each step


def test_without_mlm_only_the_contrastive_loss_is_logged(tokenizer, tmp_path):
    trainer = make_trainer(tokenizer, tmp_path, augmentation="dropout", mlm_weight=0.0, max_steps=2)
    trainer.train()
    entry = next(entry for entry in trainer.state.log_history if "loss" in entry)
    assert "cl_loss" in entry and "mlm_loss" not in entry
    assert abs(entry["loss"] - entry["cl_loss"]) < 1e-3


def test_saved_model_reproduces_the_embeddings_at_the_end_of_training(tokenizer, tmp_path):
    trainer = make_trainer(tokenizer, tmp_path)
    trainer.train()
    trainer.save_model()
    trained = trainer.model.contrastive.encode(SENTENCES[:8], tokenizer=tokenizer, convert_to_tensor=True)
    reloaded = ContrastiveModel.from_pretrained(tmp_path).eval()
    batch = tokenizer(SENTENCES[:8], padding=True, return_tensors="pt")
    with torch.no_grad():
        pooler_output = reloaded(**batch).pooler_output
    torch.testing.assert_close(pooler_output, trained, atol=1e-5, rtol=1e-5)


def test_every_step_metric_is_logged(tokenizer, tmp_path):
    distinct = (REPO_ROOT / "examples" / "demo" / "data" / "wiki1m_sample.txt").read_text().splitlines()[:32]
    trainer = make_trainer(
        tokenizer, tmp_path, "dropout", contrastive_loss="info_nce", sentences=distinct, prebatch_size=1
    )
    trainer.train()
    logged = [entry for entry in trainer.state.log_history if "loss" in entry]
    for entry in logged:
        for name in STEP_METRICS:
            assert name in entry, name
        assert 0.0 <= entry["alignment"] <= 4.0 and entry["uniformity"] <= 0.0
    # step 1: 7 in-batch negatives and an empty queue; from step 2 on, the previous batch's 8 keys too
    assert logged[0]["negatives_per_query"] == pytest.approx((7 + 15) / 2)
    assert logged[0]["queue_fill"] == pytest.approx((0 + 1) / 2)
    assert logged[1]["negatives_per_query"] == pytest.approx(15) and logged[1]["queue_fill"] == 1.0


def test_a_nan_loss_stops_training_naming_the_step_and_the_part(tokenizer, tmp_path):
    trainer = make_trainer(tokenizer, tmp_path)
    model = trainer.model
    compute = model.compute_mlm_loss
    calls = []

    def failing_mlm_loss(*args, **kwargs):
        calls.append(1)
        loss = compute(*args, **kwargs)
        return loss * float("nan") if len(calls) == 3 else loss

    model.compute_mlm_loss = failing_mlm_loss
    with pytest.raises(FloatingPointError, match=r"step 3 .*mlm_loss"):
        trainer.train()


def test_plain_training_arguments_work_with_the_contrastive_defaults(tokenizer, tmp_path):
    """Dropped into a script that builds transformers' own TrainingArguments, the trainer still trains MLM + CL."""
    from transformers import TrainingArguments

    trainer = make_trainer(tokenizer, tmp_path)
    trainer = ContrastiveTrainer(
        model=trainer.model,
        args=TrainingArguments(
            output_dir=str(tmp_path),
            max_steps=2,
            logging_steps=1,
            report_to="none",
            use_cpu=True,
            per_device_train_batch_size=8,
            remove_unused_columns=False,
            disable_tqdm=True,
        ),  # fmt: skip
        train_dataset=trainer.train_dataset,
        data_collator=trainer.data_collator,
    )
    assert trainer.loss_fn.prebatch is None
    trainer.train()
    logged = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert len(logged) == 2 and all("mlm_loss" in entry and "cl_loss" in entry for entry in logged)


# ----------------------------------------------------------------------------------------------------
# Evaluation: a script's own compute_metrics, as with transformers' masked-LM models
# ----------------------------------------------------------------------------------------------------


def run_mlm_s_metric_functions(seen: dict):
    """run_mlm.py's ``preprocess_logits_for_metrics`` (the argmax of the first prediction) and ``compute_metrics``
    (accuracy on the tokens whose label is not -100), recording what the trainer gave them in ``seen``."""

    def preprocess_logits_for_metrics(logits, labels):
        seen["logits_shape"], seen["labels_shape"] = tuple(logits[0].shape), tuple(labels.shape)
        return logits[0].argmax(dim=-1)

    def compute_metrics(prediction):
        seen["predictions"], seen["labels"] = prediction.predictions, prediction.label_ids
        scored = prediction.label_ids != -100
        return {"accuracy": float((prediction.predictions[scored] == prediction.label_ids[scored]).mean())}

    return preprocess_logits_for_metrics, compute_metrics


def test_compute_metrics_get_the_mlm_logits_as_from_a_masked_lm_model(tokenizer, tmp_path):
    from datasets import Dataset

    seen = {}
    preprocess, compute = run_mlm_s_metric_functions(seen)
    built = make_trainer(tokenizer, tmp_path)
    eval_dataset = Dataset.from_dict({"text": SENTENCES[:8]})  # one evaluation batch
    trainer = ContrastiveTrainer(
        model=built.model,
        args=built.args,  # ContrastiveTrainingArguments as they are: transformers' prediction_loss_only=False
        eval_dataset=eval_dataset,
        data_collator=built.data_collator,
        processing_class=tokenizer,
        compute_metrics=compute,
        preprocess_logits_for_metrics=preprocess,
    )
    metrics = trainer.evaluate()

    batch = built.data_collator([eval_dataset[index] for index in range(8)])  # the same draws: keyed per example
    model = trainer.model.eval()
    with torch.no_grad():  # written out: the encoder's states of the MLM copy, the head on every position
        states = model.contrastive.encoder(
            input_ids=batch["mlm_input_ids"], attention_mask=batch["mlm_attention_mask"]
        ).last_hidden_state
        expected = model.mlm_head(states, model.get_input_embeddings().weight).argmax(dim=-1)
    labels = batch["mlm_labels"]
    assert seen["logits_shape"] == (*labels.shape, len(tokenizer)) and seen["labels_shape"] == tuple(labels.shape)
    scored = labels != -100
    assert scored.sum() > 5
    assert (seen["labels"] == labels.numpy()).all()
    assert (seen["predictions"][scored.numpy()] == expected[scored].numpy()).all()
    accuracy = (expected[scored] == labels[scored]).float().mean().item()
    assert metrics["eval_accuracy"] == pytest.approx(accuracy)


def test_predict_gathers_the_logits_and_embeddings_and_not_the_parts_of_the_loss(tokenizer, tmp_path):
    """The parts of the loss the model returns are scalars, which the Trainer cannot gather across batches."""
    from datasets import Dataset

    built = make_trainer(tokenizer, tmp_path, per_device_eval_batch_size=4)
    trainer = ContrastiveTrainer(model=built.model, args=built.args, data_collator=built.data_collator)
    output = trainer.predict(Dataset.from_dict({"text": SENTENCES[:8]}))  # two batches
    logits, embeddings = output.predictions
    assert logits.shape[:2] == output.label_ids.shape and logits.shape[2] == len(tokenizer)
    assert embeddings.shape == (8, 2, 32)  # the two views of each sentence, projected
    assert "test_loss" in output.metrics


def test_an_evaluation_of_the_loss_only_scores_no_token_and_gives_the_same_loss(tokenizer, tmp_path):
    from datasets import Dataset

    built = make_trainer(tokenizer, tmp_path)
    eval_dataset = Dataset.from_dict({"text": SENTENCES[:8]})
    asked = []
    built.model.register_forward_pre_hook(
        lambda module, args, kwargs: asked.append(kwargs.get("return_mlm_logits")), with_kwargs=True
    )
    loss_only = ContrastiveTrainer(
        model=built.model, args=built.args, eval_dataset=eval_dataset, data_collator=built.data_collator
    ).evaluate()  # no compute_metrics: transformers evaluates the loss only
    assert asked == [False]
    preprocess, compute = run_mlm_s_metric_functions({})
    with_metrics = ContrastiveTrainer(
        model=built.model,
        args=built.args,
        eval_dataset=eval_dataset,
        data_collator=built.data_collator,
        compute_metrics=compute,
        preprocess_logits_for_metrics=preprocess,
    ).evaluate()
    assert asked == [False, None]  # the model's default when evaluated: the logits
    assert with_metrics["eval_loss"] == pytest.approx(loss_only["eval_loss"], abs=1e-5)


# ----------------------------------------------------------------------------------------------------
# Several processes: what every process must agree on (the real 2-process runs: tests/integration/test_run_clear.py)
# ----------------------------------------------------------------------------------------------------


@pytest.fixture
def two_processes(monkeypatch):
    """The trainer believes it is one of 2 processes; ``counts`` sets what the other processes report."""
    import contrastive_hf.training.trainer as trainer_module

    reported = {}
    monkeypatch.setattr(ContrastiveTrainingArguments, "world_size", property(lambda self: 2))
    monkeypatch.setattr(trainer_module, "gather_sizes", lambda size, device: [size, *reported["others"]])
    return reported


def test_processes_with_different_batch_counts_per_epoch_are_refused(tokenizer, tmp_path, two_processes):
    trainer = make_trainer(tokenizer, tmp_path)
    two_processes["others"] = [3]  # 32 sentences in batches of 8: 4 here, 3 on process 1
    with pytest.raises(ValueError, match="would get 4 / 3 training batches per epoch") as error:
        trainer.get_train_dataloader()
    assert "Keep even_batches true" in str(error.value) and "--dataloader_drop_last true" in str(error.value)
    two_processes["others"] = [4]
    assert len(trainer.get_train_dataloader()) == 4


def test_a_stream_on_several_processes_stops_all_together(tokenizer, tmp_path, two_processes):
    stream = load_corpus(str(REPO_ROOT / "examples" / "demo" / "data" / "wiki1m_sample.txt"), streaming=True)
    trainer = make_trainer(tokenizer, tmp_path)
    trainer.train_dataset = stream
    batches = [{"input_ids": torch.ones(2, 2, 3)}] * 3
    epoch = iter(batches)
    two_processes["others"] = [2]
    assert len(trainer.get_batch_samples(epoch, 2, "cpu")[0]) == 2
    two_processes["others"] = [0]  # process 1 ran out: both stop the epoch, the batch read here is dropped
    assert trainer.get_batch_samples(epoch, 2, "cpu")[0] == []
    two_processes["others"] = [0]  # no batch at all on process 1 at the start of an epoch: an error on every process
    with pytest.raises(RuntimeError) as error:
        trainer.get_batch_samples(iter(batches), 2, "cpu")
    assert "No training example on process(es) 1 of 2, while the others have some" in str(error.value)


class _Batches(torch.utils.data.IterableDataset):
    """An endless stream of one-example batches, read by dataloader workers."""

    def __iter__(self):
        while True:
            yield {"input_ids": torch.ones(1, 2, 3)}


def test_a_stream_s_dataloader_workers_end_with_its_epoch_not_with_the_trainer(tokenizer, tmp_path, two_processes):
    """The trainer remembers which epoch iterator it reads without keeping it: the Trainer drops an epoch's iterator
    when the epoch (or the run) ends, which shuts its dataloader workers down there and then. Kept by the trainer, a
    stream's iterator (never exhausted) kept its worker processes alive after ``train()`` returned, until the garbage
    collector found it, whose shutdown then waited 5 s for each worker."""
    stream = load_corpus(str(REPO_ROOT / "examples" / "demo" / "data" / "wiki1m_sample.txt"), streaming=True)
    trainer = make_trainer(tokenizer, tmp_path)
    trainer.train_dataset = stream
    two_processes["others"] = [2]
    epoch = iter(torch.utils.data.DataLoader(_Batches(), batch_size=None, num_workers=2))
    workers = list(epoch._workers)
    assert len(trainer.get_batch_samples(epoch, 2, "cpu")[0]) == 2
    two_processes["others"] = [0]  # process 1 ran out in this same epoch: both stop it (at an epoch's start, an error)
    assert trainer.get_batch_samples(epoch, 2, "cpu")[0] == []
    del epoch  # as the Trainer drops it at the end of the epoch
    assert [worker.is_alive() for worker in workers] == [False, False]


def test_logged_means_are_gathered_in_one_shape_whatever_each_process_counted():
    """`means_over_processes` on rank 0 of 2 (the collective replaced): this process counted only ``a``, the other
    only ``b``; both names come back, each the mean over the steps that counted it, from one gather of one shape."""
    from contrastive_hf.training.trainer import means_over_processes

    class TwoProcesses:
        shapes: list = []

        def gather(self, tensor):
            self.shapes.append(tuple(tensor.shape))
            other = torch.tensor([[[0.0, 6.0], [0.0, 2.0]]])  # sums (a, b), counts (a, b) of the other process
            return torch.cat([tensor, other])

    accelerator = TwoProcesses()
    means = means_over_processes(accelerator, ["a", "b"], {"a": torch.tensor(3.0)}, {"a": 3}, torch.device("cpu"))
    assert means == {"a": 1.0, "b": 3.0} and accelerator.shapes == [(1, 2, 2)]
    assert means_over_processes(accelerator, ["a", "b"], {}, {}, "cpu") == {"b": 3.0}  # nothing counted here


def test_zero3_that_cannot_save_whole_weights_is_refused_as_one_usage_line(capsys):
    """The refusal of ZeRO-3 without stage3_gather_16bit_weights_on_model_save (launched under DeepSpeed by
    tests/integration/test_zero_checkpoints.py) ended the scripts with a ValueError's traceback and exit status 1; it
    is the user's setting to fix: one line and exit status 2, as the scripts' other refusals of a user's settings."""
    from types import SimpleNamespace

    from contrastive_hf.commands.errors import exit_on_usage_error

    plugin = SimpleNamespace(zero_stage=3, deepspeed_config={"zero_optimization": {"stage": 3}})
    trainer = SimpleNamespace(
        accelerator=SimpleNamespace(state=SimpleNamespace(deepspeed_plugin=plugin)), model=torch.nn.Linear(2, 2)
    )

    @exit_on_usage_error
    def script_main():
        ContrastiveTrainer._check_zero3_can_save(trainer)  # what ContrastiveTrainer.__init__ calls

    with pytest.raises(SystemExit) as exit_:
        script_main()
    assert exit_.value.code == 2
    assert capsys.readouterr().err == (
        'test_trainer.py: error: DeepSpeed ZeRO-3 without "stage3_gather_16bit_weights_on_model_save": true cannot '
        "save the model: each process holds only a shard of every weight, and a checkpoint of shards would not load. "
        'Set it to true in the DeepSpeed config\'s "zero_optimization" (as ds_configs/zero3.json does), or '
        "zero3_save_16bit_model: true in the Accelerate config.\n"
    )
    plugin.deepspeed_config["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] = True
    script_main()  # gathered: saved whole, nothing refused


def test_fsdp_with_use_cpu_is_refused_instead_of_training_with_ddp(tmp_path):
    """accelerate runs FSDP on accelerators only: on CPU processes (``--use_cpu``) transformers trained with DDP and
    left ``--fsdp`` unused, without a word; it is refused, naming both flags and what shards on CPUs."""
    fsdp = {"fsdp": "full_shard auto_wrap", "fsdp_config": {"transformer_layer_cls_to_wrap": ["BertLayer"]}}
    with pytest.raises(ValueError, match="with --use_cpu the run would train with DistributedDataParallel") as error:
        ContrastiveTrainingArguments(output_dir=str(tmp_path), use_cpu=True, **fsdp)
    assert "DeepSpeed ZeRO-3 also shards on CPU processes" in str(error.value)
    assert ContrastiveTrainingArguments(output_dir=str(tmp_path), use_cpu=True).fsdp in (None, [], "")
