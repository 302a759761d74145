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
    Hyperparameter,
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
from contrastive_hf.models.objectives import (
    ContrastiveLoss,
    InBatchViews,
    InfoNCELoss,
    build_loss,
    register_loss,
    unregister_loss,
)
from contrastive_hf.models.poolers import (
    PoolingInputs,
    pooler_for_sentence_transformers_mode,
    register_pooler,
    unregister_pooler,
)
from contrastive_hf.models.registry import Registry
from contrastive_hf.models.sentence_transformers_files import sentence_transformers_unsupported_reason
from contrastive_hf.recipes.clear import run as clear_run

from conftest import DEMO_TOKENIZER, example_script, tiny_bert_config

SENTENCES = ["a man is playing a guitar .", "the cat sat on the mat", "a woman slices an onion ."]


# --- the toy entries, as a user's module would write them -------------------------------------------------------


def pool_first_token(inputs: PoolingInputs) -> torch.Tensor:
    return inputs.first(inputs.last_hidden)  # (B, h)


def pool_mean_and_max(inputs: PoolingInputs) -> torch.Tensor:
    return (inputs.mean(inputs.last_hidden) + inputs.maximum(inputs.last_hidden)) / 2  # (B, h)


class PlainInfoNCE(ContrastiveLoss):
    """InfoNCE of the queries against every positive, nothing masked: the built-in one without sentence ids."""

    name = "toy_info_nce"
    description = "InfoNCE with nothing masked (a toy)"

    def compute(self, views: InBatchViews):
        loss = info_nce(views.embeddings[:, 0], views.everyone[:, 1], self.temperature, positive_offset=views.offset)
        return loss, views.everyone.shape[0] - 1


class UsersLoss(PlainInfoNCE):
    name = "toy_users_loss"
    description = "a user's loss (a toy)"


class FirstWordDeletion(Augmentation):
    """Each sentence's first ``words`` tokens become [DEL] (a toy with one hyper-parameter)."""

    name = "toy_first_word_deletion"
    description = "the first words replaced by [DEL] (a toy)"
    hyperparameters = (Hyperparameter("toy_first_words", "words", 1, "toy: the first words deleted."),)
    needs_del_token = True

    def __init__(self, del_token_id: int, words: int = 1):
        self.del_token_id = del_token_id
        self.words = words

    def apply(self, batch: TokenBatch, keys: np.ndarray) -> TokenBatch:
        word = ~batch.is_special
        first = word & (np.cumsum(word, axis=1) <= self.words)  # the first `words` non-special positions
        ids = np.where(first, self.del_token_id, batch.ids)
        return TokenBatch(ids, batch.is_special | first, batch.lengths, batch.pad_id)


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
    register_loss(PlainInfoNCE)
    yield
    unregister_loss(PlainInfoNCE.name)


@pytest.fixture
def toy_augmentation():
    register_augmentation(FirstWordDeletion)
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
    assert POOLER_TYPES == ("cls", "cls_before_pooler", "mean", "last_token", "max", "avg_first_last", "avg_top2")
    assert set(CONTRASTIVE_LOSSES) == {"nt_xent", "info_nce"}
    assert AUGMENTATION_NAMES == ("dropout", "del_word", "del_span", "reorder", "subs")
    # evaluation/glue.py's inverse mapping: a Pooling module alone never applies BERT's pooler layer
    assert pooler_for_sentence_transformers_mode("cls_token") == "cls_before_pooler"
    assert pooler_for_sentence_transformers_mode("mean_tokens") == "mean"
    assert pooler_for_sentence_transformers_mode("lasttoken") == "last_token"
    assert pooler_for_sentence_transformers_mode("weightedmean_tokens") is None


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
    toy, negatives = PlainInfoNCE(temperature=0.05)(views)
    reference, reference_negatives = InfoNCELoss(temperature=0.05)(views)
    torch.testing.assert_close(toy, reference)
    assert float(negatives) == float(reference_negatives) == 5.0

    torch.manual_seed(0)
    config = ContrastiveConfig(encoder=tiny_bert_config(vocab_size=60), contrastive_loss="toy_info_nce", mlm_weight=0)
    model = ContrastiveForPreTraining(config)
    assert isinstance(model.loss_fn, PlainInfoNCE) and model.loss_fn.temperature == config.temperature
    ids = torch.randint(5, 60, (4, 2, 8))
    output = model(input_ids=ids, attention_mask=torch.ones_like(ids))
    output.loss.backward()
    assert torch.isfinite(output.loss) and model.contrastive.encoder.embeddings.word_embeddings.weight.grad is not None
    card = card_of(model)
    assert "L_CL (toy_info_nce: InfoNCE with nothing masked (a toy))" in card
    with pytest.raises(ValueError, match=r"Unknown contrastive_loss 'toy_missing'.*toy_info_nce.* before training"):
        build_loss(ContrastiveConfig(encoder=tiny_bert_config(vocab_size=60), contrastive_loss="toy_missing"))


def test_a_checkpoint_trained_with_a_users_loss_loads_and_encodes_without_it_and_trains_only_with_it(
    tokenizer, tmp_path
):
    """Loading a checkpoint refused a loss nobody had registered, though loading and encoding never compute it; only
    training needs it, and is refused before the first step, naming it and what to import."""
    from datasets import Dataset

    from contrastive_hf.data.collators import ContrastiveDataCollator
    from contrastive_hf.training.trainer import ContrastiveTrainer
    from contrastive_hf.training.training_args import ContrastiveTrainingArguments

    register_loss(UsersLoss)
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
    # registered once the model is loaded: the trainer builds the loss the config names, and it trains
    loaded = ContrastiveForPreTraining.from_pretrained(tmp_path / "trained")
    assert loaded.loss_fn is None
    register_loss(UsersLoss)
    try:
        trainer = ContrastiveTrainer(
            model=loaded,
            args=ContrastiveTrainingArguments(
                output_dir=str(tmp_path / "run"), report_to="none", use_cpu=True, max_steps=1, save_strategy="no"
            ),
            train_dataset=Dataset.from_dict({"text": SENTENCES}),
            data_collator=ContrastiveDataCollator(tokenizer, augmentation="dropout", mlm=False),
            processing_class=tokenizer,
        )
        assert isinstance(loaded.loss_fn, UsersLoss) and trainer.loss_fn is loaded.loss_fn
        trainer.train()
    finally:
        unregister_loss("toy_users_loss")
    assert trainer.state.global_step == 1


def test_a_loss_handed_to_a_model_that_holds_none_is_refused_naming_the_models_that_do(tokenizer, tmp_path):
    from datasets import Dataset
    from transformers import BertForMaskedLM

    from contrastive_hf.training.trainer import ContrastiveTrainer
    from contrastive_hf.training.training_args import ContrastiveTrainingArguments

    with pytest.raises(ValueError, match=r"loss_fn \(ContrastiveForPreTraining, DualEncoderModel, SelfGuidedModel\); "
                       r"BertForMaskedLM has none"):  # fmt: skip
        ContrastiveTrainer(
            model=BertForMaskedLM(tiny_bert_config(vocab_size=len(tokenizer))),
            args=ContrastiveTrainingArguments(output_dir=str(tmp_path), report_to="none", use_cpu=True),
            train_dataset=Dataset.from_dict({"text": SENTENCES}),
            loss=InfoNCELoss(),
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
    assert "the first words replaced by [DEL] (a toy)" in described["views_description"]
    card = card_of(
        tiny_model(), augmentation=described["views"], augmentation_description=described["views_description"]
    )
    assert f"`{name}+reorder`: {name}: the first words replaced by [DEL] (a toy); reorder: " in card
    assert (
        "reorder: pairs of spans swapped (CLEAR), with toy_first_words=1, num_reordered_pairs=5, span_ratio=0.05"
        in card
    )  # the values it ran with


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
def test_run_clear_help_lists_a_registered_augmentation_and_its_flag(capsys):
    with pytest.raises(SystemExit) as exit_:
        example_script("run_clear").main(["--help"])
    assert exit_.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert FirstWordDeletion.name in text
    assert "--toy_first_words TOY_FIRST_WORDS" in text and "toy: the first words deleted. (default: 1)" in text


@pytest.mark.usefixtures("toy_augmentation")
def test_a_registered_augmentation_s_flag_reaches_its_views_and_the_card(tokenizer):
    """One class and one registration: its hyper-parameter is a flag of run_clear (registered after the script's
    arguments were defined), and the value given is the one its views and the card use."""
    parsed = parse_arguments(
        HfArgumentParser(clear_run.ARGUMENTS),
        ["--augmentations", f"{FirstWordDeletion.name}+del_span", "--toy_first_words", "2", "--span_ratio", "0.2",
         "--output_dir", "unused"],
    )  # fmt: skip
    view_settings = vars(parsed[4])
    assert view_settings["toy_first_words"] == 2 and view_settings["span_ratio"] == 0.2
    del_id = add_del_token(tokenizer)
    collator = ContrastiveDataCollator(
        tokenizer, augmentation=parsed[3].augmentations, view_settings=view_settings, mlm=False, seed=0
    )
    first, spans = collator.augmentation.parts
    assert (first.words, spans.span_ratio, spans.num_spans) == (2, 0.2, 5)
    batch = collator([{"text": text} for text in SENTENCES])
    assert (batch["input_ids"][:, :, 1:3] == del_id).all()  # the first two words of every view
    assert collator.card_description()["view_settings"] == {
        "toy_first_words": 2,
        "num_deleted_spans": 5,
        "span_ratio": 0.2,
    }


def test_an_augmentation_setting_nothing_declares_or_one_flag_with_two_defaults_is_refused(tokenizer):
    with pytest.raises(ValueError, match=r"Unknown augmentation setting\(s\) 'span_ration'.*del_word_probability"):
        build_augmentation("reorder", tokenizer, span_ration=0.1)

    class WideSpans(FirstWordDeletion):
        name = "toy_wide_spans"
        hyperparameters = (Hyperparameter("span_ratio", "words", 0.5, "another default"),)

    with pytest.raises(ValueError, match="'span_ratio' .default 0.5. is del_span's already, with default 0.05"):
        register_augmentation(WideSpans)
    assert "toy_wide_spans" not in AUGMENTATION_NAMES
