"""Logging and seeding of an example script, as transformers' example scripts do, with the log kept to what matters."""

from __future__ import annotations

import logging
import sys

import transformers
from transformers import set_seed

__all__ = ["setup_logging"]


def setup_logging(training_args, logger: logging.Logger, summary: bool = False) -> None:
    """Log to stdout at the process's level (the main process logs, the others warn), for the script's ``logger``,
    contrastive_hf and transformers; then seed everything with ``training_args.seed``. ``summary``: the script's own
    logger reports at INFO on the main process whatever the level, for its summary lines.

    Above INFO (the default) the log is kept to what matters: transformers' progress bars (loading weights, writing
    shards: they flash by) are off, Hub downloads keep theirs, and DeepSpeed's notice that it found no GPU, printed
    wherever DeepSpeed is installed because accelerate imports it, is hidden unless ``--deepspeed`` is given.
    ``--log_level info`` shows everything.
    """
    from ..data.reading import data_counts_logger

    logging.basicConfig(
        format="%(asctime)s - %(levelname)s - %(name)s - %(message)s",
        datefmt="%m/%d/%Y %H:%M:%S",
        handlers=[logging.StreamHandler(sys.stdout)],
    )
    log_level = training_args.get_process_log_level()
    logger.setLevel(logging.INFO if summary and training_args.should_log else log_level)
    logging.getLogger("contrastive_hf").setLevel(log_level)
    data_counts_logger.setLevel(min(log_level, logging.INFO))  # what each epoch or stream pass held, always shown
    transformers.utils.logging.set_verbosity(log_level)
    if log_level > logging.INFO:
        _hide_transformers_progress_bars()
    if not training_args.deepspeed:
        logging.getLogger("DeepSpeed").addFilter(_without_deepspeed_cpu_notice)
    set_seed(training_args.seed)


def _hide_transformers_progress_bars() -> None:
    from huggingface_hub.utils import are_progress_bars_disabled, enable_progress_bars

    downloads_shown = not are_progress_bars_disabled()
    transformers.utils.logging.disable_progress_bar()  # also turns off huggingface_hub's
    if downloads_shown:
        enable_progress_bars()


def _without_deepspeed_cpu_notice(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith("Setting accelerator to CPU")
