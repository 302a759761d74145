from __future__ import annotations

import json

import pytest
from huggingface_hub import ModelCard

from contrastive_hf import ContrastiveConfig, ContrastiveForPreTraining
from contrastive_hf.hub.method_cards import METHODS, register_method_card
from contrastive_hf.hub.model_card import ModelCardInfo, render_model_card, write_model_card

from conftest import tiny_bert_config
from helpers.builders import SENTENCES, make_trainer


def make_info(**overrides):
    values = dict(
        method="CLEAR",
        model_name="clear-demo",
        base_model=None,
        augmentation="del_word",
        training_data="wiki1m_sample.txt",
        hyperparameters={"steps": 10, "batch size": 64, "learning rate": 5e-4},
        eval_results={"stsb_dev": {"spearman": 61.234}},
    )
    values.update(overrides)
    return ModelCardInfo(**values)


def test_card_states_the_run_and_round_trips_through_huggingface_hub(tmp_path):
    model = ContrastiveForPreTraining(ContrastiveConfig(encoder=tiny_bert_config(vocab_size=50), temperature=0.07))
    path = write_model_card(tmp_path, model, make_info())
    card = ModelCard.load(path)
    text = card.text
    for expected in ("CLEAR", "Wu et al., 2020", "`del_word`", "0.07", "wiki1m_sample.txt", "61.23", "@article"):
        assert expected in text, expected
    assert card.data.pipeline_tag == "sentence-similarity"
    (result,) = card.data.eval_results
    # sentence-transformers' conventions: spearman_cosine between 0 and 1, a plain task name for a local file
    assert result.metric_type == "spearman_cosine" and result.metric_value == 0.6123
    assert result.dataset_split == "validation" and result.dataset_type == "sts-dev"
    assert card.data.library_name == "sentence-transformers" and "sentence-transformers" in card.data.tags
    assert str(tmp_path) not in path.read_text()


def test_card_with_a_hub_base_model_and_no_results():
    model = ContrastiveForPreTraining(ContrastiveConfig(encoder=tiny_bert_config(vocab_size=50)))
    card = render_model_card(model, make_info(base_model="bert-base-uncased", eval_results={}, method="SimCSE"))
    assert card.data.base_model == "bert-base-uncased"
    assert "No evaluation was run" in card.text
    assert "Gao et al., 2021" in card.text


def test_card_lists_sts_transfer_and_average_results_with_their_hub_data_sets():
    model = ContrastiveForPreTraining(ContrastiveConfig(encoder=tiny_bert_config(vocab_size=50)))
    results = {"sts12": {"spearman": 61.0}, "sickr": {"spearman": 70.5}, "mr": {"accuracy": 78.25}}
    results["avg_sts"] = {"spearman": 65.75}
    card = ModelCard(str(render_model_card(model, make_info(eval_results=results))))
    assert "| avg_sts | spearman x 100 | 65.75 |" in card.text and "| mr | accuracy x 100 | 78.25 |" in card.text
    by_data_set = {result.dataset_type: result for result in card.data.eval_results}
    assert set(by_data_set) == {"sts12", "sickr", "mr"}  # no Hub data set claimed for local files
    assert by_data_set["mr"].task_type == "text-classification" and by_data_set["mr"].metric_type == "accuracy"


def test_a_trainer_used_from_python_writes_a_card_of_its_run_whose_metadata_the_hub_parses(tokenizer, tmp_path):
    """No script, no ModelCardInfo: the card comes from the trainer's model, collator, arguments and evaluations."""
    from huggingface_hub import ModelCardData, metadata_load

    from contrastive_hf.evaluation.sts import STSData

    trainer = make_trainer(tokenizer, tmp_path, augmentation="dropout", mlm_weight=0.0, max_steps=2)
    pairs = STSData(SENTENCES[:8], SENTENCES[8:16], [float(i % 5) for i in range(8)])
    trainer.eval_dataset = {"stsb": pairs}
    trainer.train()
    trainer.evaluate()
    trainer.save_model()
    trainer.create_model_card(license="apache-2.0", language="en", dataset_tags="sentence-transformers/wikipedia")
    card_path = tmp_path / "README.md"
    metadata = metadata_load(card_path)
    data = ModelCardData(**metadata)  # huggingface_hub's own parser: raises on a malformed model-index
    assert data.library_name == "sentence-transformers" and data.license == "apache-2.0" and data.language == "en"
    assert data.datasets == ["sentence-transformers/wikipedia"]
    results = {result.metric_type: result for result in data.eval_results}
    assert set(results) == {"spearman_cosine", "pearson_cosine"}  # the last STS-B dev evaluation of the run
    assert all(r.dataset_type == "sts-dev" and abs(r.metric_value) <= 1 for r in results.values())
    text = card_path.read_text()
    assert "Unsupervised SimCSE contrasts two encodings" in text and "`dropout`" in text  # method from the collator
    assert "transformers" in text.split("| Frameworks |")[1].split("\n")[0]  # framework versions
    assert "trained from scratch on an unknown dataset" not in text  # not the Trainer's generic card
    assert str(tmp_path) not in text


@pytest.mark.parametrize(
    ("finetuned_from", "base_model"),
    [
        ("{tmp}", None),  # run_mlm.py's --model_name_or_path of a local folder
        ("{tmp}/moved/elsewhere", None),  # a local path that is gone by the time the card is written
        ("./models/bert", None),
        ("bert-base-uncased", "bert-base-uncased"),  # a Hub id is the card's base model
    ],
)
def test_the_card_names_a_hub_base_model_and_no_local_path(tokenizer, tmp_path, finetuned_from, base_model):
    trainer = make_trainer(tokenizer, tmp_path / "out", augmentation="dropout", mlm_weight=0.0, max_steps=1)
    trainer.create_model_card(finetuned_from=finetuned_from.format(tmp=tmp_path), tasks="fill-mask")
    card = ModelCard.load(tmp_path / "out" / "README.md")
    assert card.data.base_model == base_model
    assert str(tmp_path) not in card.content and "./models" not in card.content


def test_a_registered_method_gets_its_text_and_an_unknown_one_the_generic_text():
    model = ContrastiveForPreTraining(ContrastiveConfig(encoder=tiny_bert_config(vocab_size=50)))
    card = {"name": "Test Method", "description": "Pulls test pairs together.", "citation_short": "Doe, 2031"}
    with pytest.raises(ValueError, match=r"needs the string fields name, description, citation_short, bibtex; "
                       r"'Test Method' lacks bibtex"):  # fmt: skip
        register_method_card(card)
    register_method_card({**card, "bibtex": "@misc{doe2031}"})
    try:
        text = render_model_card(model, make_info(method="Test Method")).text
        assert "Pulls test pairs together." in text and "Doe, 2031" in text and "@misc{doe2031}" in text
    finally:
        del METHODS["Test Method"]
    text = render_model_card(model, make_info(method="Test Method")).text
    assert "Pulls test pairs together." not in text and "with the other examples of the batch as negatives" in text


def test_save_model_writes_the_card_beside_the_model_as_readme_says(tokenizer, tmp_path):
    """`trainer.save_model()` from Python writes the run's card (README.md), in its own output folder too."""

    trainer = make_trainer(tokenizer, tmp_path, augmentation="dropout", mlm_weight=0.0, max_steps=1)
    trainer.train()
    trainer.save_model()
    assert "Unsupervised SimCSE" in (tmp_path / "README.md").read_text()
    trainer.save_model(str(tmp_path / "elsewhere"))
    assert "Unsupervised SimCSE" in (tmp_path / "elsewhere" / "README.md").read_text()


def test_a_clear_checkpoint_s_tokenizer_config_reads_in_transformers_4_and_5(tokenizer, tmp_path):
    """transformers 5 writes CLEAR's [DEL] as a list under extra_special_tokens, which transformers 4.57 (the one
    optimum installs beside) takes for a dict and fails on; saved under additional_special_tokens, both read it and
    keep [DEL] special (checked by hand in a transformers 4.57 environment; here, the file's shape and transformers
    5's reading)."""
    from transformers import AutoTokenizer

    from contrastive_hf.data.augmentations import DEL_TOKEN, add_del_token

    add_del_token(tokenizer)
    trainer = make_trainer(tokenizer, tmp_path, augmentation="del_word", max_steps=1)
    trainer.train()
    trainer.save_model()
    trainer.accelerator.unwrap_model(trainer.model).export_encoder(tmp_path / "model", tokenizer=tokenizer)
    for folder in (tmp_path, tmp_path / "model"):
        config = json.loads((folder / "tokenizer_config.json").read_text())
        assert not isinstance(config.get("extra_special_tokens"), list)  # what transformers 4.x cannot read
        assert DEL_TOKEN in config["additional_special_tokens"]
        reloaded = AutoTokenizer.from_pretrained(folder)
        assert reloaded.tokenize(f"a {DEL_TOKEN} b") == ["a", DEL_TOKEN, "b"]
        assert reloaded.convert_tokens_to_ids(DEL_TOKEN) in reloaded.all_special_ids


def test_only_the_process_that_saves_rewrites_the_tokenizer_config(tokenizer, tmp_path, monkeypatch):
    """Every process enters the trainer's save (those that do not write join what it gathers); one that rewrote the
    tokenizer config read it while the writing process wrote it (a JSONDecodeError at a 2-process checkpoint)."""
    from contrastive_hf.data.augmentations import add_del_token
    from contrastive_hf.training.training_args import ContrastiveTrainingArguments

    add_del_token(tokenizer)
    trainer = make_trainer(tokenizer, tmp_path, augmentation="del_word", max_steps=1)
    folder = tmp_path / "checkpoint"
    folder.mkdir()
    written = '{"extra_special_tokens": ["[DEL]"]}'  # as the writing process leaves it before the rewrite
    (folder / "tokenizer_config.json").write_text(written)
    monkeypatch.setattr(ContrastiveTrainingArguments, "should_save", property(lambda self: False))
    trainer._save(str(folder))
    assert (folder / "tokenizer_config.json").read_text() == written


@pytest.mark.parametrize(
    ("overrides", "caveat"),
    [
        ({"pooler_type": "mean"}, None),
        ({"pooler_type": "cls"}, None),  # Pooling on [CLS] and a Dense with tanh: both in TEI
        ({"pooler_type": "max"}, "it pools with cls or mean only, not max"),
        ({"pooler_type": "mean", "projection_at_inference": True, "projection_activation": "relu"},
         "it runs Dense layers with tanh or no activation only, not relu"),
        ({"pooler_type": "mean", "prompts": {"query": "query: "}, "include_prompt": False},
         "it ignores include_prompt=False"),
        ({"pooler_type": "mean", "truncate_dim": 16}, "it ignores truncate_dim=16"),
    ],
)  # fmt: skip
def test_the_card_says_text_embeddings_inference_serves_the_checkpoint_only_where_it_does(overrides, caveat):
    """TEI pools with cls or mean, runs Dense with tanh or nothing, and reads neither include_prompt nor truncate_dim:
    the card says it serves the checkpoint only where all of that holds, and otherwise why not."""
    model = ContrastiveForPreTraining(ContrastiveConfig(encoder=tiny_bert_config(), **overrides))
    text = str(render_model_card(model, make_info()))
    if caveat is None:
        assert "The same files serve it with Text Embeddings Inference" in text
        assert "would serve other embeddings" not in text
    else:
        assert "Text Embeddings Inference would serve other embeddings than these" in text and caveat in text
        assert "The same files serve it with Text Embeddings Inference" not in text


@pytest.mark.slow  # two runs and their cards: 1 s of CPU
def test_the_core_names_no_method_and_the_recipe_that_claims_a_run_names_it(tokenizer, tmp_path):
    """A run of the core's parts is described by facts (its views, MLM, pairs, the model type), and the recipe that
    claims them names the method; no module outside recipes/ holds a method's name."""
    import ast

    from contrastive_hf.data.collators import PairCollator
    from contrastive_hf.hub.method_cards import GENERIC_METHOD
    from contrastive_hf.hub.model_card import card_info_from_trainer
    from contrastive_hf.recipes import import_recipes

    from conftest import REPO_ROOT

    import_recipes()
    names = {name for name in METHODS if name != "Test Method"}
    package = REPO_ROOT / "src" / "contrastive_hf"
    named = [
        f"{path.relative_to(package)}:{node.lineno} {node.value!r}"
        for path in package.rglob("*.py")
        if "recipes" not in path.relative_to(package).parts
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and node.value in names
    ]
    assert not named, named

    def method_of(trainer) -> str:
        return card_info_from_trainer(trainer).method

    assert method_of(make_trainer(tokenizer, tmp_path / "a", augmentation="dropout", mlm_weight=0.0)) == "SimCSE"
    assert method_of(make_trainer(tokenizer, tmp_path / "b", augmentation="del_word")) == "CLEAR"
    trainer = make_trainer(tokenizer, tmp_path / "c", augmentation="dropout", mlm_weight=0.0)
    trainer.data_collator = PairCollator(tokenizer)
    assert method_of(trainer) == "Supervised SimCSE"
    trainer.data_collator = lambda features: features  # a user's collator that says nothing of its batches
    assert method_of(trainer) == GENERIC_METHOD
