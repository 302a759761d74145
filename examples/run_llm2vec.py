#!/usr/bin/env python
"""LLM2Vec's first steps: a decoder LLM made to attend both ways, trained on masked next-token prediction (then
SimCSE's script with examples/llm/llm2vec_simcse.json: docs/recipes/llm2vec.md).

Runs as ``python examples/run_llm2vec.py ...`` or ``accelerate launch examples/run_llm2vec.py ...``; flags, or a JSON
file of the same keys followed by any flags that override it. The flags are run_clear.py's, with LLM2Vec's defaults,
and every TrainingArguments flag works.

    python examples/run_llm2vec.py --model_name_or_path Qwen/Qwen2.5-0.5B --dataset_name wikitext \
        --dataset_config_name wikitext-103-raw-v1 --output_dir outputs/llm2vec-mntp
"""

from __future__ import annotations

from contrastive_hf.commands.errors import exit_on_usage_error
from contrastive_hf.recipes import run_recipe


@exit_on_usage_error
def main(argv: list[str] | None = None) -> None:
    # the recipe's script: contrastive_hf.recipes.llm2vec.run (its defaults; CLEAR's arguments and build)
    run_recipe("llm2vec", argv)


if __name__ == "__main__":
    main()
