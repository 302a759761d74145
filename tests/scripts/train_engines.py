"""Train one saved model a few steps under several engines in a single launch: every run a fresh ContrastiveTrainer.

Run on 2 processes (gloo, DeepSpeed on its CPU accelerator) as a job of the suite's engine launch, in the environment
``accelerate launch --multi_gpu --num_processes 2`` gives (tests/helpers/zero_launches.py: the GradCache comparisons
of test_deepspeed.py and test_grad_cache_uneven_processes.py). Each run is a JSON object of
`ContrastiveTrainingArguments` overrides, with ``deepspeed`` naming a DeepSpeed JSON file (whose "auto" values the
Trainer fills) and ``zero_stage`` overriding its stage. `TrainingArguments` resets Accelerate's state when it is
built, so DDP and ZeRO-1/2/3 runs follow one another on the same process group.

Each run writes to ``OUTPUT_DIR/<name>/``: ``model.safetensors`` (gathered from the shards under ZeRO-3),
``log_history.json``, and ``engine.json`` (what trained it: the model wrapper's class, the ZeRO stage, how many
batches went through GradCache on each process, in rank order).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch
from datasets import Dataset
from transformers import AutoTokenizer
from transformers.integrations.deepspeed import unset_hf_deepspeed_config

import contrastive_hf.training.trainer as trainer_module
from contrastive_hf import ContrastiveForPreTraining
from contrastive_hf.commands.zero3 import built_whole
from contrastive_hf.data.collators import ContrastiveDataCollator
from contrastive_hf.training.trainer import ContrastiveTrainer
from contrastive_hf.training.training_args import ContrastiveTrainingArguments


def use_deepspeed(config_file: str | None, zero_stage: int | None, run_dir: Path) -> None:
    """Set the environment `accelerate launch --config_file ds_configs/accelerate_zeroN.yaml` sets (the arguments
    then build Accelerate's DeepSpeed plugin from it), or clear it for a run without DeepSpeed. Passing the config as
    ``TrainingArguments(deepspeed=...)`` instead would leave Accelerate without a backend on a machine without GPUs:
    it ignores ``ddp_backend`` then."""
    if config_file is None:
        os.environ.pop("ACCELERATE_USE_DEEPSPEED", None)
        os.environ.pop("ACCELERATE_DEEPSPEED_CONFIG_FILE", None)
        return
    config = json.loads(Path(config_file).read_text())
    if zero_stage is not None:
        config["zero_optimization"]["stage"] = zero_stage
    run_dir.mkdir(parents=True, exist_ok=True)
    # every process writes the same file: written beside it and renamed, so that no process reads it half written
    # (a reader of the truncated file failed with a JSONDecodeError on a loaded machine)
    partial = run_dir / f"deepspeed.json.{os.getpid()}"
    partial.write_text(json.dumps(config))
    os.replace(partial, run_dir / "deepspeed.json")
    os.environ["ACCELERATE_USE_DEEPSPEED"] = "true"
    os.environ["ACCELERATE_DEEPSPEED_CONFIG_FILE"] = str(run_dir / "deepspeed.json")


GRAD_CACHE_STEP = trainer_module.grad_cache_step


def counting_grad_cache_steps(counter: list[int]):
    """`grad_cache_step` as the trainer calls it, counting its calls (so a run shows it really chunked)."""

    def counted(*args, **kwargs):
        counter[0] += 1
        return GRAD_CACHE_STEP(*args, **kwargs)

    return counted


def train(name: str, settings: dict, model_dir: Path, sentences: list[str], output_dir: Path) -> None:
    settings = dict(settings)
    run_dir = output_dir / name
    config_file = settings.pop("deepspeed", None)
    use_deepspeed(config_file, settings.pop("zero_stage", None), run_dir)
    args = ContrastiveTrainingArguments(
        output_dir=str(run_dir),
        use_cpu=config_file is None,  # True makes Accelerate ignore DeepSpeed; without GPUs DeepSpeed runs on the CPU
        ddp_backend="gloo",
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        seed=0,
        **settings,
    )
    with built_whole(args):  # as the example scripts build it: whole, sharded by DeepSpeed when training starts
        model = ContrastiveForPreTraining.from_pretrained(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    collator = ContrastiveDataCollator(tokenizer, augmentation="del_word", max_length=24, seed=0)
    calls = [0]
    trainer_module.grad_cache_step = counting_grad_cache_steps(calls)
    trainer = ContrastiveTrainer(
        model=model, args=args, train_dataset=Dataset.from_dict({"text": sentences}), data_collator=collator
    )
    trainer.train()
    trainer.save_model()
    engine = trainer.model_wrapped
    stage = engine.zero_optimization_stage() if hasattr(engine, "zero_optimization_stage") else None
    calls_per_process = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(calls_per_process, calls[0])
    if trainer.is_world_process_zero():
        (run_dir / "log_history.json").write_text(json.dumps(trainer.state.log_history))
        record = {"wrapper": type(engine).__name__, "zero_stage": stage, "grad_cache_steps": calls_per_process}
        (run_dir / "engine.json").write_text(json.dumps(record))
    trainer.accelerator.free_memory()  # destroys a DeepSpeed engine and its hooks
    unset_hf_deepspeed_config()  # the next run's from_pretrained must not take ZeRO-3 for still on
    torch.distributed.barrier()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model_dir", type=Path, required=True, help="The saved model and tokenizer every run starts from."
    )
    parser.add_argument("--train_file", type=Path, required=True, help="One sentence per line.")
    parser.add_argument("--runs", type=Path, required=True, help="A JSON object: run name -> argument overrides.")
    parser.add_argument("--output_dir", type=Path, required=True)
    options = parser.parse_args()
    sentences = [line for line in options.train_file.read_text().splitlines() if line.strip()]
    for name, settings in json.loads(options.runs.read_text()).items():
        train(name, settings, options.model_dir, sentences, options.output_dir)


if __name__ == "__main__":
    main()
