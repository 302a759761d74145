"""DeepSpeed ZeRO under Accelerate: examples/run_clear.py launched with the shipped ds_configs/ on 2 CPU processes.

Each run starts from the same saved checkpoint (dropout off, so that every run does the same arithmetic) and trains 3
steps of 2 x 16 sentences. Plain DistributedDataParallel is the reference: ZeRO-2 and ZeRO-3 must give its losses,
gradient norms and weights; the ZeRO-3 model saved at the end (gathered into one file by
``stage3_gather_16bit_weights_on_model_save``) must equal the weights consolidated from the DeepSpeed checkpoint of
the last step and load in a single process; a ZeRO-3 run resumed from its step-2 checkpoint, launched as two
machines with the multi-node config, must end on the same weights; a LoRA adapter trained under ZeRO-3 must merge
into a whole checkpoint; and GradCache must train under ZeRO-1, 2 and 3 as under DDP (tests/scripts/train_engines.py
trains all five runs of that comparison in one job). Every run but the two machines' is a job of the suite's one
engine launch (`helpers/zero_launches.py`)."""

from __future__ import annotations

import json
import socket
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModel

import contrastive_hf
from contrastive_hf import ContrastiveForPreTraining

from conftest import REPO_ROOT, tiny_bert_config
from helpers.launching import (
    DEEPSPEED_ON_CPU,
    DS_CONFIGS,
    MAX_STEPS,
    NO_DROPOUT,
    assert_same_weights,
    clear_arguments,
    deepspeed_launch,
    launch_jobs,
    weights,
)
from helpers.zero_launches import (
    DECODER_JOB,
    ENGINE_RUNS,
    GRAD_CACHE_JOB,
    GRAD_CACHE_STEP,
    MNTP_JOB,
    NO_STS_EVAL,
    TRAINING,
)

# its module-scoped launch and the shared ZeRO launches run once, on one pytest-xdist worker (--dist loadgroup)
pytestmark = pytest.mark.xdist_group("zero")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def log_history(directory) -> list[dict]:
    return json.loads((directory / "trainer_state.json").read_text())["log_history"]


def losses_and_grad_norms(directory) -> list[float]:
    """Every step's loss and gradient norm (logged every step), flat: [loss_1, norm_1, loss_2, ...]."""
    return [entry[key] for entry in log_history(directory) if "grad_norm" in entry for key in ("loss", "grad_norm")]


def max_change(trained: dict, initial: dict) -> float:
    return max((trained[name] - initial[name]).abs().max().item() for name in initial)


@pytest.fixture(scope="module")
def initial_checkpoint(zero_launches):
    """The checkpoint the DDP, ZeRO-2 and ZeRO-3 runs of CLEAR start from (each engine saved the same one, seed 0)."""
    return zero_launches.run("ddp").folder / "initial"


@pytest.fixture(scope="module")
def ddp_run(zero_launches):
    """The DDP reference: CLEAR from the same checkpoint on 2 gloo processes (the job ``reference`` of the shared
    launch's DDP jobs): its output folder."""
    launch = zero_launches.run("ddp")
    assert launch.status("reference") == 0, launch.failure("reference")
    card = (launch.output("reference") / "README.md").read_text()
    assert "DeepSpeed" not in card and "2 processes" in card  # DDP, as `--multi_gpu` launches it
    return launch.output("reference")


@pytest.fixture(scope="module")
def zero3_run(zero_launches):
    """ZeRO-3 with the one-machine config, a checkpoint every 2 steps (so at steps 2 and 3), the final STS-B eval
    (the job ``zero3_run`` of the shared ZeRO-3 launch): ``(its log, its output folder)``."""
    launch = zero_launches.run("zero3")
    assert launch.status("zero3_run") == 0, launch.failure("zero3_run")
    return launch.log("zero3_run"), launch.output("zero3_run")


@pytest.mark.parametrize("name", ["zero2.json", "zero3.json", "zero3_offload.json"])
def test_configs_fill_their_auto_values_and_pass_deepspeeds_parser(tmp_path, name):
    """The Trainer fills every "auto" (batch size, learning rate, clipping, bucket sizes); DeepSpeed accepts the
    result. zero3_offload.json is only checked here: its DeepSpeedCPUAdam is a C++ op compiled on first use, which
    takes minutes."""
    from deepspeed.runtime.config import DeepSpeedConfig
    from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig, unset_hf_deepspeed_config

    from contrastive_hf.training.training_args import ContrastiveTrainingArguments

    args = ContrastiveTrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=16, learning_rate=1e-3, use_cpu=True, report_to="none"
    )
    model = ContrastiveForPreTraining.from_config(tiny_bert_config())
    hf_config = HfTrainerDeepSpeedConfig(str(DS_CONFIGS / name))
    try:  # the object registers itself globally as the ZeRO-3 switch of from_pretrained: unregister it after
        hf_config.trainer_config_process(args)
        hf_config.trainer_config_finalize(args, model, num_training_steps=MAX_STEPS)
        assert "auto" not in json.dumps(hf_config.config)
        config = DeepSpeedConfig(hf_config.config)
    finally:
        unset_hf_deepspeed_config()
    assert config.train_batch_size == 16 and config.gradient_clipping == args.max_grad_norm
    assert config.zero_config.reduce_bucket_size == model.config.hidden_size**2
    offloaded = name == "zero3_offload.json"
    assert config.zero_optimization_stage == (2 if name == "zero2.json" else 3)
    assert config.zero_config.gather_16bit_weights_on_model_save == (name != "zero2.json")
    assert (config.zero_config.offload_optimizer is not None) == offloaded
    assert (config.zero_config.offload_param is not None) == offloaded
    if offloaded:
        assert config.zero_config.offload_optimizer.device == config.zero_config.offload_param.device == "cpu"
        assert config.optimizer_params["lr"] == 1e-3  # DeepSpeed's AdamW, with the Trainer's hyper-parameters
    else:
        assert config.optimizer_name is None  # the Trainer's optimizer and scheduler: every --optim flag works


def test_zero2_trains_like_ddp_and_saves_a_loadable_model(zero_launches, initial_checkpoint, ddp_run):
    launch = zero_launches.run("zero2")
    assert launch.status("like_ddp") == 0, launch.failure("like_ddp")
    output_dir = launch.output("like_ddp")
    assert json.loads((output_dir / "trainer_state.json").read_text())["global_step"] == MAX_STEPS
    assert "DeepSpeed ZeRO stage 2" in (output_dir / "README.md").read_text()
    assert len(losses_and_grad_norms(output_dir)) == 2 * MAX_STEPS
    assert losses_and_grad_norms(output_dir) == pytest.approx(losses_and_grad_norms(ddp_run), rel=1e-5)
    trained = weights(output_dir)
    assert_same_weights(trained, weights(ddp_run), atol=1e-5)
    assert max_change(trained, weights(initial_checkpoint)) > 1e-3

    model = ContrastiveForPreTraining.from_pretrained(output_dir)
    assert_same_weights(model.state_dict(), trained, atol=0)


def test_zero3_saves_consolidated_weights_that_load_in_one_process(initial_checkpoint, ddp_run, zero3_run):
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    log, output_dir = zero3_run
    assert (output_dir / "checkpoint-2" / "global_step2").is_dir()  # sharded DeepSpeed states, one file per rank
    # the last step's shards, consolidated by DeepSpeed's own tool, are the model saved at the end of training
    consolidated = get_fp32_state_dict_from_zero_checkpoint(str(output_dir / f"checkpoint-{MAX_STEPS}"))
    saved = weights(output_dir)
    assert_same_weights(saved, consolidated, atol=0)
    assert_same_weights(saved, weights(ddp_run), atol=1e-5)  # and ZeRO-3 trained as DDP does
    assert losses_and_grad_norms(output_dir) == pytest.approx(losses_and_grad_norms(ddp_run), rel=1e-5)
    assert max_change(saved, weights(initial_checkpoint)) > 1e-3

    pretraining = ContrastiveForPreTraining.from_pretrained(output_dir)  # in this single process, no DeepSpeed
    assert_same_weights(pretraining.state_dict(), consolidated, atol=0)
    encoder = AutoModel.from_pretrained(output_dir)  # the encoder alone, in its own architecture
    assert_same_weights({f"contrastive.encoder.{name}": value for name, value in encoder.state_dict().items()}, {
        name: value for name, value in consolidated.items() if name.startswith("contrastive.encoder.")
    }, atol=0)  # fmt: skip
    saved_file = load_file(output_dir / "model.safetensors")  # BertForMaskedLM's: bert.<encoder> and the MLM head
    encoder_part = {name[len("bert.") :]: value for name, value in saved_file.items() if name.startswith("bert.")}
    assert_same_weights(encoder_part, encoder.state_dict(), atol=0)
    assert_same_weights(
        {"mlm_head.bias": saved_file["cls.predictions.bias"]}, {"mlm_head.bias": consolidated["mlm_head.bias"]}, atol=0
    )

    # the final STS-B evaluation ran on every process (ZeRO-3 forwards are collective) and the script's own reload
    # check passed on the main one
    assert -100 <= json.loads((output_dir / "eval_results.json").read_text())["eval_stsb_spearman"] <= 100
    assert "gives the trained embeddings" in log
    assert "DeepSpeed ZeRO stage 3" in (output_dir / "README.md").read_text()


def test_zero3_resumes_from_its_checkpoint_on_two_machines(tmp_path, zero3_run):
    """Resume at step 2 and train to step 3, launched as 2 machines x 1 process with the multi-node config (both on
    localhost). The model is built from scratch with other random weights: only a real resume (weights, Adam
    moments, schedule, data order and random states all restored) ends on the uninterrupted run's weights."""
    _, zero3_dir = zero3_run
    encoder_config = tmp_path / "encoder.json"
    encoder_config.write_text(json.dumps({**tiny_bert_config(**NO_DROPOUT).to_dict(), "model_type": "bert"}))
    output_dir = tmp_path / "resumed"
    port = free_port()  # for the rendezvous of the two "machines"

    def machine(rank: int):
        launcher = deepspeed_launch(
            "accelerate_multinode_zero3.yaml",
            "zero3.json",
            "--machine_rank", rank,
            "--main_process_ip", "127.0.0.1",
            "--main_process_port", port,
        )  # fmt: skip
        machine_dir = tmp_path / f"machine{rank}"
        machine_dir.mkdir()
        argv = clear_arguments(
            REPO_ROOT,
            machine_dir,
            "--config_name", str(encoder_config),
            "--tokenizer_name", str(zero3_dir),
            *TRAINING,
            *NO_STS_EVAL,
            *DEEPSPEED_ON_CPU,
            "--resume_from_checkpoint", str(zero3_dir / "checkpoint-2"),
            "--output_dir", str(output_dir),  # one folder for both, as on a shared file system
        )  # fmt: skip
        job = {"name": "resume", "script": "examples/run_clear.py", "argv": argv}
        result = launch_jobs(launcher, [job], machine_dir, timeout=600)
        logs = "".join(log.read_text()[-3000:] for log in sorted(machine_dir.glob("resume.rank*.log")))
        assert result.returncode == 0, logs + result.stderr[-3000:]

    with ThreadPoolExecutor(max_workers=2) as pool:
        for run in [pool.submit(machine, rank) for rank in (1, 0)]:
            run.result()  # re-raises a machine's failure with its output

    assert json.loads((output_dir / "trainer_state.json").read_text())["global_step"] == MAX_STEPS
    assert losses_and_grad_norms(output_dir) == pytest.approx(losses_and_grad_norms(zero3_dir), rel=1e-6)
    assert_same_weights(weights(output_dir), weights(zero3_dir), atol=1e-6)
    assert max_change(weights(output_dir), weights(zero3_dir / "checkpoint-2")) > 1e-4  # step 3 was trained here


def test_zero3_lora_adapter_merges_into_a_whole_checkpoint(zero_launches):
    """Under ZeRO-3 each process holds a shard of every weight: the LoRA merge at the end gathers them first, and
    run_clear's own check (the merged checkpoint, reloaded, gives the trained embeddings) would fail otherwise."""
    launch = zero_launches.run("zero3")
    assert launch.status("lora") == 0, launch.failure("lora")
    output_dir = launch.output("lora")
    assert (output_dir / "adapter_model.safetensors").exists()
    assert "gives the trained embeddings" in launch.log("lora")
    merged = weights(output_dir.parent / "out-merged")
    assert all(value.numel() > 0 for value in merged.values())  # no empty shard saved in place of a weight
    assert isinstance(
        contrastive_hf.ContrastiveModel.from_pretrained(output_dir.parent / "out-merged"),
        contrastive_hf.ContrastiveModel,
    )


def test_a_decoder_instruction_tuned_with_lora_under_zero3_in_bf16_serves_its_queries(zero_launches):
    """E5's settings (examples/llm/e5_instruct.json) on a tiny Qwen2 under ZeRO-3 on 2 processes, bf16: the LoRA
    adapter merged from the gathered shards, the tokenizer appending its EOS, the query prompt saved; the merged
    checkpoint passes the script's own reload check and serves its queries in sentence-transformers."""
    from sentence_transformers import SentenceTransformer

    launch = zero_launches.run("zero3")
    assert launch.status(DECODER_JOB) == 0, launch.failure(DECODER_JOB)
    log = launch.log(DECODER_JOB)
    assert "Training a LoRA adapter" in log and "appends its eos_token" in log
    assert log.count("gives the trained embeddings") == 2  # ContrastiveModel and sentence-transformers
    merged = launch.output(DECODER_JOB).parent / "out-merged"
    trained = contrastive_hf.ContrastiveModel.from_pretrained(merged)
    assert trained.config.pooler_type == "last_token" and set(trained.config.prompts) == {"query"}
    # the frozen base trained in bf16 (DeepSpeed keeps float32 masters of trained weights only), and the merged
    # checkpoint is saved in it, every weight in the one dtype, as peft merges an adapter into a bf16 base
    assert {parameter.dtype for parameter in trained.parameters()} == {torch.bfloat16}
    served = SentenceTransformer(str(merged), device="cpu")
    queries = ["A man is playing a guitar.", "Rain."]
    theirs, mine = served.encode(queries, prompt_name="query"), trained.encode_query(queries)  # both in bf16
    cosines = (theirs * mine).sum(1) / np.linalg.norm(theirs, axis=1) / np.linalg.norm(mine, axis=1)
    assert cosines.min() > 0.9999, cosines  # the same vectors up to bf16's rounding (padded in other groups)


def test_llm2vec_s_masked_next_token_prediction_trains_a_decoder_under_zero3_on_two_processes(zero_launches):
    """run_llm2vec.py on a tiny Qwen2's causal-LM checkpoint under ZeRO-3 in bf16 on 2 processes: the decoder made
    bidirectional, its language-model head read whole before DeepSpeed shards it, MNTP trained through a LoRA adapter,
    and the merged model saved as the causal-LM model with the pretrained head (frozen: not in the adapter)."""
    from safetensors.torch import load_file

    launch = zero_launches.run("zero3")
    assert launch.status(MNTP_JOB) == 0, launch.failure(MNTP_JOB)
    log = launch.log(MNTP_JOB)
    assert "Training a LoRA adapter" in log and "mlm_loss" in log
    assert log.count("gives the trained embeddings") == 2  # ContrastiveModel and sentence-transformers
    merged = launch.output(MNTP_JOB).parent / "out-merged"
    saved = json.loads((merged / "config.json").read_text())
    assert saved["architectures"] == ["Qwen2ForCausalLM"] and saved["is_causal"] is False
    pretrained = load_file(launch.folder / "qwen2_lm" / "model.safetensors")["lm_head.weight"]
    head = load_file(merged / "model.safetensors")["lm_head.weight"]
    torch.testing.assert_close(head.float(), pretrained.to(head.dtype).float(), rtol=0, atol=0)


# The Trainer logs `loss` and `grad_norm` as computed; ContrastiveTrainer.log rounds its step metrics to 4 decimals,
# so two runs 1e-6 apart may log them one unit of the last decimal apart.
EXACT_LOGS = ("loss", "grad_norm")
ROUNDED_LOGS = ("mlm_loss", "cl_loss", "negatives_per_query", "queue_fill")
LOGGED = EXACT_LOGS + ROUNDED_LOGS


def logged_steps(run_dir) -> list[dict]:
    entries = json.loads((run_dir / "log_history.json").read_text())
    return [{key: entry[key] for key in LOGGED} for entry in entries if "grad_norm" in entry]


def test_grad_cache_under_zero_1_2_and_3_trains_as_under_ddp(zero_launches):
    """GradCache's chunks are one optimizer step under DeepSpeed too: ZeRO-1, 2 and 3 log the losses and end on the
    weights of GradCache under DDP, which equal the unchunked DDP run's (dropout off). One job of the shared launch
    trains all five (`ENGINE_RUNS`: tests/scripts/train_engines.py)."""
    launch = zero_launches.run("ddp")
    assert launch.status(GRAD_CACHE_JOB) == 0, launch.failure(GRAD_CACHE_JOB)
    model_dir, out = launch.folder / GRAD_CACHE_JOB / "initial", launch.output(GRAD_CACHE_JOB)
    engines = {name: json.loads((out / name / "engine.json").read_text()) for name in ENGINE_RUNS}
    assert engines["ddp_unchunked"]["grad_cache_steps"] == [0, 0]
    for name in ("ddp_unchunked", "ddp"):
        assert engines[name]["wrapper"] == "DistributedDataParallel" and engines[name]["zero_stage"] is None
    for stage in (1, 2, 3):
        assert engines[f"zero{stage}"]["wrapper"] == "DeepSpeedEngine"
        assert engines[f"zero{stage}"]["zero_stage"] == stage
    micro_batches = MAX_STEPS * GRAD_CACHE_STEP["gradient_accumulation_steps"]
    for name in ENGINE_RUNS:
        if name != "ddp_unchunked":  # every micro-batch went through GradCache
            assert engines[name]["grad_cache_steps"] == [micro_batches] * 2, name

    reference = logged_steps(out / "ddp")
    assert len(reference) == MAX_STEPS
    assert reference[-1]["queue_fill"] > 0 and reference[-1]["mlm_loss"] > 0
    # each query: the other 15 sentences' positives of the gathered batch and one queued batch of 16 keys, minus
    # duplicates
    assert 16 < reference[-1]["negatives_per_query"] <= 31
    for name in ENGINE_RUNS:
        steps = logged_steps(out / name)
        for step, (got, expected) in enumerate(zip(steps, reference, strict=True)):
            for key in EXACT_LOGS:
                assert got[key] == pytest.approx(expected[key], rel=1e-5), (name, step + 1, key)
            for key in ROUNDED_LOGS:
                assert got[key] == pytest.approx(expected[key], abs=1.01e-4), (name, step + 1, key)
        assert_same_weights(weights(out / name), weights(out / "ddp"), atol=1e-5)
    assert max_change(weights(out / "ddp"), weights(model_dir)) > 1e-3


def test_no_job_compiles_or_loads_deepspeeds_cpu_shared_memory_op(zero_launches):
    """The launch's DeepSpeed runs on the CPU neither compile nor load DeepSpeed's shared-memory communication op,
    which it uses only for inference and a GPU never builds (tests/scripts/run_jobs.py marks it incompatible):
    DeepSpeed prints that it was built when it loads it, at its first start in a process (without the mark: in both
    logs of the first job that starts DeepSpeed)."""
    folder = zero_launches.run("ddp").folder.parent
    logs = sorted(folder.rglob("*.rank*.log"))
    assert len(logs) > 60  # every job's log, on both processes
    assert not [log.name for log in logs if "deepspeed_shm_comm_op built" in log.read_text()]
