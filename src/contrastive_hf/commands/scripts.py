"""What the example scripts share, one idea per module, all importable from here as before:

=============  ================================================================================================
``errors``     `UsageError`, `as_usage_error`, `exit_on_usage_error`: a user's mistake is one line and status 2
``arguments``  the shared argument dataclasses and `parse_arguments` (flags or a JSON file, a recipe's defaults)
``logs``       `setup_logging`: logging and seeding as transformers' example scripts do
``loaders``    the tokenizer, the training corpus and the STS-B dev set (`loading` builds the model)
``run_end``    the end of a run: save, before/after, card, push, LoRA merge, reload (`finish_sentence_encoder_run`)
=============  ================================================================================================
"""

from __future__ import annotations

from .arguments import (
    AdapterArguments,
    ContrastiveModelArguments,
    CorpusArguments,
    EncoderArguments,
    MatryoshkaArguments,
    PromptArguments,
    check_paths,
    parse_arguments,
    parse_number_list,
    read_json_settings,
    training_data_name,
)
from .errors import UsageError, as_usage_error, exit_on_usage_error, run_script
from .loaders import (
    STSB,
    corpus_progress_bars,
    evaluates_during_training,
    load_sentences,
    load_sts_dev,
    load_tokenizer,
)
from .logs import announce, run_training, setup_logging
from .run_end import (
    finish_sentence_encoder_run,
    format_before_after,
    log_before_after,
    matryoshka_sts,
    publish,
    record_before_after,
    save_merged_model,
    save_trained_model,
)

__all__ = [
    "UsageError",
    "as_usage_error",
    "exit_on_usage_error",
    "run_script",
    "EncoderArguments",
    "ContrastiveModelArguments",
    "MatryoshkaArguments",
    "PromptArguments",
    "CorpusArguments",
    "AdapterArguments",
    "parse_number_list",
    "parse_arguments",
    "read_json_settings",
    "check_paths",
    "setup_logging",
    "announce",
    "run_training",
    "load_tokenizer",
    "evaluates_during_training",
    "training_data_name",
    "load_sentences",
    "corpus_progress_bars",
    "load_sts_dev",
    "STSB",
    "save_trained_model",
    "log_before_after",
    "format_before_after",
    "record_before_after",
    "publish",
    "matryoshka_sts",
    "save_merged_model",
    "finish_sentence_encoder_run",
]
