from __future__ import annotations

from huggingface_hub import ModelCard

from contrastive_hf import ContrastiveConfig, ContrastiveForPreTraining
from contrastive_hf.hub.model_card import ModelCardInfo, render_model_card, write_model_card

from conftest import tiny_bert_config


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
    assert result.metric_type == "spearman_cosine" and result.metric_value == 61.23
    assert result.dataset_split == "validation"
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
    assert set(by_data_set) == {"mteb/sts12-sts", "mteb/sickr-sts", "mr"}
    assert by_data_set["mr"].task_type == "text-classification" and by_data_set["mr"].metric_type == "accuracy"
