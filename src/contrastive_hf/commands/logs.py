"""Logging and seeding of an example script, as transformers' example scripts do, with the log kept to what matters."""

from __future__ import annotations

import logging
import os
import sys

import transformers
from transformers import set_seed

__all__ = ["setup_logging", "announce", "run_training", "announce_first_deepspeed_build"]


def setup_logging(training_args, logger: logging.Logger, summary: bool = False) -> None:
    """Log to stdout at the process's level (the main process logs, the others warn), for the script's ``logger``,
    contrastive_hf and transformers; then seed everything with ``training_args.seed``. ``summary``: the script's own
    logger reports at INFO on the main process whatever the level, for its summary lines.

    Above INFO (the default) the log is kept to what matters: transformers' progress bars (loading weights, writing
    shards: they flash by) are off, Hub downloads keep theirs, and DeepSpeed's notice that it found no GPU, printed
    wherever DeepSpeed is installed because accelerate imports it, is hidden unless ``--deepspeed`` is given.
    ``--log_level info`` shows everything. Always shown: what each epoch held (`data.streams.data_counts_logger`)
    and, once, which precision training and encoding run in and why (`models.precision`).
    """
    from ..data.streams import data_counts_logger
    from ..models.precision import logger as precision_logger

    logging.basicConfig(
        format="%(asctime)s - %(levelname)s - %(name)s - %(message)s",
        datefmt="%m/%d/%Y %H:%M:%S",
        handlers=[logging.StreamHandler(sys.stdout)],
    )
    log_level = training_args.get_process_log_level()
    logger.setLevel(logging.INFO if summary and training_args.should_log else log_level)
    logging.getLogger("contrastive_hf").setLevel(log_level)
    data_counts_logger.setLevel(min(log_level, logging.INFO))  # what each epoch or stream pass held, always shown
    precision_logger.setLevel(min(log_level, logging.INFO))  # which precision training and encode run in, and why
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


def announce(message: str) -> None:
    """Say on the main process what the script starts doing, before each phase that can take minutes (loading,
    scoring, training, saving, checking), so that a run on a busy machine never looks hung."""
    if int(os.environ.get("RANK", "0")) == 0:
        print(message, flush=True)


def run_training(trainer):
    """`trainer.train()` (resuming from ``--resume_from_checkpoint``), announced; a resume refused for its other
    processes, batch size or streaming (`DataLayoutChangedError`) is the user's to fix: a `UsageError`."""
    from ..training.resume_changes import DataLayoutChangedError
    from .errors import UsageError

    args = trainer.args
    resume = args.resume_from_checkpoint
    length = f"{args.max_steps} steps" if args.max_steps > 0 else f"{args.num_train_epochs:g} epoch(s)"
    announce(f"Training for {length}{f', resuming from {resume}' if resume else ''} ...")
    try:
        return trainer.train(resume_from_checkpoint=resume)
    except DataLayoutChangedError as error:
        raise UsageError(str(error)) from error


# DeepSpeed's CPU accelerator communicates through a C++ op it compiles with ninja the first time it runs, for a
# minute or more, silently; torch keeps the result (its extensions folder) for later runs.
DEEPSPEED_CPU_OP = "deepspeed_shm_comm"


def announce_first_deepspeed_build(argv: list[str]) -> None:
    """Announce DeepSpeed's one-time build of its CPU communication op, when this run uses DeepSpeed on the CPU
    (``accelerate launch`` with a DeepSpeed config, or ``--deepspeed``; ``DS_ACCELERATOR=cpu``) and the op is not
    in torch's extensions folder yet."""
    uses_deepspeed = os.environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() == "true" or "--deepspeed" in argv
    if not uses_deepspeed or os.environ.get("DS_ACCELERATOR") != "cpu" or _built(DEEPSPEED_CPU_OP):
        return
    announce(
        "DeepSpeed compiles its CPU communication op on first use: a minute or more, once (later runs reuse it) ..."
    )


def _built(op: str) -> bool:
    """Whether torch's extensions folder (``TORCH_EXTENSIONS_DIR``, else ``~/.cache/torch_extensions``) holds a
    compiled ``op``."""
    import glob

    root = os.environ.get("TORCH_EXTENSIONS_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "torch_extensions"
    )
    return bool(glob.glob(os.path.join(root, "**", f"{op}*", "*.so"), recursive=True))
