"""Configuration of dual encoders (DPR): a query encoder and a passage encoder, separate or shared."""

from __future__ import annotations

import copy

from transformers import AutoConfig, PreTrainedConfig

from .configuration_contrastive import EMBEDDING_FIELDS, SentenceEmbeddingConfig
from .poolers import get_pooler
from .transformers_compat import SubConfigSpec, build_sub_config

# The temperature each similarity gets when none is given: DPR scores with the raw dot product (no temperature);
# cosine similarities lie in [-1, 1] and need a small temperature to make a peaked softmax (SimCSE's 0.05).
DEFAULT_TEMPERATURES = {"dot": 1.0, "cosine": 0.05}


class DualEncoderConfig(SentenceEmbeddingConfig):
    r"""
    Configuration of a [`DualEncoderModel`]: DPR's bi-encoder (Karpukhin et al., 2020), a question encoder E_Q and a
    passage encoder E_P whose pooled vectors are compared by ``sim(q, p) = E_Q(q) . E_P(p)``.

    Args:
        query_encoder (`PreTrainedConfig` or `dict`, *optional*):
            Configuration of the query encoder (BERT, RoBERTa, ...). A dict must carry `model_type`; `None` gives a
            default BERT configuration.
        passage_encoder (`PreTrainedConfig` or `dict`, *optional*):
            Configuration of the passage encoder; a copy of `query_encoder` when unset. Must be unset with
            `share_encoders=True`.
        share_encoders (`bool`, defaults to `False`):
            One encoder (one set of weights) for queries and passages. DPR trains two; sharing halves the parameters
            and suits symmetric tasks.
        pooler_type (`str`, defaults to `"cls_before_pooler"`):
            How a text's token states become its vector (a registered pooler, `poolers.py`); DPR takes
            the [CLS] hidden state.
        projection_dim (`int`, *optional*):
            Size of a linear layer on each encoder's pooled vector (DPR's optional `encode_proj`); none when unset.
        similarity (`str`, defaults to `"dot"`):
            `dot` (DPR's inner product) or `cosine`.
        temperature (`float`, *optional*):
            Scores are divided by it before the softmax; defaults to 1.0 for `dot` (DPR) and 0.05 for `cosine`.
        contrastive_loss (`str`, defaults to `"info_nce"`):
            The in-batch loss: DPR's InfoNCE over each query's positive, the other queries' passages and hard
            negatives; any registered loss, one's own included, trains the dual encoder the same way.

    The other settings every sentence-embedding model shares (``sub_batch_size``, ``sub_batch_tokens``, ``prompts``,
    ``default_prompt_name``, ``include_prompt``, ``matryoshka_dims``, ``matryoshka_weights``, ``truncate_dim``,
    ``max_seq_length``, ``normalize_embeddings``) are [`SentenceEmbeddingConfig`]'s, for both towers: each side's
    texts are encoded in a call of their own (the queries; the passages, positives and hard negatives);
    `encode_query` and `encode_document` apply the prompt of their role; the loss sums over the first m dimensions of
    the query and passage vectors for each Matryoshka m; and each route of the checkpoint ends with a
    sentence-transformers ``Normalize`` module with ``normalize_embeddings``.
    """

    model_type = "dual_encoder"
    # The parts of the loss a model returns, which transformers' Trainer would gather as predictions: they are
    # scalars, not one value per example (`DualEncoderOutput`: its `embeddings` are kept).
    keys_to_ignore_at_inference = ["cl_loss", "negatives_per_query"]
    if SubConfigSpec is not None:
        sub_configs_defaults = {
            "query_encoder": SubConfigSpec(config_class=AutoConfig, model_type="bert"),
            "passage_encoder": SubConfigSpec(config_class=AutoConfig, model_type="bert", optional=True),
        }
    else:  # transformers < 5.20: the sub-configs are built in __post_init__
        sub_configs = {"query_encoder": AutoConfig, "passage_encoder": AutoConfig}

    query_encoder: PreTrainedConfig | dict | None = None
    passage_encoder: PreTrainedConfig | dict | None = None
    share_encoders: bool = False
    pooler_type: str = "cls_before_pooler"
    projection_dim: int | None = None
    # DPR's defaults where they differ from the shared ones: the raw dot product (its temperature: by similarity,
    # `DEFAULT_TEMPERATURES`) and InfoNCE
    similarity: str = "dot"
    temperature: float | None = None
    contrastive_loss: str = "info_nce"

    def __post_init__(self, **kwargs):
        if SubConfigSpec is None:
            self.query_encoder = build_sub_config(self.query_encoder, AutoConfig, model_type="bert")
            self.passage_encoder = build_sub_config(self.passage_encoder, AutoConfig, model_type="bert", optional=True)
        super().__post_init__(**kwargs)
        if self.share_encoders and self.passage_encoder is not None:
            raise ValueError(
                "share_encoders=True uses the query encoder for passages too: leave passage_encoder unset, or set "
                "share_encoders=False to train two encoders."
            )
        if not self.share_encoders and self.passage_encoder is None:
            self.passage_encoder = copy.deepcopy(self.query_encoder)
        if self.temperature is None and self.similarity in DEFAULT_TEMPERATURES:
            self.temperature = DEFAULT_TEMPERATURES[self.similarity]
        self._validate_dual_encoder_fields()

    def _validate_dual_encoder_fields(self) -> None:
        get_pooler(self.pooler_type)  # a ValueError naming the registered poolers
        if self.projection_dim is not None and self.projection_dim < 1:
            raise ValueError(f"projection_dim must be a positive size or None (none), got {self.projection_dim}.")
        if self.projection_dim is None and self.query_encoder.hidden_size != self.passage_config.hidden_size:
            raise ValueError(
                f"The query encoder's hidden size ({self.query_encoder.hidden_size}) differs from the passage "
                f"encoder's ({self.passage_config.hidden_size}): their vectors cannot be compared. Set projection_dim "
                "to project both to one size."
            )
        self._validate_embedding_settings()

    @property
    def passage_config(self) -> PreTrainedConfig:
        """The configuration of the encoder that reads passages (the query encoder's when shared)."""
        return self.query_encoder if self.share_encoders else self.passage_encoder

    def get_text_config(self, decoder=None, encoder=None) -> PreTrainedConfig:
        """The query encoder's config: where transformers looks for `vocab_size`, `hidden_size` and the like."""
        return self.query_encoder

    @property
    def hidden_size(self) -> int:
        """Hidden size of the query encoder (read by DeepSpeed's "auto" bucket sizes)."""
        return self.query_encoder.hidden_size

    # The objective is the contrastive loss alone; `ContrastiveTrainer`'s GradCache reads these weights.
    @property
    def cl_weight(self) -> float:
        return 1.0

    @property
    def mlm_weight(self) -> float:
        return 0.0

    @property
    def embedding_size(self) -> int:
        """Size of the query and passage vectors."""
        return self.projection_dim or self.query_encoder.hidden_size


# The fields a checkpoint's dual_encoder_config.json holds: every option but the encoders (saved as checkpoints of
# their own).
DUAL_ENCODER_FIELDS = ("share_encoders", "pooler_type", "projection_dim", *EMBEDDING_FIELDS)

__all__ = ["DualEncoderConfig", "DUAL_ENCODER_FIELDS", "DEFAULT_TEMPERATURES"]
