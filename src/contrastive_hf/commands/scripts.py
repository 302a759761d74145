"""What every example script does first: read its arguments (flags, or one JSON file of the same keys) and set up
logging and the seed as transformers' example scripts do."""

from __future__ import annotations

import logging
import os
import sys

import transformers
from transformers import HfArgumentParser, set_seed

__all__ = ["parse_arguments", "setup_logging"]


def parse_arguments(parser: HfArgumentParser, argv: list[str] | None = None) -> tuple:
    """The parser's dataclasses from ``argv`` (default: the command line): flags, or a single ``.json`` file."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 1 and argv[0].endswith(".json"):
        return parser.parse_json_file(json_file=os.path.abspath(argv[0]))
    return parser.parse_args_into_dataclasses(args=argv)


def setup_logging(training_args, logger: logging.Logger, summary: bool = False) -> None:
    """Log to stdout at the process's level (the main process logs, the others warn), for the script's ``logger``,
    contrastive_hf and transformers; then seed everything with ``training_args.seed``. ``summary``: the script's own
    logger reports at INFO on the main process whatever the level, for its summary lines."""
    logging.basicConfig(
        format="%(asctime)s - %(levelname)s - %(name)s - %(message)s",
        datefmt="%m/%d/%Y %H:%M:%S",
        handlers=[logging.StreamHandler(sys.stdout)],
    )
    log_level = training_args.get_process_log_level()
    logger.setLevel(logging.INFO if summary and training_args.should_log else log_level)
    logging.getLogger("contrastive_hf").setLevel(log_level)
    transformers.utils.logging.set_verbosity(log_level)
    set_seed(training_args.seed)
