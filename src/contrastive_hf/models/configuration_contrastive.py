"""Configuration of contrastive sentence encoders: an encoder, a pooler and a projection head."""

from __future__ import annotations

import copy

from transformers import AutoConfig, PreTrainedConfig
from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES

from .losses import SIMILARITIES
from .objectives import LOSSES
from .poolers import POOLERS, get_pooler
from .transformers_compat import SubConfigSpec, build_sub_config

# The registered poolers and losses (`poolers.py`, `objectives.py`), read at each use
POOLER_TYPES = POOLERS.names_view()
CONTRASTIVE_LOSSES = LOSSES.names_view()
PROJECTION_TYPES = ("none", "linear", "mlp")
# The named ways of encoding a batch's views (`ContrastiveConfig.sub_batch_size`; an integer is the fourth).
ENCODING_PATHS = ("auto", "packed", "sorted")
# Decoder families whose attention masks follow their config's ``is_causal`` in transformers (its masking utilities),
# so that ``is_causal=False`` makes them attend both ways, saved in the encoder's config.json for `AutoModel` and
# sentence-transformers to reproduce: each checked in tests/models/test_decoder_pooling.py.
BIDIRECTIONAL_DECODERS = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "phi3", "gpt2")
# The dropout probabilities of transformers' encoder and decoder configs, as each family names them (BERT/RoBERTa,
# DistilBERT, Llama/Mistral/Qwen/Gemma/Phi-3, GPT-2, ModernBERT): what `ContrastiveConfig.encoder_dropout` sets.
# A classifier head's dropout is not the encoder's.
ENCODER_DROPOUT_FIELDS = (
    "hidden_dropout_prob", "attention_probs_dropout_prob", "dropout", "attention_dropout", "resid_pdrop",
    "embd_pdrop", "attn_pdrop", "embedding_dropout", "mlp_dropout",
)  # fmt: skip


def set_bidirectional_attention(encoder_config: PreTrainedConfig, bidirectional: bool) -> None:
    """Make a decoder of `BIDIRECTIONAL_DECODERS` attend both ways (or causally again), in ``encoder_config`` (its
    ``is_causal``). An encoder of masked-language-model families (BERT, RoBERTa...) already attends both ways and
    stays as it is; a decoder of another family is refused."""
    model_type = encoder_config.model_type
    if model_type in BIDIRECTIONAL_DECODERS:
        encoder_config.is_causal = not bidirectional
    elif model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES and not getattr(encoder_config, "is_decoder", False):
        if not bidirectional:
            raise ValueError(f"A {model_type} encoder attends both ways: bidirectional_attention=False cannot apply.")
    else:
        raise ValueError(
            f"bidirectional_attention for an encoder of type {model_type!r}: its attention is causal, and making it "
            f"bidirectional is supported for {', '.join(BIDIRECTIONAL_DECODERS)} (whose masks follow the config's "
            "is_causal in transformers). Use one of those, or train it causal (with last_token or mean pooling)."
        )


def parse_sub_batch_size(value) -> int | str:
    """A valid `sub_batch_size`: one of `ENCODING_PATHS`, or an integer >= 0 (also given as a string of digits, as a
    command-line flag or a JSON file gives it)."""
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, str) and value in ENCODING_PATHS:
        return value
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise ValueError(
        f"sub_batch_size must be one of {', '.join(repr(path) for path in ENCODING_PATHS)} or an integer >= 0 "
        f"(0: one padded pass; N: length-sorted groups of N views), got {value!r}."
    )


def parse_encoding_fields(sub_batch_size, sub_batch_tokens) -> tuple[int | str, int]:
    """The two fields of every model config that say how training batches are encoded (`encoding.EncodingPolicy`):
    ``sub_batch_size`` parsed (`parse_sub_batch_size`) and ``sub_batch_tokens`` checked."""
    if isinstance(sub_batch_tokens, bool) or not isinstance(sub_batch_tokens, int) or sub_batch_tokens < 1:
        raise ValueError(f"sub_batch_tokens must be a positive number of tokens, got {sub_batch_tokens!r}.")
    return parse_sub_batch_size(sub_batch_size), sub_batch_tokens


def without_sub_config_paths(config_dict: dict) -> dict:
    """``config_dict`` without the ``_name_or_path`` its nested configurations carry: transformers leaves it out of
    a top-level config.json, but a sub-config's would keep the local path (or Hub id) it was loaded from."""
    for value in config_dict.values():
        if isinstance(value, dict) and "model_type" in value:
            value.pop("_name_or_path", None)
            without_sub_config_paths(value)
    return config_dict


class SentenceEmbeddingConfig(PreTrainedConfig):
    r"""
    The settings every sentence-embedding model of the package shares, declared and checked here once: how its
    training loss compares embeddings, how its training batches are encoded, and how it serves embeddings (as a
    sentence-transformers checkpoint does). [`ContrastiveConfig`] and [`DualEncoderConfig`] add their encoders and
    heads, and their own defaults where their papers differ (DPR's dot product and InfoNCE).

    Args:
        temperature (`float`, defaults to 0.05):
            Temperature tau dividing the similarities of the contrastive loss.
        contrastive_loss (`str`, defaults to `"nt_xent"`):
            A registered in-batch loss (`objectives.py`, `register_loss`): `nt_xent` (CLEAR/SimCLR: 2N views, each
            one's negatives are the other 2N-2 views) or `info_nce` (SimCSE, DPR: first views against second views and
            hard negatives). Training needs it registered; loading and encoding the model do not.
        similarity (`str`, defaults to `"cosine"`):
            How `similarity` compares embeddings, written as sentence-transformers' ``similarity_fn_name``:
            `cosine` or `dot`.
        sub_batch_size (`int` or `str`, defaults to `"auto"`):
            How training batches are encoded; the negatives of a batch stay the same random sentences, and the
            embeddings equal those of one padded pass (with dropout off; with dropout on, each view draws its own
            masks either way):

            - `"packed"`: all views as one sequence of their real tokens, attention kept inside each sentence
              (`models/packing.py`): no layer computes padding. BERT, RoBERTa, XLM-R, CamemBERT, DistilBERT,
              ELECTRA and ModernBERT encoders, and Llama, Mistral, Qwen2, Qwen3, Phi-3, Gemma, Gemma 3 and GPT-2
              decoders (causal inside each sentence unless bidirectional); on a GPU torch's variable-length flash
              attention where it applies.
            - `"sorted"`: the views sorted by length and encoded in groups of at most `sub_batch_tokens` token
              slots (sentences x the group's longest), each group padded only to its own longest (any encoder).
            - N > 0: sorted the same way, N views per group (the meaning of an integer in earlier releases).
            - 0: one forward pass over all views padded to the longest.
            - `"auto"`: `"packed"` where the encoder supports it (decoders: when asked for, their gain on a GPU
              is not measured yet), else `"sorted"` on CPU and 0 on a GPU (small groups leave a GPU idle). The
              log says once which path runs and why. Measured in docs/benchmarks.md.
        sub_batch_tokens (`int`, defaults to 1024):
            The token budget of a `"sorted"` group.
        prompts (`dict[str, str]`, *optional*):
            Texts prepended to sentences by role, as sentence-transformers' prompts (E5's ``{"query": "query: ",
            "document": "passage: "}``): ``encode(..., prompt_name="query")`` applies one, and the checkpoint's
            ``config_sentence_transformers.json`` carries them.
        default_prompt_name (`str`, *optional*):
            The prompt ``encode`` applies when none is named (a key of ``prompts``).
        include_prompt (`bool`, defaults to `True`):
            Pool the prompt's tokens with the sentence's; False leaves them (with the leading [CLS]) out of the
            pooling, in training too (the collators give each view's prompt length), as sentence-transformers'
            ``include_prompt`` does: mean and max pool the sentence's tokens, and `cls` / `cls_before_pooler` read
            the first token after the prompt.
        matryoshka_dims (`list[int]`, *optional*):
            Matryoshka representation learning (Kusupati et al., 2022): the contrastive loss is computed on the first
            m dimensions of the embeddings for each m here and summed, weighted by ``matryoshka_weights``, so that
            ``encode(..., truncate_dim=m)`` gives a usable smaller embedding (e.g. ``[384, 256, 128, 64]``; list the
            full size to keep training it).
        matryoshka_weights (`list[float]`, *optional*):
            One weight per Matryoshka dimension; 1 each when unset.
        truncate_dim (`int`, *optional*):
            Truncate the embeddings ``encode`` returns to this many dimensions by default (sentence-transformers'
            ``truncate_dim``, written to ``config_sentence_transformers.json`` only when set).
        max_seq_length (`int`, *optional*):
            The longest input, in tokens, that ``encode`` and sentence-transformers read (its ``max_seq_length``, in
            ``sentence_bert_config.json``); `None`: the encoder's position embeddings, at most 512. A model built
            from a sentence-transformers checkpoint keeps that checkpoint's (all-MiniLM-L6-v2: 256).
        normalize_embeddings (`bool`, defaults to `False`):
            L2-normalise the embeddings ``encode`` returns (before ``truncate_dim``), as a sentence-transformers
            ``Normalize`` module does; the checkpoint then writes one. The loss compares the vectors as
            ``similarity`` and the loss say, unnormalised.
    """

    temperature: float | None = 0.05
    contrastive_loss: str = "nt_xent"
    similarity: str = "cosine"
    sub_batch_size: int | str = "auto"
    sub_batch_tokens: int = 1024
    prompts: dict | None = None
    default_prompt_name: str | None = None
    include_prompt: bool = True
    matryoshka_dims: list[int] | None = None
    matryoshka_weights: list[float] | None = None
    truncate_dim: int | None = None
    max_seq_length: int | None = None
    normalize_embeddings: bool = False

    @property
    def embedding_size(self) -> int:
        """Size of the embeddings the loss compares and ``encode`` returns (each model config says)."""
        raise NotImplementedError

    def _validate_embedding_settings(self) -> None:
        """Check (and normalise) the shared settings, each refusal naming the value and what would work."""
        # a loss registered by a user's module need not be registered to load and encode the model: training checks
        # it (`training/sanity.py`, `build_loss`)
        if not isinstance(self.contrastive_loss, str) or not self.contrastive_loss:
            raise ValueError(
                f"contrastive_loss must name an in-batch loss ({', '.join(LOSSES.names())}, or one registered with "
                f"register_loss), got {self.contrastive_loss!r}."
            )
        validate_similarity(self.similarity)
        if self.temperature is None or not self.temperature > 0:
            raise ValueError(
                f"temperature must be > 0, got {self.temperature}: SimCSE and CLEAR use about 0.05 with cosine "
                "similarities, DPR 1.0 with its dot product."
            )
        self.sub_batch_size, self.sub_batch_tokens = parse_encoding_fields(self.sub_batch_size, self.sub_batch_tokens)
        if self.prompts is not None and not (
            isinstance(self.prompts, dict) and all(isinstance(text, str) for text in self.prompts.values())
        ):
            raise ValueError(
                f"prompts must map names to prompt texts, e.g. {{'query': 'query: '}}, got {self.prompts}."
            )
        if self.default_prompt_name is not None and self.default_prompt_name not in (self.prompts or {}):
            raise ValueError(
                f"default_prompt_name {self.default_prompt_name!r} is not among the prompts "
                f"{sorted(self.prompts or {})}: add it to prompts or leave default_prompt_name unset."
            )
        validate_embedding_dims(self, self.embedding_size)
        validate_max_seq_length(self.max_seq_length)

    def to_dict(self) -> dict:
        return without_sub_config_paths(super().to_dict())


# The settings every sentence-embedding model config has (`SentenceEmbeddingConfig`'s fields), each model's
# checkpoint config file holds them.
EMBEDDING_FIELDS = tuple(name for name in SentenceEmbeddingConfig.__annotations__)


class ContrastiveConfig(SentenceEmbeddingConfig):
    r"""
    Configuration of a [`ContrastiveModel`]: any transformers encoder, a pooler and a projection head.

    Args:
        encoder (`PreTrainedConfig` or `dict`, *optional*):
            Configuration of the encoder (BERT, RoBERTa, DistilBERT, ...). A dict must carry `model_type`;
            `None` gives a default BERT configuration.
        pooler_type (`str`, defaults to `"cls"`):
            A registered pooler (`poolers.py`, `register_pooler`): `cls` (the encoder's pooler layer over [CLS]),
            `cls_before_pooler` (the [CLS] hidden state), `mean`, `max`, `avg_first_last` (mean of the first and last
            layers' token means), `avg_top2`.
        projection_type (`str`, defaults to `"mlp"`):
            `none`, `linear` (one linear layer) or `mlp` (SimCLR's non-linear head g(.)).
        projection_dim (`int`, *optional*):
            Output size of the projection; the encoder's hidden size when unset.
        projection_hidden_size (`int`, *optional*):
            Hidden size of the MLP; the encoder's hidden size when unset.
        projection_layers (`int`, defaults to 2):
            Number of linear layers of the MLP (an activation between each two).
        projection_activation (`str`, defaults to `"relu"`):
            Activation of the MLP, any key of `transformers.activations.ACT2FN`.
        projection_output_activation (`bool`, defaults to `False`):
            Apply the activation after the last layer too (SimCSE's head is one linear layer followed by tanh).
        projection_at_inference (`bool`, defaults to `False`):
            Keep the projection in the embeddings at inference. SimCSE uses its MLP during training only.
        mlm_weight (`float`, defaults to 1.0), cl_weight (`float`, defaults to 1.0):
            Weights of CLEAR's objective L = mlm_weight * L_MLM + cl_weight * L_CL.
        hard_negative_weight (`float`, defaults to 0.0):
            SimCSE's weight added to the logit of each anchor's own hard negative.

    The settings every sentence-embedding model shares (``temperature``, ``contrastive_loss``, ``similarity``,
    ``sub_batch_size``, ``sub_batch_tokens``, ``prompts``, ``default_prompt_name``, ``include_prompt``,
    ``matryoshka_dims``, ``matryoshka_weights``, ``truncate_dim``, ``max_seq_length``, ``normalize_embeddings``) are
    [`SentenceEmbeddingConfig`]'s. A Matryoshka loss compares the embedding the model returns at inference, so a
    projection head must then be kept at inference (``projection_at_inference=True``) or absent.
    """

    model_type = "contrastive"
    # The parts of the loss a model returns, which transformers' Trainer would gather as predictions: they are
    # scalars, not one value per example (`ContrastivePreTrainingOutput`: its `logits` and `embeddings` are kept).
    keys_to_ignore_at_inference = ["cl_loss", "mlm_loss", "negatives_per_query"]
    if SubConfigSpec is not None:
        sub_configs_defaults = {"encoder": SubConfigSpec(config_class=AutoConfig, model_type="bert")}
    else:  # transformers < 5.20: the sub-config is built in __post_init__
        sub_configs = {"encoder": AutoConfig}

    encoder: PreTrainedConfig | dict | None = None
    pooler_type: str = "cls"
    projection_type: str = "mlp"
    projection_dim: int | None = None
    projection_hidden_size: int | None = None
    projection_layers: int = 2
    projection_activation: str = "relu"
    projection_output_activation: bool = False
    projection_at_inference: bool = False
    mlm_weight: float = 1.0
    cl_weight: float = 1.0
    hard_negative_weight: float = 0.0

    def __post_init__(self, **kwargs):
        if SubConfigSpec is None:
            self.encoder = build_sub_config(self.encoder, AutoConfig, model_type="bert")
        if isinstance(self.encoder, PreTrainedConfig):
            # our own copy: the base class resets a sub-config's attention implementation, which must not change
            # the config of a live model the encoder config was taken from
            self.encoder = copy.deepcopy(self.encoder)
        super().__post_init__(**kwargs)
        self._validate_contrastive_fields()

    def _validate_contrastive_fields(self) -> None:
        get_pooler(self.pooler_type)  # a ValueError naming the registered poolers
        if self.projection_type not in PROJECTION_TYPES:
            raise ValueError(
                f"Unknown projection_type {self.projection_type!r}: choose one of {', '.join(PROJECTION_TYPES)}."
            )
        if self.projection_layers < 1:
            raise ValueError(f"projection_layers must be >= 1, got {self.projection_layers}.")
        for name in ("projection_dim", "projection_hidden_size"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be a positive size or None, got {value}.")
        for name in ("mlm_weight", "cl_weight"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}.")
        if self.mlm_weight == 0 and self.cl_weight == 0:
            raise ValueError("mlm_weight and cl_weight are both 0: nothing would be trained; set one of them > 0.")
        if self.matryoshka_dims and self.projection_type != "none" and not self.projection_at_inference:
            raise ValueError(
                f"matryoshka_dims {self.matryoshka_dims} with a training-only projection head: the loss compares the "
                "projected vectors but encode returns the pooled ones, whose first dimensions would not be trained. "
                "Set projection_at_inference=True (truncate the projected embedding) or projection_type='none'."
            )
        self._validate_embedding_settings()  # the compared embedding is the returned one (above)

    def get_text_config(self, decoder=None, encoder=None) -> PreTrainedConfig:
        """The encoder's config: where transformers looks for `vocab_size`, `hidden_size` and the like."""
        return self.encoder

    @property
    def hidden_size(self) -> int:
        """Hidden size of the encoder (read by DeepSpeed's "auto" bucket sizes and by poolers)."""
        return self.encoder.hidden_size

    @property
    def bidirectional_attention(self) -> bool:
        """Whether a decoder encoder attends both ways (LLM2Vec, NV-Embed, gte-Qwen2), as its config's
        ``is_causal=False`` says: set it (``ContrastiveConfig(..., bidirectional_attention=True)``, an override of
        ``from_pretrained``, ``--bidirectional_attention``) and the encoder's config records it, where `AutoModel` and
        sentence-transformers read it (`set_bidirectional_attention`). True for encoders that attend both ways (BERT's
        kind), False for other decoders."""
        if self.encoder.model_type in BIDIRECTIONAL_DECODERS:
            return getattr(self.encoder, "is_causal", True) is False
        return self.encoder.model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES and not self.encoder.is_decoder

    @bidirectional_attention.setter
    def bidirectional_attention(self, value: bool) -> None:
        set_bidirectional_attention(self.encoder, bool(value))

    @property
    def encoder_dropout(self) -> float | None:
        """The encoder's dropout probability, SimCSE's noise between two views of a sentence: every dropout
        probability its config has (`ENCODER_DROPOUT_FIELDS`: BERT's hidden and attention dropout, 0.1 in SimCSE; a
        decoder's ``attention_dropout``, the only one Llama, Mistral and Qwen2 have, 0 as released: LLM2Vec trains
        SimCSE on them with 0.3). Set it (``ContrastiveConfig(..., encoder_dropout=0.3)``, an override of
        ``from_pretrained``, ``--encoder_dropout``) and the encoder's config.json records it. None when its
        probabilities differ, or it has none."""
        values = {getattr(self.encoder, name) for name in ENCODER_DROPOUT_FIELDS if hasattr(self.encoder, name)}
        return values.pop() if len(values) == 1 else None

    @encoder_dropout.setter
    def encoder_dropout(self, value: float) -> None:
        if not 0.0 <= value < 1.0:
            raise ValueError(f"encoder_dropout must be in [0, 1), got {value}.")
        names = [name for name in ENCODER_DROPOUT_FIELDS if hasattr(self.encoder, name)]
        if not names:
            raise ValueError(
                f"encoder_dropout: a {self.encoder.model_type} config has none of the dropout settings "
                f"{', '.join(ENCODER_DROPOUT_FIELDS)}; set its own in the encoder's config.json."
            )
        for name in names:
            setattr(self.encoder, name, float(value))

    @property
    def embedding_size(self) -> int:
        """Size of the sentence embeddings the model returns at inference."""
        if self.projection_type != "none" and self.projection_at_inference:
            return self.projection_dim or self.encoder.hidden_size
        return self.encoder.hidden_size


def validate_embedding_dims(config, embedding_size: int) -> None:
    """Check (and normalise to lists) a config's ``matryoshka_dims``, ``matryoshka_weights`` and ``truncate_dim``
    against the size of the embeddings its loss compares; shared by every model config."""
    dims, weights = config.matryoshka_dims, config.matryoshka_weights
    if dims is not None:
        if isinstance(dims, int) or not len(dims):
            raise ValueError(f"matryoshka_dims must be a list of sizes such as [384, 256, 128, 64], got {dims!r}.")
        dims = [int(dim) for dim in dims]
        bad = [dim for dim in dims if not 0 < dim <= embedding_size]
        if bad or len(set(dims)) != len(dims):
            raise ValueError(
                f"matryoshka_dims {dims}: each must be a distinct size in 1..{embedding_size} (the size of the "
                "embeddings the loss compares)."
            )
        config.matryoshka_dims = dims
    if weights is not None:
        if dims is None or len(weights) != len(dims):
            raise ValueError(
                f"matryoshka_weights {list(weights)} needs one weight per Matryoshka dimension ({dims or 'none set'})."
            )
        if any(weight < 0 for weight in weights):
            raise ValueError(f"matryoshka_weights must be >= 0, got {list(weights)}.")
        config.matryoshka_weights = [float(weight) for weight in weights]
    if config.truncate_dim is not None and not 0 < config.truncate_dim <= embedding_size:
        raise ValueError(
            f"truncate_dim must be a size in 1..{embedding_size} (the size of the model's embeddings) or None, got "
            f"{config.truncate_dim}: an embedding cannot be truncated to more dimensions than it has."
        )


# The fields a checkpoint's contrastive_config.json holds: every model option except the encoder (saved as the
# checkpoint's own config.json).
# The fields that shape the pooler and projection (what the weights are), apart from the loss and data settings.
HEAD_FIELDS = (
    "pooler_type",
    "projection_type",
    "projection_dim",
    "projection_hidden_size",
    "projection_layers",
    "projection_activation",
    "projection_output_activation",
    "projection_at_inference",
)
CONFIG_FIELDS = (*HEAD_FIELDS, *EMBEDDING_FIELDS, "mlm_weight", "cl_weight", "hard_negative_weight")


def validate_similarity(value) -> None:
    if value not in SIMILARITIES:
        raise ValueError(f"Unknown similarity {value!r}: choose one of {', '.join(SIMILARITIES)}.")


def validate_max_seq_length(value) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"max_seq_length must be a positive number of tokens or None, got {value!r}.")


def inference_max_length(config, encoder_config) -> int:
    """The longest input a model reads at inference: its config's ``max_seq_length``, else the encoder's position
    embeddings, at most 512 (what sentence-transformers' ``max_seq_length`` is written as)."""
    limit = getattr(config, "max_seq_length", None)
    return limit or min(512, getattr(encoder_config, "max_position_embeddings", 512))


__all__ = [
    "SentenceEmbeddingConfig",
    "ContrastiveConfig",
    "CONFIG_FIELDS",
    "EMBEDDING_FIELDS",
    "HEAD_FIELDS",
    "without_sub_config_paths",
    "POOLER_TYPES",
    "PROJECTION_TYPES",
    "CONTRASTIVE_LOSSES",
    "validate_embedding_dims",
    "ENCODING_PATHS",
    "BIDIRECTIONAL_DECODERS",
    "set_bidirectional_attention",
    "ENCODER_DROPOUT_FIELDS",
    "parse_sub_batch_size",
    "parse_encoding_fields",
    "validate_max_seq_length",
    "validate_similarity",
    "inference_max_length",
]
