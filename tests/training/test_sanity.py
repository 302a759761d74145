"""Training that cannot silently learn nothing (contrastive_hf.training.sanity): refusals when the trainer is built,
warnings when a logged window shows no negatives or collapsed embeddings, and none on a healthy run."""

from __future__ import annotations

import logging

import pytest
from datasets import Dataset
from transformers import TrainerControl, TrainerState

from contrastive_hf import ContrastiveConfig, ContrastiveForPreTraining
from contrastive_hf.data.augmentations import add_del_token
from contrastive_hf.data.collators import ContrastiveDataCollator, PairCollator
from contrastive_hf.evaluation import STSData
from contrastive_hf.training.sanity import TrainingSanityCallback, check_training_setup
from contrastive_hf.training.trainer import ContrastiveTrainer
from contrastive_hf.training.training_args import ContrastiveTrainingArguments

from conftest import REPO_ROOT, tiny_bert_config
from helpers.builders import make_dual_encoder_trainer

WIKI = (REPO_ROOT / "examples" / "demo" / "data" / "wiki1m_sample.txt").read_text().splitlines()[:32]
SANITY_LOGGER = "contrastive_hf.training.sanity"


def make_trainer(
    tokenizer, tmp_path, dataset, collator=None, batch_size=8, contrastive_loss="nt_xent", eval_dataset=None, **extra
):
    add_del_token(tokenizer)
    encoder = tiny_bert_config(vocab_size=len(tokenizer), hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = ContrastiveForPreTraining(
        ContrastiveConfig(encoder=encoder, pooler_type="mean", contrastive_loss=contrastive_loss)
    )
    settings = dict(max_steps=4, logging_steps=2, learning_rate=1e-3, report_to="none", save_strategy="no")
    args = ContrastiveTrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=batch_size,
        disable_tqdm=True,
        use_cpu=True,
        **{**settings, **extra},
    )
    collator = collator or ContrastiveDataCollator(tokenizer, augmentation="del_word", max_length=32, seed=0)
    return ContrastiveTrainer(
        model=model,
        args=args,
        train_dataset=dataset,
        eval_dataset=eval_dataset,
        data_collator=collator,
        processing_class=tokenizer,
    )


def sanity_warnings(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.name == SANITY_LOGGER]


# ----------------------------------------------------------------------------------------------------
# Refused when the trainer is built
# ----------------------------------------------------------------------------------------------------


def test_a_batch_of_one_sentence_is_refused(tokenizer, tmp_path):
    # issue 13: --per_device_train_batch_size 1 trained with cl_loss 0 and exited 0
    dataset = Dataset.from_dict({"text": WIKI})
    message = (
        r"no negatives: each batch holds 1 sentence \(per_device_train_batch_size=1 on 1 process\(es\)\).* "
        r"Set --per_device_train_batch_size to 2 or more"
    )
    with pytest.raises(ValueError, match=message):
        make_trainer(tokenizer, tmp_path, dataset, batch_size=1)


def test_keeping_the_best_model_by_a_loss_that_no_eval_set_logs_is_refused(tokenizer, tmp_path):
    """--load_best_model_at_end with transformers' default metric (the eval loss) and STS-B dev as the eval set
    stopped training with a KeyError at the first evaluation; it is refused when the trainer is built, naming the
    metric to use, and the same run with that metric keeps the best checkpoint."""
    dataset = Dataset.from_dict({"text": WIKI})
    stsb = STSData(WIKI[:8], WIKI[8:16], [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 2.5, 1.5])
    best = dict(load_best_model_at_end=True, eval_strategy="steps", eval_steps=2, save_strategy="steps", save_steps=2)
    with pytest.raises(ValueError, match=r"which is 'loss' .*'stsb' .*--metric_for_best_model .*: stsb_spearman \(the "
                       r"Spearman correlation .* as SimCSE selects checkpoints on STS-B dev\)\.$"):  # fmt: skip
        make_trainer(tokenizer, tmp_path, dataset, eval_dataset={"stsb": stsb}, **best)
    trainer = make_trainer(
        tokenizer, tmp_path, dataset, eval_dataset={"stsb": stsb}, metric_for_best_model="stsb_spearman", **best
    )
    trainer.train()
    assert trainer.state.best_metric is not None and trainer.state.best_model_checkpoint is not None


def test_keeping_the_best_dual_encoder_by_the_loss_names_its_own_retrieval_metric(tokenizer, tmp_path):
    # run_dpr's refusal suggested held_out_mrr "as SimCSE selects checkpoints by STS-B dev Spearman"
    from contrastive_hf.evaluation.retrieval import RetrievalData
    from contrastive_hf.recipes.dpr.run import HeldOutRetrieval

    held_out = HeldOutRetrieval(RetrievalData(WIKI[:4], WIKI[4:8], [[0], [1], [2], [3]], name="held_out"), {})
    best = dict(load_best_model_at_end=True, eval_strategy="steps", eval_steps=2, save_strategy="steps", save_steps=2)
    with pytest.raises(ValueError) as error:
        make_dual_encoder_trainer(tokenizer, tmp_path, eval_dataset={"held_out": held_out}, **best)
    message = str(error.value)
    assert message.endswith(
        "Set --metric_for_best_model to one of their metrics: held_out_mrr (the mean reciprocal rank of each query's "
        "first relevant passage among the held-out pairs)."
    )
    assert "SimCSE" not in message and "STS-B" not in message


def test_a_batch_of_one_is_allowed_where_there_are_other_negatives(tokenizer, tmp_path):
    # a pre-batch queue gives the previous batches' sentences; a hard-negative column gives one more sentence
    make_trainer(tokenizer, tmp_path, Dataset.from_dict({"text": WIKI}), batch_size=1, contrastive_loss="info_nce",
                 prebatch_size=2)  # fmt: skip
    triplets = Dataset.from_dict({"sent0": WIKI[:8], "sent1": WIKI[8:16], "hard_neg": WIKI[16:24]})
    make_trainer(tokenizer, tmp_path, triplets, PairCollator(tokenizer), batch_size=1, contrastive_loss="info_nce")
    pairs = Dataset.from_dict({"sent0": WIKI[:8], "sent1": WIKI[8:16]})
    with pytest.raises(ValueError, match="no negatives"):  # the same pairs without their hard negatives
        make_trainer(tokenizer, tmp_path, pairs, PairCollator(tokenizer), batch_size=1, contrastive_loss="info_nce")


def test_a_batch_of_one_is_allowed_with_several_hard_negative_columns(tokenizer, tmp_path):
    # the collator says whether its batches hold hard negatives: any column after (anchor, positive) is one (the check
    # counted exactly three columns, and refused k = 2 hard negatives as "no negatives")
    columns = ("anchor", "positive", "negative_1", "negative_2")
    rows = Dataset.from_dict(dict(zip(columns, (WIKI[:8], WIKI[8:16], WIKI[16:24], WIKI[24:32]), strict=True)))
    for collator in (PairCollator(tokenizer, columns=columns), PairCollator(tokenizer)):  # given, or found
        assert collator.hard_negatives_in_batches(rows) is True
        trainer = make_trainer(tokenizer, tmp_path, rows, collator, batch_size=1, contrastive_loss="info_nce",
                               max_steps=2, logging_steps=1)  # fmt: skip
        trainer.train()
        # each step scores its anchor against its positive and 2 hard negatives: a loss, where no negative gives 0
        losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
        assert len(losses) == 2 and all(0 < loss < float("inf") for loss in losses), losses


def test_a_dual_encoder_batch_of_one_is_allowed_with_hard_negative_passages(tokenizer, tmp_path):
    # QueryPassageCollator's default columns (None: found in the data) stopped the check with a TypeError
    from contrastive_hf.recipes.dpr import QueryPassageCollator

    trainer = make_dual_encoder_trainer(tokenizer, tmp_path)  # its data has a hard_negative column
    trainer.args.per_device_train_batch_size = 1
    assert trainer.data_collator.columns is None
    check_training_setup(trainer)  # what the trainer's __init__ runs
    collator = QueryPassageCollator(tokenizer)
    pairs = Dataset.from_dict({"query": WIKI[:4], "positive": WIKI[4:8]})
    assert collator.hard_negatives_in_batches(pairs) is False
    assert collator.hard_negatives_in_batches(pairs.add_column("hard_negative", WIKI[8:12])) is True
    assert collator.hard_negatives_in_batches(pairs.to_iterable_dataset()) is None  # a stream is not read before
    assert QueryPassageCollator(tokenizer, columns=("query", "positive")).hard_negatives_in_batches(None) is False


def test_a_max_length_beyond_the_position_embeddings_is_refused(tokenizer, tmp_path):
    # issue 13: it crashed mid-run, at the first long sentence, with a tensor-size error
    add_del_token(tokenizer)
    collator = ContrastiveDataCollator(tokenizer, max_length=65, seed=0)  # tiny_bert_config: 64 positions
    message = (
        r"ContrastiveDataCollator's max_length=65 \(--max_seq_length\) is longer than the encoder's position "
        r"embeddings, which take at most 64 tokens.* Set --max_seq_length to 64 or less"
    )
    with pytest.raises(ValueError, match=message):
        make_trainer(tokenizer, tmp_path, Dataset.from_dict({"text": WIKI}), collator)
    make_trainer(
        tokenizer, tmp_path, Dataset.from_dict({"text": WIKI}), ContrastiveDataCollator(tokenizer, max_length=64)
    )


# ----------------------------------------------------------------------------------------------------
# Warned while training
# ----------------------------------------------------------------------------------------------------


def test_a_batch_of_identical_sentences_warns_once_that_there_are_no_negatives(tokenizer, tmp_path, caplog):
    # issue 13: loss 0 and grad_norm 0, exit 0; identical sentences are never each other's negatives
    trainer = make_trainer(tokenizer, tmp_path, Dataset.from_dict({"text": [WIKI[0]] * 32}))
    with caplog.at_level(logging.WARNING, logger=SANITY_LOGGER):
        trainer.train()
    logged = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert len(logged) == 2 and all(entry["negatives_per_query"] == 0 for entry in logged)
    warnings = sanity_warnings(caplog)
    assert len(warnings) == 1, warnings  # once, not every window; and no collapse: the batch is one sentence
    assert "No negatives at step 2: negatives_per_query=0.0" in warnings[0]
    assert "Identical sentences are never each other's negatives" in warnings[0]
    assert "Deduplicate or shuffle the corpus" in warnings[0]


def alike_views_trainer(tokenizer, tmp_path, **extra):
    """Different sentences (different sentence ids: they are negatives) whose views keep one word, the same one:
    max_length 3 cuts every view to "[CLS] the [SEP]", so (dropout off) every embedding is the same vector."""
    features = [tokenizer(f"the {text}", truncation=True, max_length=64)["input_ids"] for text in WIKI]
    collator = ContrastiveDataCollator(tokenizer, augmentation="dropout", mlm=False, max_length=3, seed=0)
    return make_trainer(tokenizer, tmp_path, Dataset.from_dict({"input_ids": features}), collator, **extra)


def test_views_that_are_all_alike_warn_that_the_embeddings_collapsed(tokenizer, tmp_path, caplog):
    trainer = alike_views_trainer(tokenizer, tmp_path)
    with caplog.at_level(logging.WARNING, logger=SANITY_LOGGER):
        trainer.train()
    logged = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert logged[0]["negatives_per_query"] == 14 and logged[0]["uniformity"] == 0.0
    warnings = sanity_warnings(caplog)
    assert len(warnings) == 1, warnings
    assert "Collapsed embeddings at step 2: uniformity 0.0" in warnings[0]
    assert "cl_loss" in warnings[0] and "chance: ln(1 + negatives) = 2.708" in warnings[0]
    assert "--max_seq_length" in warnings[0] and "--learning_rate" in warnings[0]


def test_a_run_shorter_than_logging_steps_logs_its_steps_as_one_window_and_is_checked(tokenizer, tmp_path, caplog):
    # the README's 50-step examples run under the default logging_steps of 500: without a window at the end they
    # logged no cl_loss, alignment or uniformity at all
    trainer = alike_views_trainer(tokenizer, tmp_path, max_steps=3, logging_steps=10)
    with caplog.at_level(logging.WARNING, logger=SANITY_LOGGER):
        trainer.train()
    logged = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert [entry["step"] for entry in logged] == [3] and logged[0]["uniformity"] == 0.0
    assert any("Collapsed embeddings at step 3" in message for message in sanity_warnings(caplog))


def test_the_collapse_of_issue_13_is_named_from_its_logged_window(caplog):
    # the README's subs+del_span example before its fix, window of steps 11-20 (examples/demo, batch 64)
    logs = {"loss": 13.31, "mlm_loss": 8.463, "cl_loss": 4.844, "alignment": 0.0026, "uniformity": -0.0053,
            "negatives_per_query": 126.0}  # fmt: skip
    state = TrainerState(global_step=20, is_world_process_zero=True)
    callback = TrainingSanityCallback()
    args = ContrastiveTrainingArguments(output_dir="unused", logging_steps=10, report_to="none", use_cpu=True)
    with caplog.at_level(logging.WARNING, logger=SANITY_LOGGER):
        for _ in range(3):
            callback.on_log(args, state, TrainerControl(), logs=dict(logs))
        callback.on_log(args, state, TrainerControl(), logs={"eval_stsb_uniformity": -0.001})  # not training
    warnings = sanity_warnings(caplog)
    assert len(warnings) == 1
    assert "uniformity -0.0053" in warnings[0] and "chance: ln(1 + negatives) = 4.844" in warnings[0]
    assert "--pooler_type mean" in warnings[0]


def test_a_healthy_run_warns_nothing(tokenizer, tmp_path, caplog):
    trainer = make_trainer(tokenizer, tmp_path, Dataset.from_dict({"text": WIKI}))
    with caplog.at_level(logging.WARNING, logger=SANITY_LOGGER):
        trainer.train()
    logged = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert all(entry["negatives_per_query"] == 14 and entry["uniformity"] < -0.05 for entry in logged), logged
    assert sanity_warnings(caplog) == []
