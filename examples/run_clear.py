#!/usr/bin/env python
"""CLEAR: pre-train or continue pre-training a sentence encoder with MLM + a contrastive loss on augmented views.

Runs as ``python examples/run_clear.py ...`` or ``accelerate launch examples/run_clear.py ...``; flags, or a JSON
file of the same keys followed by any flags that override it (``python examples/run_clear.py
examples/demo/clear_scratch.json --seed 1``). Flag names follow run_mlm.py where they overlap, and every
TrainingArguments flag works.

    python examples/run_clear.py --model_name_or_path bert-base-uncased --dataset_name wikitext \
        --dataset_config_name wikitext-103-raw-v1 --augmentations del_word --output_dir clear-bert
"""

from __future__ import annotations

from contrastive_hf.commands.errors import exit_on_usage_error
from contrastive_hf.recipes import run_recipe


@exit_on_usage_error
def main(argv: list[str] | None = None) -> None:
    # the recipe's script: contrastive_hf.recipes.clear.run (its defaults, arguments and build)
    run_recipe("clear", argv)


if __name__ == "__main__":
    main()
