"""bf16 on CPU (issue 26): every training path under bf16 autocast agrees with float32 within bf16's precision, saves
float32 checkpoints, and the precision default follows the CPU's bf16 matrix instructions.

The tolerance. bf16 keeps 8 significant bits: each matrix product's inputs are rounded with a relative error of up to
2^-9 (0.2%). Through the tiny encoder's two layers, pooling, and similarities divided by a temperature of 0.05 (which
multiplies an error of the cosine by 20), the loss moves by about 0.07% and the gradients by about 0.6% of their
norm (1.3% for the worst tensor), measured on the AMD EPYC (Zen 4) of issue 26. The bounds below are a few times
that: 0.3% on the loss; on each gradient tensor 5% of its own norm plus 0.5% of the whole gradient's norm (the second
term for tensors whose gradient is nearly zero, such as attention's key biases, where float32 itself holds only
rounding noise); 3% on the whole gradient. A loss or logits computed in bf16 fail the dtype checks; a path that
skipped autocast fails `_assert_bf16_ran`.
"""

from __future__ import annotations

import logging

import pytest
import torch
import transformers
from datasets import Dataset
from safetensors.torch import load_file
from transformers import TrainerCallback

from contrastive_hf.models import precision
from contrastive_hf.models.precision import Precision, cpu_bf16_units, encoding_precision, training_precision
from contrastive_hf.training.trainer import ContrastiveTrainer
from contrastive_hf.training.training_args import ContrastiveTrainingArguments

from conftest import REPO_ROOT
from helpers.builders import BATCH, batch, build, gradients, make_queue_trainer, make_trainer

LOSS_RTOL = 3e-3
TENSOR_RTOL, TENSOR_OF_TOTAL, TOTAL_RTOL = 0.05, 0.005, 0.03


def _assert_gradients_close(bf16: dict[str, torch.Tensor], fp32: dict[str, torch.Tensor]) -> None:
    assert bf16.keys() == fp32.keys()
    total = torch.sqrt(sum(g.norm() ** 2 for g in fp32.values()))
    for name, reference in fp32.items():
        assert bf16[name].dtype == torch.float32, name  # float32 master weights get float32 gradients
        error = (bf16[name] - reference).norm()
        assert error <= TENSOR_RTOL * reference.norm() + TENSOR_OF_TOTAL * total, (name, error, reference.norm())
    whole = torch.sqrt(sum((bf16[name] - fp32[name]).norm() ** 2 for name in fp32))
    assert whole <= TOTAL_RTOL * total, (whole, total)


def _assert_bf16_ran(bf16_loss: torch.Tensor, fp32_loss: torch.Tensor) -> None:
    """The bf16 run is not float32 again (autocast reached the matrix products), and its loss is float32."""
    assert bf16_loss.dtype == torch.float32
    assert bf16_loss.item() != fp32_loss.item()
    assert abs(bf16_loss.item() - fp32_loss.item()) <= LOSS_RTOL * abs(fp32_loss.item())


def _loss_and_gradients(sub_batch_size, bf16: bool, mlm_weight: float = 1.0):
    model = build(dropout=0.0, mlm_weight=mlm_weight)
    model.config.sub_batch_size = sub_batch_size
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        outputs = model(**batch())
        outputs.loss.backward()
    return outputs, gradients(model)


@pytest.mark.parametrize("sub_batch_size", ["packed", "sorted", 0])
def test_every_encoding_path_under_bf16_matches_float32(sub_batch_size, caplog):
    """Query, positive and a hard negative, with CLEAR's MLM copy, on each encoding path."""
    with caplog.at_level(logging.INFO, logger="contrastive_hf.models.encoding_policy"):
        fp32, fp32_gradients = _loss_and_gradients(sub_batch_size, bf16=False)
        bf16, bf16_gradients = _loss_and_gradients(sub_batch_size, bf16=True)
    path = {"packed": "packed batches", "sorted": "length-sorted", 0: "one pass padded"}[sub_batch_size]
    assert path in caplog.text
    _assert_bf16_ran(bf16.loss, fp32.loss)
    for part in ("cl_loss", "mlm_loss"):
        assert getattr(bf16, part).dtype == torch.float32
        torch.testing.assert_close(getattr(bf16, part), getattr(fp32, part), rtol=LOSS_RTOL, atol=0)
    _assert_gradients_close(bf16_gradients, fp32_gradients)


class GradientsBeforeTheStep(TrainerCallback):
    """The gradients the optimiser is about to apply, at each step."""

    def __init__(self, model):
        self.model, self.steps = model, []

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self.steps.append(gradients(self.model))


def _trainer_gradients(tmp_path, bf16: bool, grad_cache_chunk_size: int = 0) -> dict[str, torch.Tensor]:
    """One step of `ContrastiveTrainer` (on the CPU, ``--bf16`` as given) on `batch()`: the gradients it applies."""
    model = build(dropout=0.0)
    capture = GradientsBeforeTheStep(model)
    args = ContrastiveTrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=BATCH,
        max_steps=1,
        max_grad_norm=0.0,  # no clipping: the gradients as computed
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        use_cpu=True,
        bf16=bf16,
        grad_cache_chunk_size=grad_cache_chunk_size,
    )
    trainer = ContrastiveTrainer(
        model=model,
        args=args,
        train_dataset=Dataset.from_dict({"row": list(range(BATCH))}),
        data_collator=lambda rows: batch(),
        callbacks=[capture],
    )
    trainer.train()
    return capture.steps[0]


def test_trainer_bf16_step_and_grad_cache_match(tmp_path):
    """``--bf16`` in the trainer: its gradients against float32's; and GradCache's against the same bf16 step in one
    pass. GradCache's first pass (no gradients) must compute the embeddings under the same autocast as the replayed
    chunks, or the cached gradients belong to other embeddings: measured, that puts GradCache 0.66% of the gradient's
    norm from the one-pass step, against 0.20% (the chunks' own bf16 rounding) when both passes run in bf16."""
    fp32 = _trainer_gradients(tmp_path / "fp32", bf16=False)
    bf16 = _trainer_gradients(tmp_path / "bf16", bf16=True)
    _assert_gradients_close(bf16, fp32)
    assert any(not torch.equal(bf16[name], fp32[name]) for name in fp32)  # the trainer's autocast ran
    cached = _trainer_gradients(tmp_path / "cached", bf16=True, grad_cache_chunk_size=4)
    total = torch.sqrt(sum(g.norm() ** 2 for g in bf16.values()))
    difference = torch.sqrt(sum((cached[name] - bf16[name]).norm() ** 2 for name in bf16))
    assert difference <= 0.004 * total, difference / total


def test_prebatch_queue_under_bf16_matches_float32(tokenizer, tmp_path):
    """The pre-batch queue (embeddings of earlier batches as extra negatives) trains under bf16 as in float32."""
    losses = {}
    for bf16 in (False, True):
        trainer = make_queue_trainer(
            tokenizer, tmp_path / str(bf16), max_steps=4, prebatch_size=8, logging_steps=1, bf16=bf16
        )
        trainer.train()
        logged = [entry for entry in trainer.state.log_history if "loss" in entry]
        losses[bf16] = [entry["loss"] for entry in logged]
        assert max(entry["queue_fill"] for entry in logged) > 0  # the queue's negatives took part
    assert losses[True] != losses[False]
    for bf16_loss, fp32_loss in zip(losses[True], losses[False], strict=True):
        assert abs(bf16_loss - fp32_loss) <= 0.02 * abs(fp32_loss), (losses[True], losses[False])


def test_bf16_training_saves_float32_weights(tokenizer, tmp_path):
    trainer = make_trainer(tokenizer, tmp_path, max_steps=2, bf16=True)
    assert trainer.args.bf16 and trainer.args.mixed_precision == "bf16"
    trainer.train()
    trainer.save_model(str(tmp_path / "saved"))
    files = sorted((tmp_path / "saved").rglob("*.safetensors"))
    assert files
    for file in files:
        for name, tensor in load_file(file).items():
            assert tensor.dtype == torch.float32, (file.name, name, tensor.dtype)


# The precision decision -----------------------------------------------------------------------------------------


@pytest.fixture
def cpu_flags(monkeypatch):
    """Set the CPU flags `cpu_bf16_units` reads, with no ISA cap."""

    def set_flags(*flags: str) -> None:
        monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
        monkeypatch.setattr(precision, "_cpuinfo_flags", lambda: {"avx2", "avx512f", *flags})
        cpu_bf16_units.cache_clear()

    yield set_flags
    cpu_bf16_units.cache_clear()


def test_cpu_bf16_units_from_the_flags_and_the_onednn_cap(cpu_flags, monkeypatch):
    cpu_flags("avx512_bf16", "amx_bf16", "amx_tile")
    assert cpu_bf16_units() == "amx_bf16"
    cpu_flags("avx512_bf16")
    assert cpu_bf16_units() == "avx512_bf16"
    cpu_flags()
    assert cpu_bf16_units() is None
    cpu_flags("avx512_bf16", "amx_bf16")
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_BF16")
    cpu_bf16_units.cache_clear()
    assert cpu_bf16_units() == "avx512_bf16"
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_VNNI")
    cpu_bf16_units.cache_clear()
    assert cpu_bf16_units() is None


def test_precision_defaults_follow_the_device(cpu_flags):
    cpu_flags("avx512_bf16")
    assert training_precision(None, "cpu").bf16
    assert "avx512_bf16" in training_precision(None, "cpu").reason
    assert not training_precision(False, "cpu").bf16
    assert encoding_precision(None, "cpu", torch.float32).bf16
    assert not encoding_precision(None, "cpu", torch.bfloat16).bf16  # bf16 weights compute in bf16 already
    assert not encoding_precision(False, "cpu", torch.float32).bf16
    cpu_flags()
    assert not training_precision(None, "cpu").bf16
    assert not encoding_precision(None, "cpu", torch.float32).bf16
    assert training_precision(True, "cpu").bf16


@pytest.fixture
def fake_gpu(monkeypatch):
    """A CUDA device of the compute capability given, as torch reports one (no GPU is needed)."""

    def set_capability(major: int, minor: int, name: str = "a GPU") -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (major, minor))
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: True)  # emulation counts there

    return set_capability


@pytest.mark.parametrize(
    ("capability", "name", "native"),
    [((9, 0), "NVIDIA H200", True), ((8, 0), "NVIDIA A100", True), ((7, 5), "Tesla T4", False),
     ((7, 0), "Tesla V100", False)],
)  # fmt: skip
def test_bf16_is_the_default_on_a_gpu_that_computes_it_natively(fake_gpu, capability, name, native):
    """torch.cuda.is_bf16_supported() says True on a V100 or T4 too, where bf16 is emulated in float32 arithmetic:
    the default asks for bf16 tensor cores (compute capability 8.0 or later)."""
    fake_gpu(*capability, name)
    for decided in (training_precision(None, "cuda"), encoding_precision(None, "cuda:0", torch.float32)):
        assert decided.bf16 is native
        assert f"({name}, compute capability {capability[0]}.{capability[1]})" in decided.reason
    assert not training_precision(False, "cuda").bf16  # --bf16 false forces float32
    assert training_precision(True, "cuda").bf16
    assert not training_precision(None, "mps").bf16


def test_training_arguments_decide_and_the_trainer_logs_why(cpu_flags, tokenizer, tmp_path, caplog):
    cpu_flags("avx512_bf16")
    arguments = ContrastiveTrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to="none")
    assert arguments.bf16 and arguments.mixed_precision == "bf16"
    assert ContrastiveTrainingArguments(output_dir=str(tmp_path), use_cpu=True, bf16=False).bf16 is False
    without_use_cpu = ContrastiveTrainingArguments(output_dir=str(tmp_path), bf16=True)  # the CPU is the device
    assert without_use_cpu.bf16 and without_use_cpu.mixed_precision == "bf16"
    cpu_flags()
    assert ContrastiveTrainingArguments(output_dir=str(tmp_path), use_cpu=True).bf16 is False
    cpu_flags("avx512_bf16")
    with caplog.at_level(logging.INFO, logger="contrastive_hf.models.precision"):
        trainer = make_trainer(tokenizer, tmp_path, max_steps=1)
    assert trainer.args.bf16
    assert caplog.text.count("Training runs in bf16 autocast: this CPU computes bf16 matrix products natively") == 1


def test_precision_logged_once_per_owner_and_decision(caplog):
    owner = torch.nn.Linear(1, 1)
    with caplog.at_level(logging.INFO, logger="contrastive_hf.models.precision"):
        for _ in range(3):
            precision.log_precision_once(owner, "encode", Precision(True, "a reason"))
        precision.log_precision_once(owner, "encode", Precision(False, "another"))
    assert caplog.text.count("encode runs in bf16 autocast: a reason.") == 1
    assert caplog.text.count("encode runs in float32: another.") == 1


def test_a_run_on_a_bf16_cpu_passes_its_reload_check(cpu_flags, tokenizer, tmp_path):
    """The end of a run compares the saved checkpoint's embeddings, reloaded by sentence-transformers in float32, with
    the trained model's: those are computed in float32 too, though `encode` defaults to bf16 on this CPU (else the
    check fails on bf16 rounding, about 1e-2, not on the weights)."""
    from contrastive_hf.commands.run_end import finish_sentence_encoder_run

    cpu_flags("avx512_bf16")
    trainer = make_trainer(tokenizer, tmp_path, max_steps=1)
    assert trainer.args.bf16
    train_result = trainer.train()
    finish_sentence_encoder_run(trainer, train_result, tokenizer)  # raises RuntimeError when the reload differs


def test_example_scripts_always_say_which_precision_runs(tmp_path):
    """At the scripts' default log level (warning), the precision line is still shown, as the data counts are."""
    from contrastive_hf.commands.logs import setup_logging

    arguments = ContrastiveTrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to="none")
    names = ("contrastive_hf", precision.__name__, "contrastive_hf.data_counts")
    loggers = [logging.getLogger(name) for name in names]
    levels, verbosity = [logger.level for logger in loggers], transformers.utils.logging.get_verbosity()
    precision.logger.setLevel(logging.NOTSET)
    try:
        setup_logging(arguments, logging.getLogger("a_script"))
        assert logging.getLogger("contrastive_hf").level == logging.WARNING
        assert precision.logger.isEnabledFor(logging.INFO)
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
        transformers.utils.logging.set_verbosity(verbosity)


@pytest.mark.parametrize("how", ["accelerate launch", "--deepspeed"])
@pytest.mark.parametrize(("flags", "bf16"), [(("avx512_bf16",), True), ((), False)])
def test_deepspeed_auto_precision_follows_the_decision(cpu_flags, monkeypatch, tmp_path, how, flags, bf16):
    """ds_configs' "bf16": {"enabled": "auto"} takes the run's precision, the default included, as `accelerate launch
    --config_file ds_configs/accelerate_zero2.yaml ... --bf16` is documented on a machine whose device is the CPU
    (DeepSpeed's CPU accelerator): it was filled with float32 there, and the Trainer refused the run (issue 31)."""
    cpu_flags(*flags)
    config = REPO_ROOT / "ds_configs" / "zero2.json"
    options = {}
    if how == "accelerate launch":  # what `accelerate launch --config_file ds_configs/accelerate_zero2.yaml` sets
        monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
        monkeypatch.setenv("ACCELERATE_DEEPSPEED_CONFIG_FILE", str(config))
    else:
        options["deepspeed"] = str(config)
    arguments = ContrastiveTrainingArguments(output_dir=str(tmp_path), report_to="none", **options)
    assert arguments.bf16 is bf16 and arguments.mixed_precision == ("bf16" if bf16 else "no")
    assert arguments.deepspeed_plugin.deepspeed_config["bf16"]["enabled"] is bf16
    forced = ContrastiveTrainingArguments(output_dir=str(tmp_path), report_to="none", bf16=True, **options)
    assert forced.deepspeed_plugin.deepspeed_config["bf16"]["enabled"] is True
