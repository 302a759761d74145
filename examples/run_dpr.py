#!/usr/bin/env python
"""DPR dual encoders: train a question encoder and a passage encoder on (question, positive passage[, hard
negative]) pairs with in-batch negatives, optional hard negatives and DensePhrases' pre-batch negatives
(``--prebatch_size``), then score retrieval (recall@k, MRR) on held-out pairs.

Runs as ``python examples/run_dpr.py ...`` or ``accelerate launch examples/run_dpr.py ...``; flags or a single JSON
file. Every TrainingArguments flag works. Offline, on NLI triples (premise -> entailment as question -> passage, the
contradiction as hard negative), from all-MiniLM-L6-v2:

    python examples/run_dpr.py --model_name_or_path path/to/all-MiniLM-L6-v2 \
        --train_file ../shared/data/nli/snli_triples.csv \
        --query_column sent0 --positive_column sent1 --hard_negative_column hard_neg \
        --pooler_type mean --similarity cosine --eval_size 500 --evaluate_before_training \
        --max_steps 100 --per_device_train_batch_size 32 --learning_rate 2e-5 --output_dir outputs/dpr-snli

Natural Questions from the Hub (question, Wikipedia passage pairs):

    accelerate launch examples/run_dpr.py --model_name_or_path bert-base-uncased \
        --dataset_name sentence-transformers/natural-questions --query_column query --positive_column answer \
        --eval_size 2000 --per_device_train_batch_size 128 --learning_rate 2e-5 --num_train_epochs 40 \
        --prebatch_size 2 --bf16 --output_dir outputs/dpr-nq
"""

from __future__ import annotations

from contrastive_hf.commands.errors import exit_on_usage_error
from contrastive_hf.recipes import run_recipe


@exit_on_usage_error
def main(argv: list[str] | None = None) -> None:
    # the recipe's script: contrastive_hf.recipes.dpr.run (its defaults, arguments and build)
    run_recipe("dpr", argv)


if __name__ == "__main__":
    main()
