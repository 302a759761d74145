"""The LoRA flags (``--lora_r``, ``--lora_alpha``, ``--lora_dropout``, ``--lora_target_modules``,
``--lora_modules_to_save``) on every example script that trains: defined once (`commands.arguments.AdapterArguments`)
and read one way (`commands.loading.with_lora_adapter`), with the same refusals in the same words everywhere.

In process: each script's ``main(argv)`` runs until it adapts its model, on a tiny pretrained BERT saved in a
temporary folder; the training itself is tested end to end in tests/integration/test_run_lora.py."""

from __future__ import annotations

import importlib

import pytest
import torch
from transformers import AutoTokenizer, BertForMaskedLM, BertModel

from contrastive_hf.commands.arguments import AdapterArguments

from conftest import DEMO_DATA, DEMO_TOKENIZER, TEST_DATA, example_script, tiny_bert_config, usage_error
from helpers.builders import write_snli_sample

WIKI = str(DEMO_DATA / "wiki1m_sample.txt")
MULTITASK_DATA = (
    "--sst_dir", str(TEST_DATA / "senteval" / "SST" / "Binary"),
    "--stsb_dir", str(TEST_DATA / "sts" / "stsbenchmark"),
    "--max_train_samples", "8", "--max_eval_samples", "8",
)  # fmt: skip
# Each script that trains, with the data flags it needs to reach the model
SCRIPT_DATA = {
    "run_clear": ("--train_file", WIKI),
    "run_simcse": ("--mode", "unsup", "--train_file", WIKI),
    "run_declutr": ("--train_file", WIKI),
    "run_sg_bert": ("--train_file", WIKI),
    "run_dpr": ("--train_file", "{pairs}"),
    "run_multitask": MULTITASK_DATA,
}


@pytest.fixture(scope="module")
def pretrained_base(tmp_path_factory):
    """A tiny pretrained BERT (with its MLM head) and the demo tokenizer, in a folder."""
    folder = tmp_path_factory.mktemp("base")
    tokenizer = AutoTokenizer.from_pretrained(DEMO_TOKENIZER)
    BertForMaskedLM(tiny_bert_config(vocab_size=len(tokenizer))).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def script_argv(name: str, base, tmp_path, *extra: str) -> list[str]:
    pairs = tmp_path / "pairs.csv"
    if name == "run_dpr" and not pairs.exists():
        write_snli_sample(pairs, rows=40)
    data = [value.format(pairs=pairs) for value in SCRIPT_DATA[name]]
    common = ["--use_cpu", "true", "--report_to", "none", "--max_steps", "1", "--output_dir", str(tmp_path / "out")]
    return ["--model_name_or_path", str(base), *data, *common, *extra]


class Adapted(Exception):
    """Raised by the stand-in for `with_lora_adapter`: the script got as far as adapting its model."""


@pytest.mark.parametrize("name", list(SCRIPT_DATA))
def test_every_training_script_reads_the_lora_flags_into_the_one_adapter_step(
    name, pretrained_base, tmp_path, monkeypatch
):
    script = example_script(name)
    seen = []

    def adapt(model, adapter_args, modules_to_save=()):
        seen.append((model, adapter_args))
        raise Adapted

    # the script's recipe adapts the model in its build (`recipes.<name>.run`)
    monkeypatch.setattr(
        importlib.import_module(f"contrastive_hf.recipes.{name.removeprefix('run_')}.run"), "with_lora_adapter", adapt
    )
    flags = ["--lora_r", "4", "--lora_alpha", "16", "--lora_dropout", "0.1", "--lora_target_modules", "query, key"]
    with pytest.raises(Adapted):
        script.main(script_argv(name, pretrained_base, tmp_path, *flags, "--lora_modules_to_save", "pooler"))
    ((model, adapter_args),) = seen
    assert isinstance(adapter_args, AdapterArguments)
    assert adapter_args.lora_options() == {
        "r": 4,
        "alpha": 16,
        "dropout": 0.1,
        "target_modules": ["query", "key"],
        "modules_to_save": ["pooler"],
    }
    assert model.config._name_or_path == str(pretrained_base)  # the pretrained model the adapter goes on


@pytest.mark.parametrize("name", list(SCRIPT_DATA))
def test_every_training_script_refuses_a_negative_rank_in_the_same_words(name, pretrained_base, tmp_path, capsys):
    error = usage_error(name, script_argv(name, pretrained_base, tmp_path, "--lora_r", "-1"), capsys)
    assert "--lora_r must be a rank >= 1 (or 0 for no adapter), got -1." in error


def test_lora_without_a_pretrained_model_names_the_flag_to_give(tmp_path, capsys):
    argv = ["--config_name", str(DEMO_DATA.parent / "encoder_config.json"), "--tokenizer_name", str(DEMO_TOKENIZER)]
    argv += ["--mode", "unsup", "--train_file", WIKI, "--output_dir", str(tmp_path / "out"), "--lora_r", "4"]
    error = usage_error("run_simcse", argv, capsys)
    assert "--lora_r adapts the frozen weights of a pretrained encoder: give --model_name_or_path" in error


def test_lora_target_modules_the_encoder_lacks_are_a_usage_error(pretrained_base, tmp_path, capsys):
    argv = script_argv("run_declutr", pretrained_base, tmp_path, "--lora_r", "4", "--lora_target_modules", "q_lin")
    error = usage_error("run_declutr", argv, capsys)
    assert "q_lin" in error and "Name modules of the encoder with --lora_target_modules" in error


def test_dpr_refuses_an_adapter_on_two_different_towers(pretrained_base, tmp_path, capsys):
    argv = script_argv("run_dpr", pretrained_base, tmp_path, "--lora_r", "4")
    error = usage_error("run_dpr", [*argv, "--passage_model_name_or_path", str(pretrained_base)], capsys)
    assert "--lora_r with --passage_model_name_or_path" in error and "wrong passage tower" in error


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ("--lora_r", "100000"),
            "LoRA rank r=100000 (--lora_r) is above 32, the smallest dimension of the layers it adapts "
            "(contrastive.encoder.encoder.layer.0.attention.self.query: 32 x 32): a rank beyond it adds parameters, "
            "not capacity. Give a rank of at most 32 (8 or 16 is usual).",
        ),
        (
            ("--lora_r", "4", "--lora_alpha", "-8"),
            "LoRA alpha=-8 (--lora_alpha) must be > 0: it scales the adapter's update by alpha / r. Leave it unset "
            "for 2 * r (8).",
        ),
        (
            ("--lora_r", "4", "--lora_dropout", "1.5"),
            "LoRA dropout=1.5 (--lora_dropout) must be in [0, 1): the probability of zeroing each input of the "
            "adapter (0: none).",
        ),
    ],
)
def test_a_rank_alpha_or_dropout_that_cannot_work_is_refused_naming_flag_value_and_range(
    flags, message, pretrained_base, tmp_path, capsys
):
    """Before any adapter is built: a rank above the adapted layers' width would write an adapter larger than the
    model (410 MB for r=100000 on a 128-wide one), a negative alpha would be saved as given."""
    error = usage_error("run_simcse", script_argv("run_simcse", pretrained_base, tmp_path, *flags), capsys)
    assert error == f"run_simcse.py: error: {message}\n"


def test_a_rank_up_to_the_adapted_layers_smallest_dimension_is_allowed(pretrained_base):
    from contrastive_hf import ContrastiveForPreTraining
    from contrastive_hf.hub.adapters import lora_config

    model = ContrastiveForPreTraining.from_encoder_pretrained(str(pretrained_base), pooler_type="mean")
    assert lora_config(model, r=32, alpha=1, dropout=0.0).r == 32  # hidden size 32: a full-rank update
    with pytest.raises(ValueError, match=r"r=33 \(--lora_r\) is above 32"):
        lora_config(model, r=33)


def adapted_model(name, base, tmp_path, monkeypatch, *flags):
    """The model ``name``'s build hands back after adapting it, the script stopped there (in process)."""
    run_module = importlib.import_module(f"contrastive_hf.recipes.{name.removeprefix('run_')}.run")
    from contrastive_hf.commands.loading import with_lora_adapter as adapt

    built = []

    def adapt_and_stop(model, adapter_args, modules_to_save=()):
        built.append(adapt(model, adapter_args, modules_to_save))
        raise Adapted

    monkeypatch.setattr(run_module, "with_lora_adapter", adapt_and_stop)
    with pytest.raises(Adapted):
        example_script(name).main(script_argv(name, base, tmp_path, *flags))
    return built[0]


@pytest.mark.parametrize("name", list(SCRIPT_DATA))
def test_every_training_script_loads_a_bf16_base_under_float32_adapter_and_heads_with_the_attention_asked(
    name, pretrained_base, tmp_path, monkeypatch
):
    """--lora_base_dtype bfloat16 loads the frozen base in bf16 (half its memory), every trained weight (adapter,
    heads, modules trained in full) a float32 master; --attn_implementation is the encoders' attention."""
    flags = ("--lora_r", "4", "--lora_base_dtype", "bfloat16", "--bf16", "true", "--attn_implementation", "eager")
    model = adapted_model(name, pretrained_base, tmp_path, monkeypatch, *flags)
    trained = {parameter.dtype for parameter in model.parameters() if parameter.requires_grad}
    frozen = {parameter.dtype for parameter in model.parameters() if not parameter.requires_grad}
    assert trained == {torch.float32} and torch.bfloat16 in frozen
    encoders = [module for module in model.modules() if isinstance(module, BertModel)]
    assert encoders and {encoder.config._attn_implementation for encoder in encoders} == {"eager"}

    # without the flags: float32 throughout, transformers' attention (sdpa)
    model = adapted_model(name, pretrained_base, tmp_path, monkeypatch, "--lora_r", "4")
    assert {parameter.dtype for parameter in model.parameters()} == {torch.float32}
    assert {m.config._attn_implementation for m in model.modules() if isinstance(m, BertModel)} == {"sdpa"}


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--lora_base_dtype", "bfloat16", "--bf16", "true"), "--lora_base_dtype bfloat16 keeps the frozen base"),
        (("--lora_r", "4", "--lora_base_dtype", "bfloat16"), "give --bf16 true, so that the float32 adapter"),
        (("--lora_r", "4", "--lora_base_dtype", "float16", "--bf16", "true"), "give --fp16 true"),
    ],
)
def test_a_half_precision_base_without_an_adapter_or_its_mixed_precision_is_refused(
    flags, message, pretrained_base, tmp_path, capsys
):
    error = usage_error("run_simcse", script_argv("run_simcse", pretrained_base, tmp_path, *flags), capsys)
    assert message in error
