"""A pooler, an in-batch loss and an augmentation are each one registration: a toy one of each, defined and
registered here (as a user's module would), is seen by the config, the model, the sentence-transformers export, the
model card and the scripts' ``--help`` and flags; the fixtures unregister them, so no other test sees them."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sentence_transformers import SentenceTransformer
from transformers import AutoTokenizer, HfArgumentParser

from contrastive_hf import ContrastiveConfig, ContrastiveForPreTraining, ContrastiveModel
from contrastive_hf.commands.arguments import ContrastiveModelArguments, parse_arguments
from contrastive_hf.data.augmentations import (
    AUGMENTATION_NAMES,
    Augmentation,
    add_del_token,
    build_augmentation,
    needs_del_token,
    register_augmentation,
    unregister_augmentation,
)
from contrastive_hf.data.collators import ContrastiveDataCollator
from contrastive_hf.data.token_batch import TokenBatch
from contrastive_hf.hub.model_card import ModelCardInfo, render_model_card, text_embeddings_inference_caveats
from contrastive_hf.models.configuration_contrastive import CONTRASTIVE_LOSSES, POOLER_TYPES
from contrastive_hf.models.losses import info_nce
from contrastive_hf.models.objectives import InBatchViews, in_batch_loss, register_loss, unregister_loss
from contrastive_hf.models.poolers import (
    PoolingInputs,
    pooler_for_sentence_transformers_mode,
    register_pooler,
    unregister_pooler,
)
from contrastive_hf.models.registry import Registry
from contrastive_hf.models.sentence_transformers_files import sentence_transformers_unsupported_reason

from conftest import DEMO_TOKENIZER, example_script, tiny_bert_config

SENTENCES = ["a man is playing a guitar .", "the cat sat on the mat", "a woman slices an onion ."]


# --- the toy entries, as a user's module would write them -------------------------------------------------------


def pool_first_token(inputs: PoolingInputs) -> torch.Tensor:
    return inputs.first(inputs.last_hidden)  # (B, h)


def pool_mean_and_max(inputs: PoolingInputs) -> torch.Tensor:
    return (inputs.mean(inputs.last_hidden) + inputs.maximum(inputs.last_hidden)) / 2  # (B, h)


def plain_info_nce(views: InBatchViews):
    """InfoNCE of the queries against every positive, nothing masked: the built-in one without sentence ids."""
    loss = info_nce(views.embeddings[:, 0], views.everyone[:, 1], views.temperature, positive_offset=views.offset)
    return loss, views.everyone.shape[0] - 1


class FirstWordDeletion(Augmentation):
    """Each sentence's first word becomes [DEL]."""

    name = "toy_first_word_deletion"
    needs_del_token = True

    def __init__(self, del_token_id: int):
        self.del_token_id = del_token_id

    def apply(self, batch: TokenBatch, keys: np.ndarray) -> TokenBatch:
        ids = batch.ids.copy()
        first = (~batch.is_special).argmax(axis=1)  # (N,) the first non-special position
        has_word = (~batch.is_special).any(axis=1)
        rows = np.flatnonzero(has_word)
        ids[rows, first[rows]] = self.del_token_id
        return TokenBatch(ids, batch.is_special | (ids == self.del_token_id), batch.lengths, batch.pad_id)


@pytest.fixture
def toy_poolers():
    register_pooler(
        "toy_first_token",
        pool_first_token,
        "the first token's state (a toy)",
        sentence_transformers_mode="cls_token",
        served_by_text_embeddings_inference=True,
    )
    register_pooler("toy_mean_max", pool_mean_and_max, "the average of the token mean and maximum (a toy)")
    yield
    unregister_pooler("toy_first_token")
    unregister_pooler("toy_mean_max")


@pytest.fixture
def toy_loss():
    register_loss("toy_info_nce", plain_info_nce, "InfoNCE with nothing masked (a toy)")
    yield
    unregister_loss("toy_info_nce")


@pytest.fixture
def toy_augmentation():
    register_augmentation(
        FirstWordDeletion.name,
        FirstWordDeletion,
        "the first word replaced by [DEL] (a toy)",
        lambda settings: FirstWordDeletion(settings.del_token_id),
    )
    yield
    unregister_augmentation(FirstWordDeletion.name)


def tiny_model(**config) -> ContrastiveModel:
    torch.manual_seed(0)
    encoder = tiny_bert_config(
        vocab_size=len(AutoTokenizer.from_pretrained(DEMO_TOKENIZER)), max_position_embeddings=128
    )
    return ContrastiveModel(ContrastiveConfig(encoder=encoder, projection_type="none", **config)).eval()


def card_of(model, **info) -> str:
    values = dict(
        method="CLEAR",
        model_name="toy",
        base_model=None,
        augmentation="del_word",
        training_data="toy",
        hyperparameters={},
    )
    return str(render_model_card(model, ModelCardInfo(**{**values, **info})))


# --- the registry itself -----------------------------------------------------------------------------------------


def test_a_registry_refuses_a_second_entry_of_a_name_and_names_the_known_ones_for_an_unknown_one():
    registry = Registry("widget", "register_widget")
    registry.add("a", 1)
    with pytest.raises(ValueError, match="registered already; pass replace=True to register_widget"):
        registry.add("a", 2)
    registry.add("a", 2, replace=True)
    with pytest.raises(ValueError, match=r"Unknown widget 'b': choose one of a \(one of your own: register it with "):
        registry.get("b")
    with pytest.raises(ValueError, match="without"):
        registry.add("a+b", 3)  # '+' and ',' compose names on the command line
    view = registry.names_view()
    registry.add("c", 3)
    assert view == ("a", "c") and "c" in view and len(view) == 2  # a view reads the registry at each use


def test_the_built_in_names_are_the_0_2_lists():
    assert POOLER_TYPES == ("cls", "cls_before_pooler", "mean", "max", "avg_first_last", "avg_top2")
    assert set(CONTRASTIVE_LOSSES) == {"nt_xent", "info_nce"}
    assert AUGMENTATION_NAMES == ("dropout", "del_word", "del_span", "reorder", "subs")
    # evaluation/glue.py's inverse mapping: a Pooling module alone never applies BERT's pooler layer
    assert pooler_for_sentence_transformers_mode("cls_token") == "cls_before_pooler"
    assert pooler_for_sentence_transformers_mode("mean_tokens") == "mean"
    assert pooler_for_sentence_transformers_mode("lasttoken") is None


# --- a pooler ----------------------------------------------------------------------------------------------------


@pytest.mark.usefixtures("toy_poolers")
def test_a_registered_pooler_is_accepted_by_the_config_and_pools_in_the_model():
    assert "toy_first_token" in POOLER_TYPES  # the 0.2 constant, imported before the registration, lists it
    model = tiny_model(pooler_type="toy_first_token")
    reference = tiny_model(pooler_type="cls_before_pooler")  # the same weights (same seed)
    tokenizer = AutoTokenizer.from_pretrained(DEMO_TOKENIZER)
    ours = model.encode(SENTENCES, tokenizer=tokenizer, convert_to_tensor=True)
    torch.testing.assert_close(ours, reference.encode(SENTENCES, tokenizer=tokenizer, convert_to_tensor=True))
    with pytest.raises(ValueError, match=r"Unknown pooler_type 'toy_missing'.*toy_first_token, toy_mean_max"):
        ContrastiveConfig(pooler_type="toy_missing")


@pytest.mark.usefixtures("toy_poolers")
def test_a_registered_pooler_with_a_mode_is_exported_to_sentence_transformers(tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(DEMO_TOKENIZER)
    model = tiny_model(pooler_type="toy_first_token")
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    theirs = SentenceTransformer(str(tmp_path), device="cpu").encode(SENTENCES)
    ours = ContrastiveModel.from_pretrained(tmp_path).encode(SENTENCES, tokenizer=tokenizer)
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-6)
    assert text_embeddings_inference_caveats(model) == []  # registered as served by TEI


@pytest.mark.usefixtures("toy_poolers")
def test_a_registered_pooler_without_a_mode_says_why_sentence_transformers_refuses_it(tmp_path):
    model = tiny_model(pooler_type="toy_mean_max")
    reason = sentence_transformers_unsupported_reason(model)
    assert "toy_mean_max" in reason and "the average of the token mean and maximum (a toy)" in reason
    model.save_pretrained(tmp_path)  # written naming the pooler, which sentence-transformers then refuses
    with pytest.raises(ValueError, match="toy_mean_max"):
        SentenceTransformer(str(tmp_path), device="cpu")
    assert "it pools with cls or mean only, not toy_mean_max" in text_embeddings_inference_caveats(model)


@pytest.mark.usefixtures("toy_poolers")
def test_the_model_card_describes_a_registered_pooler():
    card = card_of(tiny_model(pooler_type="toy_first_token"))
    assert "| Pooler | `toy_first_token`: the first token's state (a toy) |" in card


# --- a loss ------------------------------------------------------------------------------------------------------


@pytest.mark.usefixtures("toy_loss")
def test_a_registered_loss_is_accepted_by_the_config_and_trains_the_model():
    assert "toy_info_nce" in CONTRASTIVE_LOSSES
    views = torch.randn(6, 2, 16)
    toy, negatives = in_batch_loss(views, "toy_info_nce", temperature=0.05)
    reference, reference_negatives = in_batch_loss(views, "info_nce", temperature=0.05)
    torch.testing.assert_close(toy, reference)
    assert float(negatives) == float(reference_negatives) == 5.0

    torch.manual_seed(0)
    config = ContrastiveConfig(encoder=tiny_bert_config(vocab_size=60), contrastive_loss="toy_info_nce", mlm_weight=0)
    model = ContrastiveForPreTraining(config)
    ids = torch.randint(5, 60, (4, 2, 8))
    output = model(input_ids=ids, attention_mask=torch.ones_like(ids))
    output.loss.backward()
    assert torch.isfinite(output.loss) and model.contrastive.encoder.embeddings.word_embeddings.weight.grad is not None
    card = card_of(model)
    assert "L_CL (toy_info_nce: InfoNCE with nothing masked (a toy))" in card
    with pytest.raises(ValueError, match=r"Unknown contrastive_loss 'toy_missing'.*toy_info_nce.* before training"):
        in_batch_loss(views, "toy_missing", temperature=0.05)


def test_a_checkpoint_trained_with_a_users_loss_loads_and_encodes_without_it_and_trains_only_with_it(
    tokenizer, tmp_path
):
    """Loading a checkpoint refused a loss nobody had registered, though loading and encoding never compute it; only
    training needs it, and is refused before the first step, naming it and what to import."""
    from datasets import Dataset

    from contrastive_hf.data.collators import ContrastiveDataCollator
    from contrastive_hf.training.trainer import ContrastiveTrainer
    from contrastive_hf.training.training_args import ContrastiveTrainingArguments

    register_loss("toy_users_loss", plain_info_nce, "a user's loss (a toy)")
    try:
        model = ContrastiveForPreTraining(
            ContrastiveConfig(encoder=tiny_bert_config(vocab_size=len(tokenizer)), contrastive_loss="toy_users_loss")
        )
        model.save_pretrained(tmp_path / "trained")
        tokenizer.save_pretrained(tmp_path / "trained")
    finally:
        unregister_loss("toy_users_loss")
    expected = model.contrastive.eval().encode(SENTENCES, tokenizer=tokenizer)
    for model_class in (ContrastiveModel, ContrastiveForPreTraining):
        loaded = model_class.from_pretrained(tmp_path / "trained")
        assert loaded.config.contrastive_loss == "toy_users_loss"
        np.testing.assert_allclose(loaded.encode(SENTENCES), expected, atol=1e-5)
    with pytest.raises(ValueError) as error:
        ContrastiveTrainer(
            model=ContrastiveForPreTraining.from_pretrained(tmp_path / "trained"),
            args=ContrastiveTrainingArguments(output_dir=str(tmp_path / "run"), report_to="none", use_cpu=True),
            train_dataset=Dataset.from_dict({"text": SENTENCES}),
            data_collator=ContrastiveDataCollator(tokenizer, augmentation="dropout", mlm=False),
            processing_class=tokenizer,
        )
    assert str(error.value) == (
        "The model to train has contrastive_loss 'toy_users_loss' (set in its config, or in the checkpoint's "
        "contrastive_config.json it was loaded from), which is not registered: import the module that registers it "
        "(contrastive_hf.models.objectives.register_loss) before training, or train with one of nt_xent, info_nce "
        "(--contrastive_loss)."
    )


# --- an augmentation ---------------------------------------------------------------------------------------------


@pytest.mark.usefixtures("toy_augmentation")
def test_a_registered_augmentation_makes_views_and_its_class_says_it_needs_del(tokenizer):
    name = FirstWordDeletion.name
    assert name in AUGMENTATION_NAMES
    assert needs_del_token(name) and needs_del_token(f"{name}+reorder") and not needs_del_token("reorder")
    with pytest.raises(ValueError, match=r"needs the \[DEL\] token"):
        build_augmentation(name, tokenizer)
    del_id = add_del_token(tokenizer)
    collator = ContrastiveDataCollator(tokenizer, augmentation=f"{name}+reorder", mlm=False, seed=0)
    batch = collator([{"text": text} for text in SENTENCES])
    assert (batch["input_ids"] == del_id).any(dim=-1).all()  # every view lost its first word
    described = collator.card_description()
    assert "the first word replaced by [DEL] (a toy)" in described["views_description"]
    card = card_of(
        tiny_model(), augmentation=described["views"], augmentation_description=described["views_description"]
    )
    assert f"`{name}+reorder`: {name}: the first word replaced by [DEL] (a toy); reorder: " in card


# --- the command line --------------------------------------------------------------------------------------------


@pytest.mark.usefixtures("toy_poolers", "toy_loss")
def test_the_scripts_flags_take_and_list_registered_poolers_and_losses(capsys):
    parser = lambda: HfArgumentParser((ContrastiveModelArguments,))  # noqa: E731
    (arguments,) = parse_arguments(parser(), ["--pooler_type", "toy_mean_max", "--contrastive_loss", "toy_info_nce"])
    assert arguments.config_overrides() == {"pooler_type": "toy_mean_max", "contrastive_loss": "toy_info_nce"}
    with pytest.raises(SystemExit) as exit_:
        parse_arguments(parser(), ["--pooler_type", "toy_missing"])
    assert exit_.value.code == 2
    assert "Unknown pooler_type 'toy_missing'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        parse_arguments(parser(), ["--help"])
    assert exit_.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps the help
    assert "toy_mean_max: the average of the token mean and maximum (a toy)" in text
    assert "toy_info_nce: InfoNCE with nothing masked (a toy)" in text


@pytest.mark.usefixtures("toy_augmentation")
def test_run_clear_help_lists_a_registered_augmentation(capsys):
    with pytest.raises(SystemExit) as exit_:
        example_script("run_clear").main(["--help"])
    assert exit_.value.code == 0
    assert FirstWordDeletion.name in " ".join(capsys.readouterr().out.split())
