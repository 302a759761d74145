#!/usr/bin/env python
"""DeCLUTR-style span views: train a sentence encoder on positives sampled as spans of the same document.

Slice views (two differently masked copies of a span), neighbour views (two adjacent spans) or neighbouring slice
views (both), optionally with a third span of the same document as a hard negative; see
`contrastive_hf.recipes.declutr`. Documents too short for the views are skipped and counted in the log.

Runs as ``python examples/run_declutr.py ...`` or ``accelerate launch examples/run_declutr.py ...``; flags or a
single JSON file. Every TrainingArguments flag works. A small run on the shipped Wikipedia sample, from scratch:

    python examples/run_declutr.py --config_name examples/demo/encoder_config.json \
        --tokenizer_name examples/demo/tokenizer --train_file examples/demo/data/enwiki_paragraphs_sample.txt \
        --span_view neighbouring_slice --hard_negatives --span_words 32 --max_steps 200 \
        --per_device_train_batch_size 32 --learning_rate 5e-4 --stsb_dev_file examples/demo/data/sts-dev.csv \
        --output_dir outputs/declutr-demo

For corpora larger than memory add ``--streaming --max_steps N`` (each process then reads only its own shards).
"""

from __future__ import annotations

from contrastive_hf.commands.errors import exit_on_usage_error
from contrastive_hf.recipes import run_recipe


@exit_on_usage_error
def main(argv: list[str] | None = None) -> None:
    # the recipe's script: contrastive_hf.recipes.declutr.run (its defaults, arguments and build)
    run_recipe("declutr", argv)


if __name__ == "__main__":
    main()
