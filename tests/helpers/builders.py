"""Tiny models, data and trainers that several test modules build: one place for the training arguments every
test trainer takes, and for the set-ups more than one module uses."""

from __future__ import annotations

import csv
import json

import datasets
import numpy as np
import torch
from datasets import Dataset

from contrastive_hf import ContrastiveConfig, ContrastiveForPreTraining, ContrastiveModel
from contrastive_hf.data.augmentations import add_del_token
from contrastive_hf.data.collators import ContrastiveDataCollator
from contrastive_hf.models.configuration_dual_encoder import DualEncoderConfig
from contrastive_hf.models.modeling_dual_encoder import DualEncoderModel
from contrastive_hf.models.modeling_multitask import MultitaskModel, TaskSpec
from contrastive_hf.models.objectives import InfoNCELoss
from contrastive_hf.models.prebatch_queue import PrebatchQueue
from contrastive_hf.recipes.dpr import QueryPassageCollator, tokenize_query_passage_pairs
from contrastive_hf.recipes.multitask.trainer import MultitaskTrainer, MultitaskTrainingArguments
from contrastive_hf.training.trainer import ContrastiveTrainer
from contrastive_hf.training.training_args import ContrastiveTrainingArguments

from conftest import DEMO_DATA, REPO_ROOT, example_script, tiny_bert_config

VOCAB = 60


BATCH = 10  # chunks of 4: 4 + 4 + 2


def build(dropout: float, mlm_weight: float = 1.0) -> ContrastiveForPreTraining:
    torch.manual_seed(0)
    encoder = tiny_bert_config(vocab_size=VOCAB, hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    config = ContrastiveConfig(
        encoder=encoder, contrastive_loss="info_nce", hard_negative_weight=0.5, mlm_weight=mlm_weight
    )
    return ContrastiveForPreTraining(config).train()


def batch() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    lengths = torch.randint(3, 9, (BATCH, 3), generator=generator)
    ids = torch.randint(5, VOCAB, (BATCH, 3, 8), generator=generator)
    mask = (torch.arange(8) < lengths[..., None]).long()
    mlm_labels = torch.full((BATCH, 8), -100)
    mlm_labels[:, 1:4] = ids[:, 0, 1:4]
    sentence_ids = torch.arange(BATCH * 3).view(BATCH, 3)
    sentence_ids[5] = sentence_ids[1]  # a duplicate sentence in another chunk: masked either way
    return {
        "input_ids": ids * mask,
        "attention_mask": mask,
        "sentence_ids": sentence_ids,
        "mlm_input_ids": ids[:, 0],
        "mlm_attention_mask": torch.ones(BATCH, 8, dtype=torch.long),
        "mlm_labels": mlm_labels,
    }


def gradients(model) -> dict[str, torch.Tensor]:
    return {name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None}


SENTENCES = [
    "the cat sat on the mat",
    "a man is playing a guitar",
    "south australia has a unique position in history",
    "the river flows into the sea",
    "she wrote a book about the war",
    "many were attracted to the free state",
    "the team won the final match",
    "a woman is slicing an onion",
] * 4


def make_trainer(
    tokenizer,
    tmp_path,
    augmentation="del_word",
    mlm_weight=1.0,
    max_steps=4,
    contrastive_loss="nt_xent",
    sentences=SENTENCES,
    **extra,
):
    add_del_token(tokenizer)
    config = ContrastiveConfig(
        encoder=tiny_bert_config(vocab_size=len(tokenizer)),
        pooler_type="cls",
        mlm_weight=mlm_weight,
        contrastive_loss=contrastive_loss,
    )
    model = ContrastiveForPreTraining(config)
    dataset = Dataset.from_dict({"text": sentences})
    args = ContrastiveTrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=8,
        max_steps=max_steps,
        learning_rate=1e-3,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        **{"logging_steps": 2, "disable_tqdm": True, **extra},
    )
    collator = ContrastiveDataCollator(tokenizer, augmentation=augmentation, mlm=mlm_weight > 0, max_length=16, seed=0)
    return ContrastiveTrainer(
        model=model, args=args, train_dataset=dataset, data_collator=collator, processing_class=tokenizer
    )


QUEUE_SENTENCES = [
    f"sentence number {i} about the topic of {word}" for i, word in enumerate("abcdefghijklmnopqrstuvwx")
]


def queue_holding(model, keys: torch.Tensor, ids: torch.Tensor | None = None) -> PrebatchQueue:
    """Give ``model``'s loss (its ``loss_fn``, or ``model`` itself when it is a loss) a pre-batch queue holding
    ``keys`` ``(K, d)`` (and their sentence ids ``(K,)``) as one earlier batch, read by its next training call."""
    loss = getattr(model, "loss_fn", model)
    queue = PrebatchQueue(num_batches=1)
    queue.load_state_dict({"batch_0": keys, **({} if ids is None else {"ids_0": ids})}, device=keys.device)
    loss.prebatch = queue
    loss.train()
    return queue


def make_queue_trainer(tokenizer, output_dir, max_steps, sentences=QUEUE_SENTENCES, views="dropout", **extra_args):
    """A `ContrastiveTrainer` of a tiny model on ``sentences`` (24 by default), batches of 4 in views ``views``
    (an augmentation, as ``--augmentations`` names it); ``extra_args``: training arguments."""
    torch.manual_seed(0)
    model = ContrastiveForPreTraining(
        ContrastiveConfig(
            encoder=tiny_bert_config(vocab_size=len(tokenizer)), contrastive_loss="info_nce", mlm_weight=0.0
        )
    )
    args = ContrastiveTrainingArguments(
        output_dir=str(output_dir),
        max_steps=max_steps,
        learning_rate=1e-3,
        report_to="none",
        disable_tqdm=True,
        use_cpu=True,
        **{"per_device_train_batch_size": 4, "seed": 0, **extra_args},
    )
    collator = ContrastiveDataCollator(tokenizer, augmentation=views, mlm=False, max_length=16, seed=0)
    return ContrastiveTrainer(
        model=model, args=args, train_dataset=Dataset.from_dict({"text": list(sentences)}), data_collator=collator
    )


DUAL_ENCODER_VOCAB = 8192


def make_dual_encoder(share_encoders=False, vocab_size=DUAL_ENCODER_VOCAB, **overrides) -> DualEncoderModel:
    encoder = tiny_bert_config(vocab_size=vocab_size, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return DualEncoderModel(DualEncoderConfig(query_encoder=encoder, share_encoders=share_encoders, **overrides))


def snli_triples(count: int) -> list[dict[str, str]]:
    with open(DEMO_DATA / "nli_sample.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))[:count]
    return [{"query": r["sent0"], "positive": r["sent1"], "hard_negative": r["hard_neg"]} for r in rows]


def make_dual_encoder_trainer(tokenizer, tmp_path, count=32, eval_dataset=None, loss=None, **arguments):
    arguments = {"learning_rate": 1e-3, "save_strategy": "no", **arguments}
    model = make_dual_encoder(vocab_size=len(tokenizer))
    columns = ("query", "positive", "hard_negative")
    lengths = {"max_query_length": 64, "max_passage_length": 64}  # the tiny encoders' 64 positions
    dataset = tokenize_query_passage_pairs(Dataset.from_list(snli_triples(count)), tokenizer, columns, **lengths)
    args = ContrastiveTrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=8,
        report_to="none",
        disable_tqdm=True,
        use_cpu=True,
        seed=0,
        **arguments,
    )
    return ContrastiveTrainer(
        model=model,
        args=args,
        train_dataset=dataset,
        eval_dataset=eval_dataset,
        data_collator=QueryPassageCollator(tokenizer, **lengths),
        processing_class=tokenizer,
        loss=loss,
    )


MULTITASK_TASKS = [
    TaskSpec("sst", "classification"),
    TaskSpec("mrpc", "pair_classification", head="uv_absdiff_product", loss_weight=0.5),
    TaskSpec("stsb", "pair_regression", head="uv_absdiff"),
]


WORDS = "the a good bad film movie plot actor great awful story music boring fun long short".split()


def tiny_multitask_model(tokenizer, tasks=MULTITASK_TASKS, seed: int = 0, dropout: float = 0.0) -> MultitaskModel:
    torch.manual_seed(seed)
    encoder = tiny_bert_config(
        vocab_size=len(tokenizer), hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout
    )
    sentence_encoder = ContrastiveModel(ContrastiveConfig(encoder=encoder, pooler_type="mean"))
    return MultitaskModel.from_sentence_encoder(sentence_encoder, tasks, classifier_dropout=dropout)


def multitask_sentence(rng) -> str:
    return " ".join(rng.choice(WORDS, size=int(rng.integers(3, 9))))


def multitask_toy_data(size: int, seed: int = 0) -> dict[str, datasets.Dataset]:
    rng = np.random.default_rng(seed)
    return {
        "sst": datasets.Dataset.from_dict(
            {"sentence": [multitask_sentence(rng) for _ in range(size)], "label": rng.integers(0, 2, size).tolist()}
        ),
        "mrpc": datasets.Dataset.from_dict(
            {
                "sentence1": [multitask_sentence(rng) for _ in range(size)],
                "sentence2": [multitask_sentence(rng) for _ in range(size)],
                "label": rng.integers(0, 2, size).tolist(),
            }
        ),
        "stsb": datasets.Dataset.from_dict(
            {
                "sentence1": [multitask_sentence(rng) for _ in range(size)],
                "sentence2": [multitask_sentence(rng) for _ in range(size)],
                "label": rng.uniform(0, 1, size).tolist(),
            }
        ),
    }


class CountedInfoNCE(InfoNCELoss):
    """InfoNCE under a name of its own, counting the batches it scores (a loss a user registers or hands the
    trainer)."""

    name = "counted_info_nce"
    description = "InfoNCE, counted (a test's)"
    calls = 0

    def compute(self, views):
        self.calls += 1
        return super().compute(views)


def multitask_trainer(model, tokenizer, tmp_path, data=None, loss=None, **overrides) -> MultitaskTrainer:
    settings = dict(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=4,
        max_steps=3,
        learning_rate=0.1,
        optim="sgd",
        lr_scheduler_type="constant",
        max_grad_norm=0.0,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        use_cpu=True,
        task_schedule="super_batch",
        disable_tqdm=True,
    )
    settings.update(overrides)
    data = multitask_toy_data(8) if data is None else data
    return MultitaskTrainer(
        model=model,
        args=MultitaskTrainingArguments(**settings),
        train_dataset=data,
        eval_dataset=data,
        processing_class=tokenizer,
        loss=loss,
    )


DEMO = REPO_ROOT / "examples" / "demo"


SNLI_TRIPLES = DEMO_DATA / "nli_sample.csv"


def snli_slice(path, rows: int) -> str:
    """The first ``rows`` SNLI triples (sent0,sent1,hard_neg) as a csv of their own."""
    with open(SNLI_TRIPLES, newline="", encoding="utf-8") as source:
        lines = list(csv.reader(source))[: rows + 1]
    with open(path, "w", newline="", encoding="utf-8") as target:
        csv.writer(target).writerows(lines)
    return str(path)


def run_simcse_in_process(tmp_path, mode: str, *extra: str) -> tuple[str, object]:
    """examples/run_simcse.py in this process (`in_process.run_script`) on a tiny BERT from a config, 3 steps: its
    output and its output folder."""
    from helpers.in_process import run_script

    encoder_config = tmp_path / "encoder.json"
    encoder_config.write_text(json.dumps({**tiny_bert_config().to_dict(), "model_type": "bert"}))
    output_dir = tmp_path / f"out-{mode}"
    argv = [
        "--mode", mode,
        "--config_name", str(encoder_config),
        "--tokenizer_name", str(DEMO / "tokenizer"),
        "--stsb_dev_file", str(DEMO / "data" / "sts-dev.csv"),
        "--max_steps", "3",
        "--logging_steps", "1",
        "--per_device_train_batch_size", "16",
        "--report_to", "none",
        "--save_strategy", "no",
        "--use_cpu", "true",
        "--output_dir", str(output_dir),
        *extra,
    ]  # fmt: skip
    return run_script("run_simcse", argv, cwd=tmp_path).output, output_dir


def saved_settings(output_dir) -> tuple[dict, object, list[dict]]:
    config = json.loads((output_dir / "contrastive_config.json").read_text())  # the model's own settings
    training_args = torch.load(output_dir / "training_args.bin", weights_only=False)
    history = json.loads((output_dir / "trainer_state.json").read_text())["log_history"]
    return config, training_args, history


PAIRS = 300


HELD_OUT = 100


def write_snli_sample(path, rows=PAIRS, names=("sent0", "sent1", "hard_neg")):
    with open(DEMO_DATA / "nli_sample.csv", newline="") as handle:
        sample = list(csv.DictReader(handle))[:rows]
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(names)
        writer.writerows([row["sent0"], row["sent1"], row["hard_neg"]][: len(names)] for row in sample)


def dpr_arguments(repo_root, tmp_path, *extra, data=()):
    """run_dpr.py's command line after the script: a tiny BERT from scratch, 4 steps of batch 16."""
    encoder_config = tmp_path / "encoder.json"
    config = tiny_bert_config().to_dict()
    config["model_type"] = "bert"
    encoder_config.write_text(json.dumps(config))
    return [
        "--config_name", str(encoder_config),
        "--tokenizer_name", str(repo_root / "examples" / "demo" / "tokenizer"),
        *data,
        "--max_query_length", "32",
        "--max_passage_length", "32",
        "--max_steps", "4",
        "--logging_steps", "1",
        "--per_device_train_batch_size", "16",
        "--learning_rate", "1e-3",
        "--report_to", "none",
        "--save_strategy", "no",
        "--use_cpu", "true",
        "--output_dir", str(tmp_path / "out"),
        *extra,
    ]  # fmt: skip


def run_dpr_in_process(repo_root, tmp_path, *extra, data=()):
    """The script's main(argv) in this process (no second interpreter start-up): the same code path as the CLI."""
    example_script("run_dpr").main(dpr_arguments(repo_root, tmp_path, *extra, data=data))
    return tmp_path / "out"


def tiny_encoder_folder(tokenizer, folder, seed: int = 0) -> str:
    """A tiny BERT (no dropout; weights wide enough that its poolers give different vectors) with ``tokenizer``,
    saved as a plain transformers checkpoint in ``folder``."""
    from transformers import BertModel

    torch.manual_seed(seed)
    config = tiny_bert_config(
        vocab_size=len(tokenizer), initializer_range=0.3, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0
    )
    BertModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def sentence_transformers_folder(folder, modules: list, **options) -> str:
    """A SentenceTransformer of sentence-transformers ``modules`` (and its ``options``: prompts...) saved by
    sentence-transformers itself into ``folder``."""
    from sentence_transformers import SentenceTransformer

    SentenceTransformer(modules=modules, device="cpu", **options).save(str(folder))
    return str(folder)
