#!/usr/bin/env python
"""Multitask fine-tuning of a sentence encoder on SST-2 (sentiment), MRPC (paraphrase) and STS-B (similarity).

One shared encoder, one head per task (`contrastive_hf.recipes.multitask`), the tasks' batches interleaved by
``--task_schedule`` and, with ``--pcgrad``, their gradients combined by PCGrad. ``--model_name_or_path`` is a plain
pretrained encoder, or a contrastive_hf checkpoint (the output of run_clear.py or run_simcse.py: "contrastive
learning, then multitask"), or a multitask checkpoint of this script to continue from.

Data in SentEval's layouts (the folder of each task; give the tasks to train on):

    python examples/run_multitask.py --model_name_or_path sentence-transformers/all-MiniLM-L6-v2 \
        --sst_dir SentEval/data/downstream/SST/binary --mrpc_dir SentEval/data/downstream/MRPC \
        --stsb_dir SentEval/data/downstream/STS/STSBenchmark --task_schedule super_batch --pcgrad \
        --output_dir outputs/multitask

Dev sets: SST-2's and STS-B's own; MRPC has none in SentEval's layout, so ``--mrpc_dev_fraction`` of its training
pairs (10%, the size of GLUE's MRPC dev set) are held out, with a fixed ``--split_seed``. ``--evaluate_test`` also
scores the test sets. The output folder holds the multitask model (`MultitaskModel.from_pretrained`) and, in
``sentence_encoder/``, the encoder alone as a contrastive_hf checkpoint (`AutoModel`, sentence-transformers).
With ``--lora_r`` the output folder holds a LoRA adapter on the encoder with the heads trained in full (it loads with
``PeftModel.from_pretrained(MultitaskModel.from_sentence_encoder(base, tasks), folder)``), and
``<output_dir>-merged`` the merged multitask model and its ``sentence_encoder/``.
"""

from __future__ import annotations

from contrastive_hf.commands.errors import exit_on_usage_error
from contrastive_hf.recipes import run_recipe


@exit_on_usage_error
def main(argv: list[str] | None = None) -> None:
    # the recipe's script: contrastive_hf.recipes.multitask.run (its defaults, arguments and build)
    run_recipe("multitask", argv)


if __name__ == "__main__":
    main()
