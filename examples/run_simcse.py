#!/usr/bin/env python
"""SimCSE (Gao, Yao & Chen, 2021): train a sentence encoder contrastively, unsupervised or on NLI.

``--mode unsup``: each sentence is encoded twice and the two dropout masks make the two views (the ``dropout``
augmentation); the other sentences of the batch are the negatives. ``--mode sup``: (premise, entailment hypothesis)
pairs are the positives and each premise's contradiction hypothesis is its hard negative (SimCSE's NLI format, a
csv with columns ``sent0,sent1,hard_neg``). Both use SimCSE's InfoNCE at temperature 0.05 on the [CLS] vector through
SimCSE's MLP head (one dense layer + tanh): in training only for ``unsup``, kept at inference for ``sup``.

Each mode applies SimCSE's own hyper-parameters unless the flag is given
(``contrastive_hf.recipes.simcse.run.MODE_DEFAULTS``); the log shows the resolved values. Batch sizes are SimCSE's
global ones, split over the processes of ``accelerate launch``. Optional: ``--do_mlm`` (SimCSE's auxiliary MLM,
weight ``--mlm_weight`` 0.1) and ``--prebatch_size C`` (a queue of the previous C batches' keys as extra negatives);
every TrainingArguments flag works, and a single JSON file of the same keys does too. A small unsupervised run on
the shipped Wikipedia sentences:

    python examples/run_simcse.py --mode unsup --model_name_or_path bert-base-uncased \
        --train_file examples/demo/data/wiki1m_sample.txt --stsb_dev_file examples/demo/data/sts-dev.csv \
        --output_dir outputs/unsup-simcse

and supervised, on SimCSE's NLI triples (nli_for_simcse.csv from its repository, or any csv of those columns):

    python examples/run_simcse.py --mode sup --model_name_or_path bert-base-uncased \
        --train_file nli_for_simcse.csv --stsb_dev_file examples/demo/data/sts-dev.csv --output_dir outputs/sup-simcse
"""

from __future__ import annotations

from contrastive_hf.commands.errors import exit_on_usage_error
from contrastive_hf.recipes import run_recipe


@exit_on_usage_error
def main(argv: list[str] | None = None) -> None:
    # the recipe's script: contrastive_hf.recipes.simcse.run (its defaults, arguments and build)
    run_recipe("simcse", argv)


if __name__ == "__main__":
    main()
