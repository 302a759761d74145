"""Dual encoders for dense retrieval (DPR, Karpukhin et al., 2020), with DensePhrases' pre-batch negatives.

A query encoder and a passage encoder (or one shared encoder) map questions and passages to vectors compared by dot
product or cosine similarity. Training minimises, for each question q_i with its positive passage p_i+,

    L_i = -log  e^{s(q_i, p_i+)} / ( sum_j e^{s(q_i, p_j+)} + sum_j e^{s(q_i, p_j-)} + sum_m e^{s(q_i, e_m)} )

(DPR eq. (2) with in-batch negatives, §3.2): the other questions' positives p_j+ and every hard negative p_j- of the
batch (gathered from every device when training on several), plus the queued passages e_m of the previous batches
(DensePhrases, Lee et al., 2021, §4.2), with s = sim / temperature. A passage identical to the question's own positive
(or to the question) is never counted as its negative.

Like ``modeling_contrastive.py``, this file travels inside saved checkpoints with its relative imports, so it imports
only torch, transformers and sibling modules.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoConfig, AutoTokenizer, PreTrainedModel
from transformers.dynamic_module_utils import custom_object_save
from transformers.utils import ModelOutput

from .configuration_dual_encoder import DualEncoderConfig
from .distributed import gather_no_grad, gather_with_grad, rank, world_size
from .losses import cosine_logits, duplicate_mask
from .modeling_contrastive import SentencePooler, build_encoder

# The Auto classes a saved checkpoint maps to the shipped code (config.json's `auto_map`).
AUTO_MAP = {
    "AutoConfig": "configuration_dual_encoder.DualEncoderConfig",
    "AutoModel": "modeling_dual_encoder.DualEncoderModel",
}

__all__ = ["DualEncoderModel", "DualEncoderPreTrainedModel", "DualEncoderOutput", "dot_logits", "similarity_logits"]


@dataclass
class DualEncoderOutput(ModelOutput):
    """
    Output of [`DualEncoderModel`].

    Args:
        loss (`torch.FloatTensor` of shape `()`, *optional*):
            The training objective: the in-batch (+ hard, + pre-batch) negatives loss, the same value as `cl_loss`.
        cl_loss (`torch.FloatTensor` of shape `()`, *optional*):
            The contrastive loss, under the name `ContrastiveTrainer` logs.
        embeddings (`torch.FloatTensor` of shape `(batch_size, 1 + passages_per_query, embedding_size)`):
            Column 0: the query vectors; column 1: their positive passages' (the keys a pre-batch queue holds);
            column 2, when there are hard negatives: theirs.
        negatives_per_query (`torch.FloatTensor` of shape `()`, *optional*):
            The mean number of negatives each query's softmax counted, after duplicates were left out.
    """

    loss: torch.FloatTensor | None = None
    cl_loss: torch.FloatTensor | None = None
    embeddings: torch.FloatTensor | None = None
    negatives_per_query: torch.FloatTensor | None = None

    @property
    def mlm_loss(self) -> None:
        """Always None: a dual encoder has no MLM objective (read by GradCache, which sums the chunks' MLM losses)."""
        return None


def dot_logits(a: torch.Tensor, b: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Inner products of every row of ``a`` with every row of ``b``, divided by ``temperature``, in float32.

    DPR's scores are unnormalised and grow with the vectors' norms (a BERT [CLS] vector has a norm around 10-20),
    so they are computed in float32 also under fp16/bf16 autocast.
    """
    with torch.autocast(device_type=a.device.type, enabled=False):
        return a.float() @ b.float().T / temperature


def similarity_logits(a: torch.Tensor, b: torch.Tensor, similarity: str, temperature: float) -> torch.Tensor:
    """``(N, d), (C, d) -> (N, C)`` scores of a dual encoder: ``dot`` or ``cosine``, over ``temperature``."""
    if similarity == "dot":
        return dot_logits(a, b, temperature)
    if similarity == "cosine":
        return cosine_logits(a, b, temperature)
    raise ValueError(f"Unknown similarity {similarity!r}: use 'dot' or 'cosine'.")


class DualEncoderPreTrainedModel(PreTrainedModel):
    """Base class of dual encoders: configuration class, weight initialisation, and saving with the code."""

    config_class = DualEncoderConfig
    base_model_prefix = "dual_encoder"
    main_input_name = "query_input_ids"
    supports_gradient_checkpointing = True
    _supports_sdpa = True

    @torch.no_grad()
    def _init_weights(self, module):
        std = getattr(self.config.query_encoder, "initializer_range", 0.02)
        if isinstance(module, nn.Linear):
            module.weight.normal_(mean=0.0, std=std)
            if module.bias is not None:
                module.bias.zero_()
        elif isinstance(module, nn.LayerNorm):
            module.weight.fill_(1.0)
            module.bias.zero_()

    def save_pretrained(self, save_directory: str | os.PathLike, *args, **kwargs):
        """Save weights (safetensors), config and this package's modeling code, so that `trust_remote_code=True`
        loads the checkpoint where contrastive_hf is not installed."""
        self.config.auto_map = dict(AUTO_MAP)
        super().save_pretrained(save_directory, *args, **kwargs)
        if kwargs.get("is_main_process", True):
            custom_object_save(self, save_directory)  # copies this file and its relative imports


class DualEncoderModel(DualEncoderPreTrainedModel):
    r"""
    DPR's bi-encoder: a query encoder and a passage encoder (one shared encoder with `share_encoders=True`), each a
    transformers encoder + pooler (+ an optional linear projection), trained with in-batch negatives, hard negatives
    and, under `ContrastiveTrainer` with `prebatch_size > 0`, pre-batch negatives.

    Training batches (`contrastive_hf.dual_encoder_data.QueryPassageCollator` builds them) pad queries and passages
    separately: `query_input_ids` `(batch, query_length)` and `passage_input_ids` `(batch, 1 or 2, passage_length)`,
    the positive passage and optionally a hard negative.

    Example:

    ```python
    >>> from contrastive_hf.modeling_dual_encoder import DualEncoderModel
    >>> model = DualEncoderModel.from_encoder_pretrained("bert-base-uncased")  # two towers, dot product
    >>> queries = model.encode_queries(["who wrote hamlet?"], tokenizer=tokenizer)  # (1, 768)
    >>> passages = model.encode_passages(["Hamlet is a tragedy by William Shakespeare."], tokenizer=tokenizer)
    >>> scores = queries @ passages.T
    ```
    """

    # The batch keys whose first dimension is the batch: GradCache cuts these into chunks for `embed_views`.
    view_input_names = (
        "query_input_ids",
        "query_attention_mask",
        "query_token_type_ids",
        "passage_input_ids",
        "passage_attention_mask",
        "passage_token_type_ids",
    )

    def __init__(self, config: DualEncoderConfig):
        super().__init__(config)
        with_pooler = config.pooler_type == "cls"
        self.query_encoder = build_encoder(config.query_encoder, with_pooler)
        self.passage_encoder = None if config.share_encoders else build_encoder(config.passage_encoder, with_pooler)
        self._sync_encoder_configs()
        self.pooler = SentencePooler(config.pooler_type)
        self.query_projection = self.passage_projection = None
        if config.projection_dim:
            self.query_projection = nn.Linear(config.query_encoder.hidden_size, config.projection_dim)
            if not config.share_encoders:
                self.passage_projection = nn.Linear(config.passage_encoder.hidden_size, config.projection_dim)
        self.tokenizer = None  # set by `encode_*` callers or loaders; not saved with the weights
        self.post_init()

    def _sync_encoder_configs(self) -> None:
        # One config object per encoder, so that resizing an encoder updates the saved config.
        self.config.query_encoder = self.query_encoder.config
        if self.passage_encoder is not None:
            self.config.passage_encoder = self.passage_encoder.config

    def set_encoders(self, query_encoder: PreTrainedModel, passage_encoder: PreTrainedModel | None = None) -> None:
        """Replace the encoders (e.g. with pretrained ones); ``passage_encoder`` only when they are not shared."""
        if (passage_encoder is None) != self.config.share_encoders:
            raise ValueError(
                "set_encoders takes a passage encoder exactly when share_encoders=False "
                f"(share_encoders={self.config.share_encoders})."
            )
        self.query_encoder = query_encoder
        self.passage_encoder = passage_encoder
        self._sync_encoder_configs()

    def get_input_embeddings(self) -> nn.Module:
        return self.query_encoder.get_input_embeddings()

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.query_encoder.set_input_embeddings(value)

    def resize_token_embeddings(self, new_num_tokens: int | None = None, **kwargs) -> nn.Embedding:
        """Resize the vocabulary of both encoders (they read the same tokenizer's ids)."""
        embeddings = self.query_encoder.resize_token_embeddings(new_num_tokens, **kwargs)
        if self.passage_encoder is not None:
            self.passage_encoder.resize_token_embeddings(new_num_tokens, **kwargs)
        self._sync_encoder_configs()
        return embeddings

    # ------------------------------------------------------------------------------------------------------------
    # Embedding
    # ------------------------------------------------------------------------------------------------------------

    def _embed(
        self,
        encoder: PreTrainedModel,
        projection: nn.Linear | None,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None,
        token_type_ids: torch.Tensor | None,
    ) -> torch.Tensor:
        """``(..., L)`` token ids -> ``(..., d)`` vectors through one encoder, the pooler and the projection."""
        leading = input_ids.shape[:-1]
        flat = lambda tensor: None if tensor is None else tensor.reshape(-1, tensor.shape[-1])  # noqa: E731
        input_ids, attention_mask, token_type_ids = flat(input_ids), flat(attention_mask), flat(token_type_ids)
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        encoder_kwargs = {"input_ids": input_ids, "attention_mask": attention_mask, "return_dict": True}
        if token_type_ids is not None:
            encoder_kwargs["token_type_ids"] = token_type_ids
        if self.pooler.needs_hidden_states:
            encoder_kwargs["output_hidden_states"] = True
        pooled = self.pooler(encoder(**encoder_kwargs), attention_mask)  # (N, h)
        if projection is not None:
            pooled = projection(pooled)
        return pooled.reshape(*leading, pooled.shape[-1])

    def embed_queries(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Query vectors: ``(..., L)`` token ids -> ``(..., embedding_size)``, with gradients."""
        return self._embed(self.query_encoder, self.query_projection, input_ids, attention_mask, token_type_ids)

    def embed_passages(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Passage vectors: ``(..., L)`` token ids -> ``(..., embedding_size)``, with gradients."""
        encoder = self.query_encoder if self.passage_encoder is None else self.passage_encoder
        projection = self.query_projection if self.config.share_encoders else self.passage_projection
        return self._embed(encoder, projection, input_ids, attention_mask, token_type_ids)

    def embed_views(
        self,
        query_input_ids: torch.Tensor,
        query_attention_mask: torch.Tensor | None = None,
        query_token_type_ids: torch.Tensor | None = None,
        passage_input_ids: torch.Tensor | None = None,
        passage_attention_mask: torch.Tensor | None = None,
        passage_token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The ``(B, 1 + P, d)`` embeddings of a batch: its queries, then each query's P passages (positive first).

        ``passage_*`` tensors are ``(B, P, Lp)``, or ``(B, Lp)`` for one passage per query. Queries and passages are
        encoded in separate passes, each padded to its own length.
        """
        if passage_input_ids is None:
            raise ValueError(
                "A training batch needs passage_input_ids: build batches with "
                "contrastive_hf.dual_encoder_data.QueryPassageCollator, or encode one side with embed_queries / "
                "embed_passages."
            )
        if passage_input_ids.dim() == 2:  # one passage per query
            unsqueeze = lambda tensor: None if tensor is None else tensor.unsqueeze(1)  # noqa: E731
            passage_input_ids = unsqueeze(passage_input_ids)
            passage_attention_mask = unsqueeze(passage_attention_mask)
            passage_token_type_ids = unsqueeze(passage_token_type_ids)
        if passage_input_ids.dim() != 3 or passage_input_ids.shape[0] != query_input_ids.shape[0]:
            raise ValueError(
                f"passage_input_ids must be (batch, passages per query, length) with the queries' batch size "
                f"{query_input_ids.shape[0]}, got shape {tuple(passage_input_ids.shape)}."
            )
        queries = self.embed_queries(query_input_ids, query_attention_mask, query_token_type_ids)  # (B, d)
        passages = self.embed_passages(passage_input_ids, passage_attention_mask, passage_token_type_ids)  # (B, P, d)
        return torch.cat([queries.unsqueeze(1), passages], dim=1)  # (B, 1 + P, d)

    # ------------------------------------------------------------------------------------------------------------
    # Loss
    # ------------------------------------------------------------------------------------------------------------

    def compute_contrastive_loss(
        self,
        embeddings: torch.Tensor,
        sentence_ids: torch.Tensor | None = None,
        extra_negatives: torch.Tensor | None = None,
        extra_negative_ids: torch.Tensor | None = None,
        gather_across_devices: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """DPR's loss on ``(B, S, d)`` embeddings (S = 2: query, positive; S = 3: + hard negative).

        Args:
            embeddings: the output of `embed_views`.
            sentence_ids: optional ``(B, S)`` ids of the texts (the collator's content hashes): a column holding the
                same text as a query or its positive is left out of that query's negatives.
            extra_negatives: optional ``(K, d)`` negatives for every query (DensePhrases' pre-batch queue).
            extra_negative_ids: optional ``(K,)`` ids of the extra negatives, for the same duplicate masking.
            gather_across_devices: with several processes, score this process's queries against the passages of
                every process (a differentiable all-gather; the mean over processes of this loss is the global
                batch's loss, which DDP's gradient averaging takes).

        Returns:
            ``(loss, negatives_per_query)``: the mean of the local queries' losses, and the mean number of negatives
            in their softmax.
        """
        batch_size, num_columns = embeddings.shape[:2]
        if num_columns not in (2, 3):
            raise ValueError(
                f"The dual encoder's loss takes (query, positive) or (query, positive, hard negative) columns, got "
                f"{num_columns} columns."
            )
        everyone, everyone_ids, offset = embeddings, sentence_ids, 0
        if gather_across_devices and world_size() > 1:
            everyone = gather_with_grad(embeddings)  # (W * B, S, d), rank order
            everyone_ids = None if sentence_ids is None else gather_no_grad(sentence_ids)
            offset = rank() * batch_size
        queries = embeddings[:, 0]  # (B, d)
        columns = [everyone[:, 1]] + ([everyone[:, 2]] if num_columns == 3 else [])  # positives, hard negatives
        has_extra = extra_negatives is not None and extra_negatives.shape[0] > 0
        if has_extra:
            columns.append(extra_negatives.to(queries.dtype))
        keys = torch.cat(columns, dim=0)  # (C, d)
        logits = similarity_logits(queries, keys, self.config.similarity, self.config.temperature)  # (B, C)
        labels = torch.arange(batch_size, device=queries.device) + offset

        masked = torch.zeros_like(logits, dtype=torch.bool)
        if sentence_ids is not None:
            column_ids = [everyone_ids[:, 1]] + ([everyone_ids[:, 2]] if num_columns == 3 else [])
            if has_extra and extra_negative_ids is not None:
                column_ids.append(extra_negative_ids.to(everyone_ids.device))
            column_ids = torch.cat(column_ids)  # the queue's columns stay unmasked when their ids are unknown
            mask = duplicate_mask(sentence_ids[:, :2], column_ids, labels)  # rows stand for (query, positive)
            masked[:, : mask.shape[1]] = mask
            logits = logits.masked_fill(masked, float("-inf"))
        loss = F.cross_entropy(logits, labels)
        negatives_per_query = (keys.shape[0] - 1 - masked.sum(dim=1)).float().mean().detach()
        return loss, negatives_per_query

    def forward(
        self,
        query_input_ids: torch.Tensor | None = None,
        query_attention_mask: torch.Tensor | None = None,
        query_token_type_ids: torch.Tensor | None = None,
        passage_input_ids: torch.Tensor | None = None,
        passage_attention_mask: torch.Tensor | None = None,
        passage_token_type_ids: torch.Tensor | None = None,
        sentence_ids: torch.Tensor | None = None,
        return_loss: bool = True,
        gather_across_devices: bool = False,
        extra_negatives: torch.Tensor | None = None,
        extra_negative_ids: torch.Tensor | None = None,
        cached_embedding_gradients: torch.Tensor | None = None,
        mlm_loss_share: float = 1.0,
        return_dict: bool | None = None,
    ) -> DualEncoderOutput | tuple:
        r"""
        query_input_ids (`torch.LongTensor` of shape `(batch_size, query_length)`):
            The questions.
        passage_input_ids (`torch.LongTensor` of shape `(batch_size, 1 or 2, passage_length)`):
            Each question's positive passage, then optionally its hard negative.
        sentence_ids (`torch.LongTensor` of shape `(batch_size, 2 or 3)`, *optional*):
            Ids of the texts in the same columns (query, positive, hard negative), for duplicate masking.
        return_loss (`bool`, defaults to `True`):
            Compute the loss; otherwise only the embeddings are returned.
        gather_across_devices (`bool`, defaults to `False`):
            Use the passages of every process as negatives (see `compute_contrastive_loss`).
        extra_negatives (`torch.FloatTensor` of shape `(num_negatives, embedding_size)`, *optional*):
            More negative passages for every question, e.g. the pre-batch queue.
        extra_negative_ids (`torch.LongTensor` of shape `(num_negatives,)`, *optional*):
            Their text ids, for duplicate masking.
        cached_embedding_gradients (`torch.FloatTensor` of shape `(batch_size, 1 + passages, d)`, *optional*):
            GradCache's second pass (`ContrastiveTrainer` with ``grad_cache_chunk_size``): the gradient of the loss
            with respect to these embeddings, computed on the whole batch. The returned ``loss`` is then
            ``sum(embeddings * gradients)``, whose parameter gradient is this chunk's share of the full batch's.
        mlm_loss_share (`float`, defaults to 1.0):
            Taken for GradCache's interface; a dual encoder has no MLM loss to share.
        """
        if query_input_ids is None:
            raise ValueError(
                "DualEncoderModel's forward takes a training batch (query_input_ids and passage_input_ids); to "
                "encode texts use encode_queries / encode_passages, or embed_queries / embed_passages on token ids."
            )
        embeddings = self.embed_views(
            query_input_ids,
            query_attention_mask,
            query_token_type_ids,
            passage_input_ids,
            passage_attention_mask,
            passage_token_type_ids,
        )
        loss = cl_loss = negatives_per_query = None
        if return_loss and cached_embedding_gradients is not None:
            loss = (embeddings.float() * cached_embedding_gradients.float()).sum()  # GradCache's surrogate
        elif return_loss:
            cl_loss, negatives_per_query = self.compute_contrastive_loss(
                embeddings,
                sentence_ids=sentence_ids,
                extra_negatives=extra_negatives,
                extra_negative_ids=extra_negative_ids,
                gather_across_devices=gather_across_devices,
            )
            loss = cl_loss
        output = DualEncoderOutput(
            loss=loss, cl_loss=cl_loss, embeddings=embeddings, negatives_per_query=negatives_per_query
        )
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        return output if return_dict else output.to_tuple()

    # ------------------------------------------------------------------------------------------------------------
    # Texts in, vectors out
    # ------------------------------------------------------------------------------------------------------------

    @torch.no_grad()
    def encode_queries(
        self,
        queries: str | list[str],
        tokenizer=None,
        batch_size: int = 64,
        max_length: int | None = 64,
        normalize: bool = False,
    ) -> torch.Tensor:
        """Query vectors, ``(len(queries), embedding_size)`` float32 on the CPU, in the input order.

        Args:
            queries: a text or a list of them.
            tokenizer: defaults to ``self.tokenizer``, then to the one saved beside the checkpoint.
            batch_size: texts per forward pass.
            max_length: truncation length in tokens (None: the tokenizer's maximum).
            normalize: L2-normalise the vectors (then the dot product is the cosine similarity).
        """
        return self._encode_texts(self.embed_queries, queries, tokenizer, batch_size, max_length, normalize)

    @torch.no_grad()
    def encode_passages(
        self,
        passages: str | list[str],
        tokenizer=None,
        batch_size: int = 64,
        max_length: int | None = 256,
        normalize: bool = False,
    ) -> torch.Tensor:
        """Passage vectors, ``(len(passages), embedding_size)`` float32 on the CPU, in the input order (arguments as
        `encode_queries`; DPR truncates passages at 256 tokens)."""
        return self._encode_texts(self.embed_passages, passages, tokenizer, batch_size, max_length, normalize)

    def _encode_texts(self, embed, texts, tokenizer, batch_size: int, max_length: int | None, normalize: bool):
        """Encode in eval mode, in batches of texts sorted by length (little padding), restoring the mode after."""
        single = isinstance(texts, str)
        texts = [texts] if single else list(texts)
        tokenizer = tokenizer or self.tokenizer or self._load_saved_tokenizer()
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
        order = sorted(range(len(texts)), key=lambda index: -len(texts[index]))
        vectors = torch.empty(len(texts), self.config.embedding_size)
        device = next(self.parameters()).device
        was_training = self.training
        self.eval()
        try:
            for start in range(0, len(order), batch_size):
                indices = order[start : start + batch_size]
                batch = tokenizer(
                    [texts[i] for i in indices],
                    padding=True,
                    truncation=max_length is not None,
                    max_length=max_length,
                    return_tensors="pt",
                )
                embedded = embed(
                    batch["input_ids"].to(device),
                    batch["attention_mask"].to(device),
                    batch["token_type_ids"].to(device) if "token_type_ids" in batch else None,
                ).float()
                if normalize:
                    embedded = F.normalize(embedded, dim=-1)
                vectors[torch.tensor(indices)] = embedded.cpu()
        finally:
            self.train(was_training)
        return vectors[0] if single else vectors

    def _load_saved_tokenizer(self):
        path = self.config._name_or_path
        if not path:
            raise ValueError(
                "Encoding texts needs a tokenizer: pass tokenizer=AutoTokenizer.from_pretrained(...) or set "
                "model.tokenizer."
            )
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(path)
        except (OSError, ValueError) as error:
            raise ValueError(f"No tokenizer is saved with {path!r}; pass tokenizer=... explicitly.") from error
        return self.tokenizer

    # ------------------------------------------------------------------------------------------------------------
    # Building
    # ------------------------------------------------------------------------------------------------------------

    @classmethod
    def from_encoder_pretrained(
        cls,
        name_or_path: str | os.PathLike,
        passage_name_or_path: str | os.PathLike | None = None,
        **config_overrides,
    ) -> DualEncoderModel:
        """Two towers initialised from pretrained encoders (a local folder or a Hub id), as DPR starts both from
        BERT: the passage encoder from ``passage_name_or_path``, else from the same checkpoint as the query encoder.

        ``config_overrides`` set [`DualEncoderConfig`] fields (``share_encoders=True``, ``similarity="cosine"``,
        ``pooler_type="mean"``...).
        """
        share = config_overrides.get("share_encoders", False)
        if share and passage_name_or_path is not None:
            raise ValueError("share_encoders=True has a single encoder: do not give passage_name_or_path.")
        passage_source = passage_name_or_path or name_or_path
        config = DualEncoderConfig(
            query_encoder=AutoConfig.from_pretrained(name_or_path),
            passage_encoder=None if share else AutoConfig.from_pretrained(passage_source),
            **config_overrides,
        )
        model = cls(config)
        with_pooler = config.pooler_type == "cls"
        query_encoder = build_encoder(config.query_encoder, with_pooler, pretrained=name_or_path)
        passage_encoder = None
        if not share:
            passage_encoder = build_encoder(config.passage_encoder, with_pooler, pretrained=passage_source)
        model.set_encoders(query_encoder, passage_encoder)
        model.config._name_or_path = str(name_or_path)
        return model
