"""Multitask fine-tuning of a sentence encoder: task specs, heads and the shared-encoder model.

One [`ContrastiveModel`] (encoder + pooler) is shared by every task; each task has a small head on the sentence
embeddings (as in the CS224N minBERT multitask projects, and SBERT's fine-tuning heads):

- `classification` (one sentence, e.g. SST-2): head `linear`, dropout and a linear layer on u; cross-entropy.
- `pair_classification` (e.g. MRPC paraphrase): a linear layer on pair features, `concat` [u, v], `uv_absdiff`
  [u, v, abs(u - v)] (SBERT's) or `uv_absdiff_product` [u, v, abs(u - v), u * v] (InferSent's); cross-entropy.
- `pair_regression` (e.g. STS-B): `cosine`, cos(u, v) with no parameters (SBERT's STS-B recipe), or a pair-feature
  head with one output; mean-squared error.
- `contrastive` (e.g. NLI entailment pairs, with or without a hard negative): no head; the encoder config's
  registered in-batch loss (``contrastive_loss``, its temperature and similarity: `models.objectives`), as
  sentence-transformers trains pairs beside other objectives with MultipleNegativesRankingLoss. Its figure is the
  in-batch top-1 accuracy: how often a query's own positive scores highest among the batch's passages.

The two sentences of a pair (and a contrastive task's hard negatives) are encoded separately by the same encoder (a
siamese network), as a ``(batch, 2 or more, length)`` batch. `MultitaskModel.save_pretrained` writes the whole model
(encoder and heads; reload it with `MultitaskModel.from_pretrained`), and `save_sentence_encoder` writes the encoder
alone as a normal contrastive_hf checkpoint, which loads with `AutoModel`, `SentenceTransformer` and fine-tuning
scripts like any other.

The model lives here, with every other model type a checkpoint names, so that ``import contrastive_hf`` registers it
with the Auto classes; the recipe (`contrastive_hf.recipes.multitask`) keeps the task datasets, collators and batch
schedules (``data``), the training loop (``trainer``) and PCGrad.
"""

from __future__ import annotations

import copy
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedConfig, PreTrainedModel
from transformers.utils import ModelOutput

from .checkpoint_contents import checkpoint_model_type
from .checkpoint_files import save_tokenizer
from .configuration_contrastive import ContrastiveConfig, without_sub_config_paths
from .heads import init_weights
from .losses import similarity_logits
from .modeling_contrastive import ContrastiveModel
from .objectives import ContrastiveLoss, build_loss, build_registered_loss
from .transformers_compat import SubConfigSpec, build_sub_config

__all__ = [
    "TASK_TYPES",
    "HEAD_TYPES",
    "TaskSpec",
    "MultitaskConfig",
    "MultitaskModel",
    "MultitaskOutput",
    "SentenceClassificationHead",
    "PairHead",
    "CosineSimilarityHead",
    "load_sentence_encoder",
]

logger = logging.getLogger(__name__)

TASK_TYPES = ("classification", "pair_classification", "pair_regression", "contrastive")
PAIR_FEATURES = {"concat": 2, "uv_absdiff": 3, "uv_absdiff_product": 4}  # head -> how many d-sized parts
HEAD_TYPES = ("linear", *PAIR_FEATURES, "cosine", "none")
DEFAULT_HEADS = {
    "classification": "linear",
    "pair_classification": "uv_absdiff",
    "pair_regression": "cosine",
    "contrastive": "none",
}


@dataclass
class TaskSpec:
    """One task of a multitask model.

    Args:
        name: the task's key in batches, metrics (``eval_<name>_accuracy``) and the head's module name; letters,
            digits and underscores.
        type: `classification` (one sentence), `pair_classification` or `pair_regression` (two sentences), or
            `contrastive` (a query, its positive and any hard negatives, scored by the in-batch loss).
        num_labels: number of classes (classification types); regression has one output, a contrastive task none.
        head: `linear` (classification), `concat`, `uv_absdiff`, `uv_absdiff_product` or `cosine` (pairs; cosine
            for regression only), `none` (contrastive). Default: `linear`, `uv_absdiff`, `cosine` or `none` by
            type.
        loss_weight: the task's weight in the summed loss (and in PCGrad's per-task gradients).
    """

    name: str
    type: str
    num_labels: int = 2
    head: str | None = None
    loss_weight: float = 1.0

    def __post_init__(self):
        if not self.name or not self.name.replace("_", "a").isalnum():
            raise ValueError(f"Task name {self.name!r} must be non-empty letters, digits and underscores.")
        if self.type not in TASK_TYPES:
            raise ValueError(f"Task {self.name!r}: unknown type {self.type!r}; choose one of {', '.join(TASK_TYPES)}.")
        if self.head is None:
            self.head = DEFAULT_HEADS[self.type]
        if self.type == "pair_regression":
            self.num_labels = 1
        elif self.type == "contrastive":
            self.num_labels = 0
        elif self.num_labels < 2:
            raise ValueError(
                f"Task {self.name!r}: a classification task needs num_labels >= 2, got {self.num_labels}."
            )
        allowed = {
            "classification": ("linear",),
            "pair_classification": tuple(PAIR_FEATURES),
            "pair_regression": (*PAIR_FEATURES, "cosine"),
            "contrastive": ("none",),
        }[self.type]
        if self.head not in allowed:
            raise ValueError(
                f"Task {self.name!r} ({self.type}) cannot use head {self.head!r}; choose one of {', '.join(allowed)}."
            )
        if not self.loss_weight >= 0:
            raise ValueError(f"Task {self.name!r}: loss_weight must be >= 0, got {self.loss_weight}.")

    @property
    def is_pair(self) -> bool:
        return self.type != "classification"

    @property
    def is_regression(self) -> bool:
        return self.type == "pair_regression"

    @property
    def is_contrastive(self) -> bool:
        return self.type == "contrastive"

    def to_dict(self) -> dict:
        return asdict(self)


class MultitaskConfig(PreTrainedConfig):
    r"""
    Configuration of a [`MultitaskModel`]: the shared sentence encoder's [`ContrastiveConfig`] and the tasks.

    Args:
        contrastive (`ContrastiveConfig` or `dict`, *optional*):
            The shared encoder (encoder config, pooler, projection).
        tasks (`list[dict]`, *optional*):
            One [`TaskSpec`] per task, as dicts (`TaskSpec(...).to_dict()`); the order is the order of the heads,
            of the schedules and of PCGrad's tasks.
        classifier_dropout (`float`, *optional*):
            Dropout on the embeddings before a head's linear layer; the encoder's `hidden_dropout_prob` when unset.
    """

    model_type = "contrastive_multitask"
    if SubConfigSpec is not None:
        sub_configs_defaults = {"contrastive": SubConfigSpec(config_class=ContrastiveConfig)}
    else:  # transformers < 5.20: the sub-config is built in __post_init__
        sub_configs = {"contrastive": ContrastiveConfig}

    contrastive: ContrastiveConfig | dict | None = None
    tasks: list | None = None
    classifier_dropout: float | None = None

    def __post_init__(self, **kwargs):
        if SubConfigSpec is None:
            self.contrastive = build_sub_config(self.contrastive, ContrastiveConfig)
        super().__post_init__(**kwargs)
        specs = [spec if isinstance(spec, TaskSpec) else TaskSpec(**spec) for spec in (self.tasks or [])]
        names = [spec.name for spec in specs]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"Task names must be unique; {', '.join(duplicates)} appear more than once.")
        self.tasks = [spec.to_dict() for spec in specs]
        if self.classifier_dropout is not None and not 0 <= self.classifier_dropout < 1:
            raise ValueError(f"classifier_dropout must be in [0, 1), got {self.classifier_dropout}.")

    @property
    def task_specs(self) -> list[TaskSpec]:
        return [TaskSpec(**spec) for spec in self.tasks]

    def to_dict(self) -> dict:
        return without_sub_config_paths(super().to_dict())

    def get_text_config(self, decoder=None, encoder=None) -> PreTrainedConfig:
        """The encoder's config, where transformers looks for `vocab_size`, `hidden_size` and the like."""
        return self.contrastive.encoder

    @property
    def hidden_size(self) -> int:
        return self.contrastive.encoder.hidden_size


@dataclass
class MultitaskOutput(ModelOutput):
    """
    Output of [`MultitaskModel`].

    Args:
        loss (`torch.FloatTensor` of shape `()`, *optional*):
            One task: its loss. Several (``task_batches``): the sum of ``loss_weight * loss`` over the tasks.
        logits (`torch.FloatTensor` of shape `(batch_size, num_labels)`, *optional*):
            One task: the head's outputs (`(batch_size, 1)` for regression: the predicted score; for a contrastive
            task, 1.0 where a query's own positive scored highest among the batch's passages, else 0.0).
        task_losses (`dict[str, torch.FloatTensor]`, *optional*):
            Several tasks: each task's unweighted loss.
        task_logits (`dict[str, torch.FloatTensor]`, *optional*):
            Several tasks: each task's logits.
    """

    loss: torch.FloatTensor | None = None
    logits: torch.FloatTensor | None = None
    task_losses: dict[str, torch.FloatTensor] | None = None
    task_logits: dict[str, torch.FloatTensor] | None = None


class SentenceClassificationHead(nn.Module):
    """Dropout and a linear layer on one sentence embedding: ``(B, d) -> (B, num_labels)``."""

    def __init__(self, embedding_size: int, num_labels: int, dropout: float):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(embedding_size, num_labels)

    def forward(self, embeddings: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.dropout(embeddings))


class PairHead(nn.Module):
    """A linear layer on features of a sentence pair ``(B, 2, d) -> (B, num_labels)``: ``concat`` [u, v],
    ``uv_absdiff`` [u, v, abs(u - v)] (SBERT's classification objective) or ``uv_absdiff_product``
    [u, v, abs(u - v), u * v] (InferSent)."""

    def __init__(self, features: str, embedding_size: int, num_labels: int, dropout: float):
        super().__init__()
        self.features = features
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(PAIR_FEATURES[features] * embedding_size, num_labels)

    def forward(self, embeddings: torch.Tensor) -> torch.Tensor:
        u, v = embeddings[:, 0], embeddings[:, 1]  # (B, d) each
        parts = [u, v]
        if self.features != "concat":
            parts.append((u - v).abs())
        if self.features == "uv_absdiff_product":
            parts.append(u * v)
        return self.classifier(self.dropout(torch.cat(parts, dim=-1)))  # (B, num_labels)


class CosineSimilarityHead(nn.Module):
    """cos(u, v) as the predicted score, ``(B, 2, d) -> (B, 1)``, in float32; no parameters. Regression targets
    should then lie in [-1, 1] (SBERT divides STS-B's 0-5 scores by 5)."""

    def forward(self, embeddings: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device_type=embeddings.device.type, enabled=False):
            embeddings = embeddings.float()
            return F.cosine_similarity(embeddings[:, 0], embeddings[:, 1], dim=-1).unsqueeze(-1)


def in_batch_hits(embeddings: torch.Tensor, similarity: str) -> torch.Tensor:
    """``(B, 1)``: 1.0 where query i's own positive (``embeddings[i, 1]``) scores highest among every passage of the
    batch (each row's views 1..: the positives and hard negatives), else 0.0; ``embeddings`` ``(B, S, d)``."""
    queries, passages = embeddings[:, 0], embeddings[:, 1:].reshape(-1, embeddings.shape[-1])  # (B, d), (B(S-1), d)
    best = similarity_logits(queries.detach(), passages.detach(), similarity, 1.0).argmax(dim=1)  # (B,)
    own = torch.arange(embeddings.shape[0], device=embeddings.device) * (embeddings.shape[1] - 1)
    return (best == own).float().unsqueeze(-1)


def _build_head(spec: TaskSpec, embedding_size: int, dropout: float) -> nn.Module:
    if spec.head == "linear":
        return SentenceClassificationHead(embedding_size, spec.num_labels, dropout)
    if spec.head == "cosine":
        return CosineSimilarityHead()
    return PairHead(spec.head, embedding_size, spec.num_labels, dropout)


def load_sentence_encoder(name_or_path: str | os.PathLike, **config_overrides) -> ContrastiveModel:
    """A [`ContrastiveModel`] from a contrastive_hf checkpoint (a `ContrastiveModel` or `ContrastiveForPreTraining`,
    e.g. the output of ``examples/run_clear.py``; its MLM head is dropped) or from any other pretrained encoder,
    wrapped with ``config_overrides`` (``pooler_type="mean"``...). Overrides given for a contrastive_hf checkpoint
    replace its saved settings."""
    model_type = checkpoint_model_type(name_or_path)
    if model_type == ContrastiveConfig.model_type:
        return ContrastiveModel.from_pretrained(name_or_path, **config_overrides)
    if model_type == MultitaskConfig.model_type:
        raise ValueError(
            f"{name_or_path} is a multitask checkpoint: load it with MultitaskModel.from_pretrained, or take its "
            "encoder with MultitaskModel.from_pretrained(path).contrastive."
        )
    return ContrastiveModel.from_encoder_pretrained(name_or_path, **config_overrides)


class MultitaskModel(PreTrainedModel):
    r"""
    A shared sentence encoder ([`ContrastiveModel`]) with one head per task ([`TaskSpec`]).

    ``model(task="sst", input_ids=..., labels=...)`` runs one task: ``input_ids`` is ``(batch, length)`` for a
    one-sentence task and ``(batch, 2, length)`` for a pair task. ``model(task_batches={"sst": {...}, "mrpc":
    {...}})`` runs several in one call (one forward pass, as DDP wants) and returns the weighted sum of their losses
    and each task's loss.

    Example:

    ```python
    >>> from contrastive_hf.models.modeling_multitask import MultitaskModel, TaskSpec
    >>> tasks = [TaskSpec("sst", "classification"), TaskSpec("stsb", "pair_regression")]
    >>> encoder = "sentence-transformers/all-MiniLM-L6-v2"  # or a contrastive_hf checkpoint (SimCSE, CLEAR...)
    >>> model = MultitaskModel.from_sentence_encoder(encoder, tasks, pooler_type="mean")
    ```
    """

    config_class = MultitaskConfig
    base_model_prefix = "contrastive"
    supports_gradient_checkpointing = True
    _supports_sdpa = True

    def __init__(self, config: MultitaskConfig):
        super().__init__(config)
        if not config.tasks:
            raise ValueError("A MultitaskModel needs at least one task: MultitaskConfig(tasks=[TaskSpec(...), ...]).")
        self.contrastive = ContrastiveModel(config.contrastive)
        self.config.contrastive = self.contrastive.config
        self.task_specs = {spec.name: spec for spec in config.task_specs}
        dropout = config.classifier_dropout
        if dropout is None:
            dropout = getattr(config.contrastive.encoder, "hidden_dropout_prob", 0.1)
        size = config.contrastive.embedding_size
        self.heads = nn.ModuleDict(
            {name: _build_head(spec, size, dropout) for name, spec in self.task_specs.items() if spec.head != "none"}
        )
        # the contrastive tasks' loss: the encoder config's registered loss (None until it is registered)
        contrastive = any(spec.is_contrastive for spec in self.task_specs.values())
        self.loss_fn: ContrastiveLoss | None = build_registered_loss(config.contrastive) if contrastive else None
        self.post_init()

    @torch.no_grad()
    def _init_weights(self, module):
        init_weights(module, getattr(self.config.contrastive.encoder, "initializer_range", 0.02))

    @classmethod
    def from_sentence_encoder(
        cls,
        encoder: ContrastiveModel | str | os.PathLike,
        tasks: Sequence[TaskSpec | dict],
        classifier_dropout: float | None = None,
        **config_overrides,
    ) -> MultitaskModel:
        """A multitask model on a pretrained encoder, with new heads: ``encoder`` is a `ContrastiveModel`, a
        contrastive_hf checkpoint (e.g. after SimCSE or CLEAR pre-training: "CL then multitask") or any pretrained
        encoder (see `load_sentence_encoder`; ``config_overrides`` such as ``pooler_type`` go there)."""
        if not isinstance(encoder, ContrastiveModel):
            encoder = load_sentence_encoder(encoder, **config_overrides)
        elif config_overrides:
            raise ValueError("config_overrides apply when loading an encoder by name; this one is already built.")
        config = MultitaskConfig(  # a copy: building the model resets its encoder's attention, not the live one's
            contrastive=copy.deepcopy(encoder.config),
            tasks=[spec.to_dict() if isinstance(spec, TaskSpec) else dict(spec) for spec in tasks],
            classifier_dropout=classifier_dropout,
        )
        model = cls(config)  # a fresh encoder, replaced by the pretrained one below; new heads
        model.contrastive = encoder
        model.config.contrastive = encoder.config
        model.config._name_or_path = encoder.config._name_or_path
        return model

    def get_input_embeddings(self) -> nn.Module:
        return self.contrastive.get_input_embeddings()

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.contrastive.set_input_embeddings(value)

    def embed(self, input_ids, attention_mask=None, token_type_ids=None, lengths=None) -> torch.Tensor:
        """Sentence embeddings ``(B, d)`` or ``(B, 2, d)``, as the heads see them (the projection only where the
        encoder's config keeps it at inference); ``lengths``: each sentence's real tokens on the host."""
        project = self.config.contrastive.projection_at_inference
        embedded = self.contrastive.embed(input_ids, attention_mask, token_type_ids, project=project, lengths=lengths)
        return embedded.pooler_output

    def _task_forward(
        self, task: str, input_ids, attention_mask, token_type_ids, labels, lengths=None, sentence_ids=None
    ):
        if task not in self.task_specs:
            raise ValueError(f"Unknown task {task!r}; this model has {', '.join(self.task_specs)}.")
        spec = self.task_specs[task]
        expected = 3 if spec.is_pair else 2
        if input_ids is None or input_ids.dim() != expected:
            shape = {"classification": "(batch, length)", "contrastive": "(batch, 2 + hard negatives, length)"}
            got = None if input_ids is None else tuple(input_ids.shape)
            raise ValueError(
                f"Task {task!r} ({spec.type}) takes input_ids of shape "
                f"{shape.get(spec.type, '(batch, 2, length)')}, got {got}."
            )
        embeddings = self.embed(input_ids, attention_mask, token_type_ids, lengths)
        if spec.is_contrastive:
            if self.loss_fn is None:  # registered since the model was built, or the registry's error naming it
                self.loss_fn = build_loss(self.config.contrastive)
            loss, _ = self.loss_fn(embeddings, sentence_ids)
            return loss, in_batch_hits(embeddings, self.loss_fn.similarity)
        logits = self.heads[task](embeddings)
        loss = None
        if labels is not None:
            if spec.is_regression:
                loss = F.mse_loss(logits.squeeze(-1).float(), labels.float())
            else:
                loss = F.cross_entropy(logits.float(), labels.view(-1).long())
        return loss, logits

    def forward(
        self,
        task: str | None = None,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        task_batches: Mapping[str, Mapping[str, torch.Tensor]] | None = None,
        input_lengths=None,
        sentence_ids: torch.Tensor | None = None,
        return_dict: bool | None = None,
    ) -> MultitaskOutput | tuple:
        r"""
        task (`str`):
            The task of a one-task batch.
        input_ids (`torch.LongTensor` of shape `(batch_size, length)`, or `(batch_size, 2, length)` for pairs):
            Token ids of the sentences (`(batch_size, 2 + k, length)` for a contrastive task: query, positive, k hard
            negatives).
        labels (`torch.LongTensor` or `torch.FloatTensor` of shape `(batch_size,)`, *optional*):
            Class indices, or target scores for regression; a contrastive task needs none (its positives are its
            views 1), and `TaskCollator` gives it each query's row.
        task_batches (`dict[str, dict[str, torch.Tensor]]`, *optional*):
            Several tasks at once, ``{task: {"input_ids": ..., "attention_mask": ..., "labels": ...}}``, instead of
            ``task`` and its tensors; each batch needs its labels.
        input_lengths (numpy array of shape `(batch_size,)` or `(batch_size, 2)`, *optional*):
            Each sentence's real tokens, on the host (`TaskCollator` gives them; `models.host_data`).
        sentence_ids (`torch.LongTensor` of shape `(batch_size, 2 + k)`, *optional*):
            A contrastive task's content ids of its texts: a text equal to a query's own is not its negative.
        """
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        if task_batches is not None:
            if task is not None or input_ids is not None:
                raise ValueError("Pass either task_batches (several tasks) or task and input_ids (one), not both.")
            losses, logits, total = {}, {}, None
            for name, batch in task_batches.items():
                spec = self.task_specs.get(name)
                if batch.get("labels") is None and not (spec is not None and spec.is_contrastive):
                    raise ValueError(f"task_batches[{name!r}] has no labels: task_batches is for training.")
                loss, logits[name] = self._task_forward(
                    name,
                    batch["input_ids"],
                    batch.get("attention_mask"),
                    batch.get("token_type_ids"),
                    batch.get("labels"),
                    batch.get("input_lengths"),
                    batch.get("sentence_ids"),
                )
                losses[name] = loss
                weighted = self.task_specs[name].loss_weight * loss
                total = weighted if total is None else total + weighted
            output = MultitaskOutput(loss=total, task_losses=losses, task_logits=logits)
        else:
            if task is None:
                raise ValueError("Say which task the batch is for: model(task=..., input_ids=...).")
            loss, logits = self._task_forward(
                task, input_ids, attention_mask, token_type_ids, labels, input_lengths, sentence_ids
            )
            output = MultitaskOutput(loss=loss, logits=logits)
        return output if return_dict else output.to_tuple()

    def encode(self, sentences, tokenizer=None, **kwargs) -> torch.Tensor:
        """Sentence embeddings from the shared encoder (see `ContrastiveModel.encode`)."""
        return self.contrastive.encode(sentences, tokenizer=tokenizer, **kwargs)

    def save_sentence_encoder(self, save_directory: str | os.PathLike, tokenizer=None) -> None:
        """Save the shared encoder alone as a contrastive_hf checkpoint (loads with `AutoModel`, sentence-transformers
        and `AutoModelForSequenceClassification`, like any `ContrastiveModel`)."""
        self.contrastive.save_pretrained(save_directory)
        if tokenizer is not None:
            save_tokenizer(tokenizer, save_directory)
