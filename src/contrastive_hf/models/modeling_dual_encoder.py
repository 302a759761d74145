"""Dual encoders for dense retrieval (DPR, Karpukhin et al., 2020), with DensePhrases' pre-batch negatives.

A query encoder and a passage encoder (or one shared encoder) map questions and passages to vectors compared by dot
product or cosine similarity. Training minimises, for each question q_i with its positive passage p_i+,

    L_i = -log  e^{s(q_i, p_i+)} / ( sum_j e^{s(q_i, p_j+)} + sum_j e^{s(q_i, p_j-)} + sum_m e^{s(q_i, e_m)} )

(DPR eq. (2) with in-batch negatives, §3.2): the other questions' positives p_j+ and every hard negative p_j- of the
batch (gathered from every device when training on several), plus the queued passages e_m of the previous batches
(DensePhrases, Lee et al., 2021, §4.2), with s = sim / temperature. A passage identical to the question's own positive
(or to the question) is never counted as its negative.

A saved dual encoder is a sentence-transformers model (`checkpoint_files`): with one shared encoder, that encoder in
its own architecture at the root, as a `ContrastiveModel`; with two towers, a sentence-transformers ``Router`` whose
``query`` route holds the question encoder and ``document`` route the passage encoder, each a plain transformers
checkpoint in its folder. ``config_sentence_transformers.json`` records the similarity (``dot`` for DPR), so
sentence-transformers and MTEB score with it. Like the rest of ``models/``, this file imports only torch,
transformers and its siblings.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from transformers import AutoConfig, PreTrainedModel
from transformers.utils import ModelOutput

from .checkpoint_contents import locate
from .checkpoint_files import EmbeddingCheckpointMixin
from .checkpoint_names import (
    DUAL_ENCODER_CONFIG_NAME,
    LOADING_KWARGS,
    TOKENIZER_CONFIG_NAME,
    download_kwargs,
    in_subfolder,
)
from .configuration_contrastive import inference_max_length
from .configuration_dual_encoder import DUAL_ENCODER_FIELDS, DualEncoderConfig
from .encoding import SentenceEmbeddingMixin
from .encoding_policy import encode_with
from .heads import build_encoder, init_weights
from .objectives import ContrastiveLoss, build_loss, build_registered_loss, cached_gradient_surrogate
from .poolers import SentencePooler, uses_encoder_pooler_layer
from .sentence_transformers_files import DenseLayer, SentenceTransformersStack, write_json
from .sentence_transformers_folders import (
    FolderSettings,
    SentenceTransformersFolder,
    read_sentence_transformers_folder,
)

# Where a two-tower checkpoint keeps each encoder: sentence-transformers' Router folder names.
TOWER_FOLDERS = {"query_encoder": "query_0_Transformer", "passage_encoder": "document_0_Transformer"}

__all__ = [
    "DualEncoderModel",
    "DualEncoderPreTrainedModel",
    "DualEncoderOutput",
    "folder_settings",
]
# The tower each route of a sentence-transformers Router runs, and the projection after it.
ROUTE_TOWERS = {"query": ("query_encoder", "query_projection"), "document": ("passage_encoder", "passage_projection")}


def folder_settings(folder: SentenceTransformersFolder) -> FolderSettings:
    """`DualEncoderConfig`'s values for a sentence-transformers folder (the inverse of
    `DualEncoderModel.sentence_transformers_stacks`): a Router's ``query`` and ``document`` routes are the two towers
    (one shared encoder where both run the same Transformer module), and a folder of one route is the encoder both
    towers start from. Every route must pool, normalise and truncate alike, with at most one Dense layer without
    activation (the towers' linear projection): a dual encoder has one pooler and one ``projection_dim``."""
    settings = FolderSettings(folder)
    settings.refusals.update(folder.refusals)
    routes = folder.routes
    for route in routes.values():
        for name, why in route.refusals.items():
            settings.refusals.setdefault("projection_dim" if name == "dense" else name, why)
    said = {  # config field: the route's attribute saying it
        "pooler_type": "pooler_type",
        "include_prompt": "include_prompt",
        "normalize_embeddings": "normalize",
        "max_seq_length": "max_seq_length",
    }
    for name, attribute in said.items():
        values = {route_name or "its": getattr(route, attribute) for route_name, route in routes.items()}
        if len(set(values.values())) > 1:
            settings.refusals.setdefault(name, f"routes differ in {name} ({values}), where a dual encoder has one")
            continue
        value = next(iter(values.values()))
        if value is not None:
            module = next(iter(routes.values())).modules.get(attribute)
            settings.set(name, value, module or "modules.json")
    projections = {}
    for route_name, route in routes.items():
        if any(module.activation is not None for module in route.dense) or len(route.dense) > 1:
            layers = ", ".join(f"{module.folder!r} ({module.activation or 'identity'})" for module in route.dense)
            settings.refusals.setdefault(
                "projection_dim", f"Dense modules {layers} are no projection of a dual encoder (one linear layer)"
            )
        projections[route_name] = route.dense[0].out_features if route.dense else None
    if len(set(projections.values())) > 1:
        settings.refusals.setdefault("projection_dim", f"routes project to different sizes ({projections})")
    elif "projection_dim" not in settings.refusals:
        dense = [module.folder for route in routes.values() for module in route.dense]
        settings.set("projection_dim", next(iter(projections.values())), ", ".join(dense) or "modules.json")
    if folder.is_router:
        query, document = routes["query"], routes["document"]
        shared = query.encoder_folder == document.encoder_folder
        settings.set("share_encoders", shared, "router_config.json")
        if shared and [module.folder for module in query.dense] != [module.folder for module in document.dense]:
            settings.refusals.setdefault(
                "projection_dim", "its routes share their encoder but not their Dense module (one projection)"
            )
    settings.set_model_settings()
    return settings


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


class DualEncoderPreTrainedModel(EmbeddingCheckpointMixin, SentenceEmbeddingMixin, PreTrainedModel):
    """Base class of dual encoders: configuration class, weight initialisation, the checkpoint layout and `encode`."""

    config_class = DualEncoderConfig
    base_model_prefix = "dual_encoder"
    main_input_name = "query_input_ids"
    supports_gradient_checkpointing = True
    _supports_sdpa = True
    checkpoint_config_name = DUAL_ENCODER_CONFIG_NAME
    head_prefix = ""

    @torch.no_grad()
    def _init_weights(self, module):
        init_weights(module, getattr(self.config.query_encoder, "initializer_range", 0.02))


class DualEncoderModel(DualEncoderPreTrainedModel):
    r"""
    DPR's bi-encoder: a query encoder and a passage encoder (one shared encoder with `share_encoders=True`), each a
    transformers encoder + pooler (+ an optional linear projection), trained with in-batch negatives, hard negatives
    and, under `ContrastiveTrainer` with `prebatch_size > 0`, pre-batch negatives.

    Training batches (`contrastive_hf.recipes.dpr.QueryPassageCollator` builds them) pad queries and passages
    separately: `query_input_ids` `(batch, query_length)` and `passage_input_ids` `(batch, 1 or 2, passage_length)`,
    the positive passage and optionally a hard negative.

    Example:

    ```python
    >>> from contrastive_hf.models.modeling_dual_encoder import DualEncoderModel
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
        "prompt_lengths",
        "query_lengths",
        "passage_lengths",
    )

    def __init__(self, config: DualEncoderConfig):
        super().__init__(config)
        with_pooler = uses_encoder_pooler_layer(config)
        self.query_encoder = build_encoder(config.query_encoder, with_pooler)
        self.passage_encoder = None if config.share_encoders else build_encoder(config.passage_encoder, with_pooler)
        self._sync_encoder_configs()
        self.pooler = SentencePooler(config.pooler_type)
        self.query_projection = self.passage_projection = None
        if config.projection_dim:
            self.query_projection = nn.Linear(config.query_encoder.hidden_size, config.projection_dim)
            if not config.share_encoders:
                self.passage_projection = nn.Linear(config.passage_encoder.hidden_size, config.projection_dim)
        # the config's loss (DPR's InfoNCE) with its similarity and temperature (`build_registered_loss`)
        self.loss_fn: ContrastiveLoss | None = build_registered_loss(config)
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

    def tower(self, route: str) -> tuple[PreTrainedModel, nn.Linear | None]:
        """The encoder and projection that embed a route's texts (``"query"`` or ``"document"``, a
        sentence-transformers Router's routes, `ROUTE_TOWERS`): the query tower's for both when the encoders are
        shared."""
        encoder_name, projection_name = ROUTE_TOWERS["query" if self.config.share_encoders else route]
        return getattr(self, encoder_name), getattr(self, projection_name)

    def embed_route(
        self,
        route: str,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        prompt_length: torch.Tensor | None = None,
        lengths=None,
    ) -> torch.Tensor:
        """A route's vectors (`tower`): ``(..., L)`` token ids -> ``(..., embedding_size)``, with gradients, encoded as
        the config's ``sub_batch_size`` says (`EncodingPolicy`); the first ``prompt_length`` (``(...)``) tokens of
        each are left out of the pooling when given; ``lengths`` ``(...)``: each text's real tokens, on the host
        (`host_data`)."""
        encoder, projection = self.tower(route)
        return self.encoding_policy().embed(
            encoder, self.pooler, projection, input_ids, attention_mask, token_type_ids, prompt_length, lengths
        )

    def embed_queries(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        prompt_length: torch.Tensor | None = None,
        lengths=None,
    ) -> torch.Tensor:
        """Query vectors, with gradients (`embed_route` of ``"query"``)."""
        return self.embed_route("query", input_ids, attention_mask, token_type_ids, prompt_length, lengths)

    def embed_passages(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        prompt_length: torch.Tensor | None = None,
        lengths=None,
    ) -> torch.Tensor:
        """Passage vectors, with gradients (`embed_route` of ``"document"``)."""
        return self.embed_route("document", input_ids, attention_mask, token_type_ids, prompt_length, lengths)

    def embed_views(
        self,
        query_input_ids: torch.Tensor,
        query_attention_mask: torch.Tensor | None = None,
        query_token_type_ids: torch.Tensor | None = None,
        passage_input_ids: torch.Tensor | None = None,
        passage_attention_mask: torch.Tensor | None = None,
        passage_token_type_ids: torch.Tensor | None = None,
        prompt_lengths: torch.Tensor | None = None,
        query_lengths=None,
        passage_lengths=None,
    ) -> torch.Tensor:
        """The ``(B, 1 + P, d)`` embeddings of a batch: its queries, then each query's P passages (positive first).

        ``passage_*`` tensors are ``(B, P, Lp)``, or ``(B, Lp)`` for one passage per query. Queries and passages are
        encoded separately (`embed_queries`, `embed_passages`), each as the config's ``sub_batch_size`` says.
        ``prompt_lengths`` ``(B, 1 + P)``: how many leading tokens of each text are its prompt, left out of the
        pooling (``include_prompt=False``; the collator gives them). ``query_lengths`` ``(B,)`` and
        ``passage_lengths`` ``(B, P)``: the real tokens of each, on the host (`host_data`).
        """
        if passage_input_ids is None:
            raise ValueError(
                "A training batch needs passage_input_ids: build batches with "
                "contrastive_hf.recipes.dpr.QueryPassageCollator, or encode one side with embed_queries / "
                "embed_passages."
            )
        if passage_input_ids.dim() == 2:  # one passage per query
            unsqueeze = lambda tensor: None if tensor is None else tensor.unsqueeze(1)  # noqa: E731
            passage_input_ids = unsqueeze(passage_input_ids)
            passage_attention_mask = unsqueeze(passage_attention_mask)
            passage_token_type_ids = unsqueeze(passage_token_type_ids)
            passage_lengths = None if passage_lengths is None else np.asarray(passage_lengths).reshape(-1, 1)
        if passage_input_ids.dim() != 3 or passage_input_ids.shape[0] != query_input_ids.shape[0]:
            raise ValueError(
                f"passage_input_ids must be (batch, passages per query, length) with the queries' batch size "
                f"{query_input_ids.shape[0]}, got shape {tuple(passage_input_ids.shape)}."
            )
        query_prompts = passage_prompts = None
        if prompt_lengths is not None:
            query_prompts, passage_prompts = prompt_lengths[:, 0], prompt_lengths[:, 1:]
        queries = self.embed_queries(
            query_input_ids, query_attention_mask, query_token_type_ids, query_prompts, query_lengths
        )
        passages = self.embed_passages(
            passage_input_ids, passage_attention_mask, passage_token_type_ids, passage_prompts, passage_lengths
        )  # (B, P, d)
        return torch.cat([queries.unsqueeze(1), passages], dim=1)  # (B, 1 + P, d)

    # ------------------------------------------------------------------------------------------------------------
    # Loss
    # ------------------------------------------------------------------------------------------------------------

    def compute_contrastive_loss(
        self, embeddings: torch.Tensor, sentence_ids: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """DPR's loss on ``(B, S, d)`` embeddings (S = 2: query, positive; S = 3: + hard negative): this model's
        ``loss_fn`` (the config's ``contrastive_loss``, InfoNCE by default, with its similarity, temperature and
        Matryoshka dimensions, or the loss `ContrastiveTrainer` was handed), which also gathers the passages of
        every process and reads its pre-batch queue (DensePhrases' pre-batch negatives) when it has one.

        Args:
            embeddings: the output of `embed_views`.
            sentence_ids: optional ``(B, S)`` ids of the texts (the collator's content hashes): a column holding the
                same text as a query or its positive is left out of that query's negatives.

        Returns:
            ``(loss, negatives_per_query)``: the mean of the local queries' losses, and the mean number of negatives
            in their softmax.
        """
        if self.loss_fn is None:  # registered since the model was built, or the registry's error naming the loss
            self.loss_fn = build_loss(self.config)
        return self.loss_fn(embeddings, sentence_ids)

    def forward(
        self,
        query_input_ids: torch.Tensor | None = None,
        query_attention_mask: torch.Tensor | None = None,
        query_token_type_ids: torch.Tensor | None = None,
        passage_input_ids: torch.Tensor | None = None,
        passage_attention_mask: torch.Tensor | None = None,
        passage_token_type_ids: torch.Tensor | None = None,
        prompt_lengths: torch.Tensor | None = None,
        sentence_ids: torch.Tensor | None = None,
        query_lengths=None,
        passage_lengths=None,
        return_loss: bool = True,
        cached_embedding_gradients: torch.Tensor | None = None,
        return_dict: bool | None = None,
    ) -> DualEncoderOutput | tuple:
        r"""
        query_input_ids (`torch.LongTensor` of shape `(batch_size, query_length)`):
            The questions.
        passage_input_ids (`torch.LongTensor` of shape `(batch_size, 1 or 2, passage_length)`):
            Each question's positive passage, then optionally its hard negative.
        prompt_lengths (`torch.LongTensor` of shape `(batch_size, 1 + passages)`, *optional*):
            How many leading tokens of the query and of each passage are its prompt, left out of the pooling
            (``config.include_prompt=False``, as at inference).
        sentence_ids (`torch.LongTensor` of shape `(batch_size, 2 + k)`, *optional*):
            Ids of the texts in the same columns (query, positive, hard negatives), for duplicate masking.
        query_lengths, passage_lengths (numpy arrays, `(batch_size,)` and `(batch_size, passages)`, *optional*):
            The real tokens of each text, on the host (`host_data`; `QueryPassageCollator` gives them): a step then
            reads nothing back from the device to pack or sort its texts.
        return_loss (`bool`, defaults to `True`):
            Compute the loss; otherwise only the embeddings are returned.
        cached_embedding_gradients (`torch.FloatTensor` of shape `(batch_size, 1 + passages, d)`, *optional*):
            GradCache's second pass (`ContrastiveTrainer` with ``grad_cache_chunk_size``): the gradient of the loss
            with respect to these embeddings, computed on the whole batch. The returned ``loss`` is then
            ``sum(embeddings * gradients)``, whose parameter gradient is this chunk's share of the full batch's.
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
            prompt_lengths,
            query_lengths,
            passage_lengths,
        )
        loss = cl_loss = negatives_per_query = None
        if return_loss and cached_embedding_gradients is not None:
            loss = cached_gradient_surrogate(embeddings, cached_embedding_gradients)
        elif return_loss:
            cl_loss, negatives_per_query = self.compute_contrastive_loss(embeddings, sentence_ids)
            loss = cl_loss
        output = DualEncoderOutput(
            loss=loss, cl_loss=cl_loss, embeddings=embeddings, negatives_per_query=negatives_per_query
        )
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        return output if return_dict else output.to_tuple()

    # ------------------------------------------------------------------------------------------------------------
    # Texts in, vectors out
    # ------------------------------------------------------------------------------------------------------------

    def embed_tokens(
        self,
        input_ids,
        attention_mask=None,
        token_type_ids=None,
        task=None,
        prompt_length=None,
        return_token_states=False,
    ):
        """The vectors ``(B, d)`` of a padded batch of queries (``task="query"``) or passages (``"document"``, the
        default, as a sentence-transformers Router's default route), encoded as the config's ``sub_batch_size`` says
        (packed where the encoder can be); with the token states, in one padded pass."""
        if task not in (None, "query", "document", "passage"):
            raise ValueError(f"Unknown task {task!r} for a dual encoder: use 'query' or 'document'.")
        route = "query" if task == "query" else "document"
        if return_token_states:
            encoder, projection = self.tower(route)
            return encode_with(
                encoder, self.pooler, projection, input_ids, attention_mask, token_type_ids, prompt_length,
                return_token_states=True,
            )  # fmt: skip
        return self.embed_route(route, input_ids, attention_mask, token_type_ids, prompt_length)

    def encode_queries(self, queries, tokenizer=None, batch_size: int = 64, max_length: int | None = 64, **kwargs):
        """Query vectors as a float32 tensor on the CPU (the 0.1 interface; `encode_query` is sentence-transformers'
        spelling and returns numpy by default). DPR truncates questions at 64 tokens."""
        return self._encode_as_tensor(self.encode_query, queries, tokenizer, batch_size, max_length, **kwargs)

    def encode_passages(self, passages, tokenizer=None, batch_size: int = 64, max_length: int | None = 256, **kwargs):
        """Passage vectors as a float32 tensor on the CPU (the 0.1 interface of `encode_document`); DPR truncates
        passages at 256 tokens."""
        return self._encode_as_tensor(self.encode_document, passages, tokenizer, batch_size, max_length, **kwargs)

    @staticmethod
    def _encode_as_tensor(encode, texts, tokenizer, batch_size, max_length, **kwargs) -> torch.Tensor:
        vectors = encode(
            texts, tokenizer=tokenizer, batch_size=batch_size, max_length=max_length, convert_to_tensor=True, **kwargs
        )
        return vectors.cpu()

    @property
    def similarity_fn_name(self) -> str:
        return self.config.similarity

    # The checkpoint layout (checkpoint_files.EmbeddingCheckpointMixin) ----------------------------------------

    def checkpoint_encoders(self) -> dict:
        if self.config.share_encoders:
            return {"query_encoder": ("", "query_encoder.", self.query_encoder)}
        return {
            name: (TOWER_FOLDERS[name], f"{name}.", getattr(self, name))
            for name in ("query_encoder", "passage_encoder")
        }

    def checkpoint_config(self) -> dict:
        return {name: getattr(self.config, name) for name in DUAL_ENCODER_FIELDS}

    @classmethod
    def config_field_names(cls) -> tuple[str, ...]:
        return DUAL_ENCODER_FIELDS

    @classmethod
    def saved_encoder_folders(cls, saved: dict) -> dict[str, str]:
        if saved.get("share_encoders"):
            return {"query_encoder": ""}
        return dict(TOWER_FOLDERS)

    @classmethod
    def config_from_checkpoint(cls, saved: dict, encoder_configs: dict, overrides: dict) -> DualEncoderConfig:
        values = {name: saved[name] for name in DUAL_ENCODER_FIELDS if name in saved}
        return DualEncoderConfig(
            query_encoder=encoder_configs["query_encoder"],
            passage_encoder=encoder_configs.get("passage_encoder"),
            **{**values, **overrides},
        )

    def load_pretrained_encoder(self, name: str, source: str | os.PathLike, **loading) -> PreTrainedModel:
        config = self.config.query_encoder if name == "query_encoder" else self.config.passage_encoder
        return build_encoder(config, uses_encoder_pooler_layer(self.config), pretrained=source, **loading)

    def install_encoders(self, encoders: dict[str, PreTrainedModel]) -> None:
        self.set_encoders(encoders["query_encoder"], encoders.get("passage_encoder"))

    def encoder_configs(self) -> list:
        return [self.config.query_encoder] + ([] if self.config.share_encoders else [self.config.passage_encoder])

    def sentence_transformers_stacks(self) -> dict[str, SentenceTransformersStack]:
        def stack(encoder_name: str, projection_name: str) -> SentenceTransformersStack:
            encoder = getattr(self, encoder_name)
            dense = (
                [DenseLayer(f"{encoder_name}.pooler.dense", "tanh")] if uses_encoder_pooler_layer(self.config) else []
            )
            if getattr(self, projection_name) is not None:
                dense.append(DenseLayer(projection_name))
            return SentenceTransformersStack(
                pooler_type=self.config.pooler_type,
                hidden_size=encoder.config.hidden_size,
                max_seq_length=inference_max_length(self.config, encoder.config),
                dense=dense,
                include_prompt=self.config.include_prompt,
                normalize=self.config.normalize_embeddings,
            )

        if self.config.share_encoders:  # one tower, no Router
            return {"": stack(*ROUTE_TOWERS["query"])}
        return {route: stack(*names) for route, names in ROUTE_TOWERS.items()}

    def _write_checkpoint(self, save_directory: str, state_dict: dict | None, max_shard_size) -> None:
        super()._write_checkpoint(save_directory, state_dict, max_shard_size)
        if not self.config.share_encoders:
            # two towers: the root holds no encoder; a config.json of our model type lets
            # `AutoModel.from_pretrained(path)` (after `import contrastive_hf`) find DualEncoderModel
            write_json(
                os.path.join(save_directory, "config.json"),
                {"model_type": DualEncoderConfig.model_type, "architectures": [type(self).__name__]},
            )

    # ------------------------------------------------------------------------------------------------------------
    # Building
    # ------------------------------------------------------------------------------------------------------------

    @classmethod
    def from_encoder_pretrained(
        cls,
        name_or_path: str | os.PathLike,
        passage_name_or_path: str | os.PathLike | None = None,
        **kwargs,
    ) -> DualEncoderModel:
        """Two towers initialised from pretrained encoders (a local folder or a Hub id), as DPR starts both from
        BERT: the passage encoder from ``passage_name_or_path``, else from the same checkpoint as the query encoder.

        Keyword arguments are transformers' loading arguments (``dtype``, ``revision``, ``token``, ``cache_dir``,
        ``attn_implementation``...) or [`DualEncoderConfig`] fields (``share_encoders=True``,
        ``similarity="cosine"``, ``pooler_type="mean"``...); anything else is an error listing both.

        A sentence-transformers model (a ``modules.json``) loads as the model its modules compute (`folder_settings`):
        a Router's ``query`` and ``document`` routes as the two towers, with the tokenizer of their folders; a model
        of one route as the encoder both towers start from, with its pooling, Dense layer, normalisation, prompts and
        similarity. A field given here replaces what the folder says, with a warning naming it; what has no
        equivalent is refused, naming it.
        """
        loading = {name: kwargs.pop(name) for name in LOADING_KWARGS if name in kwargs}
        given = cls.check_config_overrides(kwargs)
        download = download_kwargs(loading)
        folder = read_sentence_transformers_folder(name_or_path, **download)
        settings, overrides = None, dict(given)
        folders = {"query": "", "document": ""}
        if folder is not None:
            if folder.is_router and passage_name_or_path is not None:
                raise ValueError(
                    f"{name_or_path} is a sentence-transformers Router holding both towers: do not give "
                    "passage_name_or_path."
                )
            settings = folder_settings(folder)
            overrides = settings.merged(given)
            folders = {route: folder.routes.get(route, folder.routes.get("")).encoder_folder for route in folders}
        share = overrides.get("share_encoders", False)
        if share and passage_name_or_path is not None:
            raise ValueError("share_encoders=True has a single encoder: do not give passage_name_or_path.")
        passage_source = passage_name_or_path or name_or_path
        passage_folder = "" if passage_name_or_path is not None else folders["document"]
        trust = loading.get("trust_remote_code", False)
        config = DualEncoderConfig(
            query_encoder=AutoConfig.from_pretrained(
                name_or_path, trust_remote_code=trust, **in_subfolder(download, folders["query"])
            ),
            passage_encoder=None
            if share
            else AutoConfig.from_pretrained(
                passage_source, trust_remote_code=trust, **in_subfolder(download, passage_folder)
            ),
            **overrides,
        )
        sources = {"query_encoder": (name_or_path, folders["query"])}
        if not share:
            sources["passage_encoder"] = (passage_source, passage_folder)
        model = cls.assemble(config, sources, loading)
        if settings is not None and settings.kept(given, "projection_dim"):
            model._load_dense_projections(folder)
        if folder is not None and folder.is_router:
            model.tokenizer = _routes_tokenizer(folder, download)
        model.config._name_or_path = str(name_or_path)  # in memory only: never written to a saved file
        return model

    def _load_dense_projections(self, folder: SentenceTransformersFolder) -> None:
        """The towers' linear projections from the Dense module of each route of ``folder`` (`folder_settings`)."""
        with torch.no_grad():
            for route_name, route in folder.routes.items():
                towers = [ROUTE_TOWERS[route_name]] if route_name else list(ROUTE_TOWERS.values())
                for _, projection_name in towers:
                    projection = getattr(self, projection_name)
                    if projection is None or not route.dense:
                        continue
                    weights = folder.dense_weights(route.dense[0])
                    if projection.weight.shape != weights["weight"].shape:
                        raise folder.inconsistent(
                            f"its Dense module {route.dense[0].folder!r} maps {weights['weight'].shape[1]} features "
                            f"to {weights['weight'].shape[0]}, but the tower projects {projection.weight.shape[1]}"
                        )
                    projection.weight.copy_(weights["weight"])
                    projection.bias.copy_(weights["bias"])


def _routes_tokenizer(folder: SentenceTransformersFolder, download: dict):
    """The tokenizer of a Router's towers (each route's Transformer folder holds one), which a dual encoder reads for
    both: the folder's root's where it has one, else the query route's, refused where the routes' differ."""
    from transformers import AutoTokenizer

    name_or_path = folder.name_or_path
    if locate(name_or_path, TOKENIZER_CONFIG_NAME, **download) is not None:
        return AutoTokenizer.from_pretrained(name_or_path, **download)
    tokenizers = {
        route: AutoTokenizer.from_pretrained(
            name_or_path, **in_subfolder(download, folder.routes[route].encoder_folder)
        )
        for route in ("query", "document")
    }
    if tokenizers["query"].get_vocab() != tokenizers["document"].get_vocab():
        raise folder.refusal(
            "its routes tokenize with different vocabularies, where a dual encoder reads one tokenizer",
            "Load it with sentence_transformers.SentenceTransformer.",
        )
    return tokenizers["query"]
