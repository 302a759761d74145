"""What an example script reads besides its model (`loading.py`): the tokenizer, the training corpus (tokenized, cut,
or streamed with each process reading its own shards) and the STS-B dev set scored around training."""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager

from .arguments import CorpusArguments, EncoderArguments
from .errors import UsageError, as_usage_error
from .logs import announce

__all__ = [
    "load_tokenizer",
    "load_sentences",
    "corpus_progress_bars",
    "evaluates_during_training",
    "load_sts_dev",
    "STSB",
]


def load_tokenizer(encoder_args: EncoderArguments):
    """The tokenizer of ``--tokenizer_name``, else of ``--model_name_or_path``."""
    from transformers import AutoTokenizer

    name = encoder_args.tokenizer_name or encoder_args.model_name_or_path
    if name is None:
        raise UsageError("Give --tokenizer_name (or --model_name_or_path, whose tokenizer is then used).")
    return AutoTokenizer.from_pretrained(name, cache_dir=encoder_args.cache_dir)


def load_sentences(data_args: CorpusArguments, tokenizer, training_args, cache_dir: str | None = None, **tokenize):
    """The training corpus of ``data_args``, tokenized (`tokenize_corpus`, with the ``tokenize`` options such as
    ``line_by_line``) and cut to ``--max_train_samples`` (a line-by-line corpus before tokenizing, so that the lines
    left out are never tokenized); with ``--streaming``, an endless stream of which each process reads its own shards
    (`prepare_streaming`), its lines cut into parts of equal counts for the processes and their dataloader workers."""
    from ..data.reading import first_examples, load_corpus, rows_holding_lines
    from ..data.streams import prepare_streaming, stream_readers
    from ..data.tokenizing import tokenize_corpus

    count = data_args.max_train_samples
    source = os.path.basename(data_args.train_file) if data_args.train_file else data_args.dataset_name
    announce(f"{'Streaming' if data_args.streaming else 'Reading and tokenizing'} the corpus ({source}) ...")
    with training_args.main_process_first(desc="corpus tokenization"), corpus_progress_bars(data_args.train_file):
        corpus = load_corpus(
            data_args.train_file,
            data_args.dataset_name,
            data_args.dataset_config_name,
            cache_dir=cache_dir,
            streaming=data_args.streaming,
            readers=stream_readers(training_args),
        )
        if count is not None and count > 0 and tokenize.get("line_by_line", True) and not data_args.streaming:
            corpus = rows_holding_lines(corpus, count, data_args.text_column)  # a line gives one example or more
        dataset = tokenize_corpus(
            corpus,
            tokenizer,
            max_seq_length=data_args.max_seq_length,
            text_column=data_args.text_column,
            num_proc=data_args.preprocessing_num_workers,
            **tokenize,
        )
    if data_args.streaming:
        return prepare_streaming(dataset, training_args, count, data_args.train_file)
    return first_examples(dataset, count)


SMALL_CORPUS_BYTES = 10_000_000  # read and tokenized in seconds: no progress bars for it above --log_level info


@contextmanager
def corpus_progress_bars(path: str | None):
    """datasets' progress bars while the corpus file ``path`` is read and tokenized: off for a small file (they
    flash by) unless the log level is INFO or lower; a Hub dataset (None) or a large file keeps them."""
    import datasets

    small = path is not None and os.path.isfile(path) and os.path.getsize(path) < SMALL_CORPUS_BYTES
    quiet = small and logging.getLogger("contrastive_hf").getEffectiveLevel() > logging.INFO
    if not quiet or datasets.are_progress_bars_disabled():
        yield
        return
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        datasets.enable_progress_bars()


def evaluates_during_training(training_args) -> bool:
    """Whether the Trainer evaluates (every ``--eval_steps`` or epoch, or once before the first step with
    ``--eval_on_start``), so that the run gives it its eval set."""
    return training_args.eval_strategy != "no" or bool(training_args.eval_on_start)


def load_sts_dev(data_args: CorpusArguments, training_args, model, tokenizer):
    """``(stsb, before)``: STS-B dev from ``--stsb_dev_file`` (None without it) and ``model``'s figures on it before
    training (`sts_eval_metrics`: ``stsb_spearman``, ``stsb_pearson``, ``stsb_alignment``, ``stsb_uniformity``).
    Scored on every process: under DeepSpeed ZeRO-3 a forward pass needs every process's shards."""
    from ..evaluation import read_stsbenchmark, sts_eval_metrics

    if not data_args.stsb_dev_file:
        if evaluates_during_training(training_args):
            raise UsageError(
                "--eval_strategy and --eval_on_start score STS-B dev during training: give --stsb_dev_file "
                "(sts-dev.csv)."
            )
        return None, None
    with as_usage_error():  # a file that is not STS-B's (its line named), or not UTF-8
        stsb = read_stsbenchmark(data_args.stsb_dev_file)
    announce(f"Scoring STS-B dev before training ({len(stsb):,} pairs) ...")
    # on the device training will use (the Trainer moves the model there later; a GPU run scored on the CPU)
    before = sts_eval_metrics(model.to(training_args.device), stsb, tokenizer, prefix=STSB)
    replaced, published = _as_its_folder_defines_it(model, training_args)
    own = None
    if published is not None:  # the run replaced how the starting model embeds: its own score too
        own = sts_eval_metrics(published.to(training_args.device), stsb, tokenizer, prefix=STSB)[f"{STSB}_spearman"]
        del published
    if training_args.should_log:
        spearman = before[f"{STSB}_spearman"]
        if own is None:
            print(f"STS-B dev Spearman before training: {spearman:.2f}")
        else:
            ours = ", ".join(f"{name}={value!r}" for name, (_, value) in replaced.items())
            theirs = ", ".join(f"{name}={value!r}" for name, (value, _) in replaced.items())
            print(f"STS-B dev Spearman before training: {spearman:.2f} (with this run's {ours})")
            print(f"STS-B dev Spearman of the starting model as its folder defines it ({theirs}): {own:.2f}")
    return stsb, before


def _as_its_folder_defines_it(model, training_args):
    """``(replaced settings, model)``: the starting model as its sentence-transformers folder defines it, where the
    run's settings replaced how it embeds (`replaced_folder_settings`: the demo pools all-MiniLM-L6-v2's [CLS] token
    where the folder averages its tokens); ``({}, None)`` otherwise."""
    import torch

    from ..models.configuration_contrastive import ContrastiveConfig
    from ..models.modeling_contrastive import ContrastiveModel, replaced_folder_settings
    from .zero3 import built_whole

    config = getattr(model, "config", None)
    replaced = replaced_folder_settings(config) if isinstance(config, ContrastiveConfig) else {}
    if not replaced:
        return {}, None
    with built_whole(training_args):
        published = ContrastiveModel.from_pretrained(config._name_or_path, dtype=torch.float32)
    return replaced, published


STSB = "stsb"  # the eval set's name in metric names (eval_stsb_spearman), as ContrastiveTrainer logs it
