#!/usr/bin/env python
"""SG-BERT: self-guided contrastive learning of a sentence encoder's [CLS] (Kim, Yoo & Lee, ACL 2021).

A frozen copy of the encoder (BERT_F) gives the views, its every layer max-pooled; the tuned encoder's (BERT_T)
last-layer [CLS] learns to match them (`contrastive_hf.recipes.sg_bert`). Only BERT_T is saved, as a contrastive_hf
checkpoint. STS-B dev is scored before and after training with ``--stsb_dev_file``.

Runs as ``python examples/run_sg_bert.py ...`` or ``accelerate launch examples/run_sg_bert.py ...``; flags or a
single JSON file. Every TrainingArguments flag works; the defaults are the paper's (batch 16, learning rate 5e-5,
AdamW betas (0.9, 0.9), 10% warm-up, tau 0.01, lambda 0.1, --loss opt3 = SG-OPT):

    python examples/run_sg_bert.py --model_name_or_path bert-base-uncased \
        --train_file examples/demo/data/wiki1m_sample.txt --stsb_dev_file examples/demo/data/sts-dev.csv \
        --num_train_epochs 1 --output_dir outputs/sg-bert
"""

from __future__ import annotations

from contrastive_hf.commands.errors import exit_on_usage_error
from contrastive_hf.recipes import run_recipe


@exit_on_usage_error
def main(argv: list[str] | None = None) -> None:
    # the recipe's script: contrastive_hf.recipes.sg_bert.run (its defaults, arguments and build)
    run_recipe("sg_bert", argv)


if __name__ == "__main__":
    main()
