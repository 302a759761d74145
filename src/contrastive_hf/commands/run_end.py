"""The end of an example script's run: save, evaluate after training beside before, record both in the run's history,
write the model card and push, merge a LoRA adapter into a whole checkpoint, check that the saved checkpoint reloads,
print how to load it."""

from __future__ import annotations

import logging
import sys

from .loaders import STSB
from .logs import announce

__all__ = [
    "save_trained_model",
    "log_before_after",
    "format_before_after",
    "record_before_after",
    "publish",
    "matryoshka_sts",
    "save_merged_model",
    "finish_sentence_encoder_run",
]

logger = logging.getLogger(__name__)


def save_trained_model(trainer, train_result, **sample_counts: int | None) -> None:
    """Save the model (without pushing: `publish` pushes once the card is written, so a failed push cannot lose the
    run), then save the train metrics (with ``sample_counts`` that are known, e.g. ``train_samples``; printed at
    ``--log_level info``) and the trainer state."""
    announce(f"Saving the model to {trainer.args.output_dir} ...")
    trainer.save_model(_internal_call=True)
    metrics = {**train_result.metrics, **{name: count for name, count in sample_counts.items() if count is not None}}
    if logger.isEnabledFor(logging.INFO):
        trainer.log_metrics("train", metrics)
    trainer.save_metrics("train", metrics)
    trainer.save_state()


def log_before_after(trainer, after: dict[str, float], before: dict[str, float] | None = None) -> dict:
    """Save evaluation metrics measured after training (``eval_<name>``) and, when given, before it
    (``eval_<name>_before``), log them (the model card's results), and print them on the main process, each beside
    its change. Returns what was saved."""
    saved = {f"eval_{name}": value for name, value in after.items()}
    if before:
        saved.update({f"eval_{name}_before": value for name, value in before.items()})
    trainer.save_metrics("eval", saved)
    if trainer.is_world_process_zero():
        trainer.log(saved)  # into the run's log history, which the model card reads its results from
        print(format_before_after(after, before))  # the run's summary lines are printed, not logged
    return saved


def format_before_after(after: dict[str, float], before: dict[str, float] | None = None) -> str:
    """The figures after training, one per line, each with its value before training and the change when known.
    Counts (integers, e.g. a retrieval evaluation's ``queries`` and ``passages``) name what was scored, in the
    heading, once."""
    counts = {name: value for name, value in after.items() if isinstance(value, int) and not isinstance(value, bool)}
    figures = {name: value for name, value in after.items() if name not in counts}
    width = max(map(len, figures), default=0)
    lines = []
    for name, value in figures.items():
        old = before.get(name) if before else None
        decimals = 2 if max(abs(value), abs(old or 0)) >= 10 else 4  # Spearman x 100: 2; alignment, uniformity: 4
        line = f"  {name:<{width}}  "
        if old is None:
            lines.append(line + f"{value:.{decimals}f}")
        else:
            lines.append(line + f"{old:.{decimals}f} -> {value:.{decimals}f}  ({value - old:+.{decimals}f})")
    heading = "Before and after training" if before else "After training"
    if counts:
        heading += f" ({', '.join(f'{value} {name}' for name, value in counts.items())})"
    return heading + ":\n" + "\n".join(lines)


def record_before_after(trainer, after: dict[str, float], before: dict[str, float] | None = None) -> None:
    """Add evaluations made outside the training loop to the run's ``log_history`` (and ``trainer_state.json``), as
    the Trainer logs its own: ``before`` at step 0 (what ``--eval_on_start`` records) and ``after`` at the last
    step, named ``eval_<name>``, so that `contrastive-hf plot` draws the run from where it started. A step that
    already holds these evaluations (``--eval_strategy steps``) is left as it is."""
    state = trainer.state
    first = f"eval_{next(iter(after))}"

    def logged_at(step: int) -> bool:
        return any(entry.get("step") == step and first in entry for entry in state.log_history)

    def entry(figures: dict[str, float], epoch: float, step: int) -> dict:
        return {**{f"eval_{name}": value for name, value in figures.items()}, "epoch": epoch, "step": step}

    if before is not None and not logged_at(0):
        state.log_history.insert(0, entry(before, 0.0, 0))
    if not logged_at(state.global_step):
        state.log_history.append(entry(after, state.epoch, state.global_step))
    trainer.save_state()  # on the main process only


def publish(trainer, card_info=None) -> None:
    """Write the model card, then push (``--push_to_hub``) with it. A failed push leaves the local checkpoint
    complete and says so, then exits with status 1."""
    if card_info is not None:
        trainer.model_card_info = card_info
    trainer.create_model_card()
    if not trainer.args.push_to_hub:
        return
    try:
        trainer.push_to_hub(commit_message="End of training")
    except Exception as error:  # the local checkpoint is complete: say so rather than lose the run
        logger.error(
            "Pushing to the Hub failed (%s: %s). The checkpoint in %s is complete and unchanged; push it later with "
            "`hf upload <repo id> %s` or trainer.push_to_hub().",
            type(error).__name__,
            error,
            trainer.args.output_dir,
            trainer.args.output_dir,
        )
        sys.exit(1)


def matryoshka_sts(model, stsb, tokenizer) -> dict[int, dict]:
    """STS-B of the first m dimensions for each Matryoshka size m the model was trained with (its config's
    ``matryoshka_dims``); {} without them."""
    from ..evaluation import evaluate_sts_per_dimension

    dims = getattr(getattr(model, "config", None), "matryoshka_dims", None)
    return evaluate_sts_per_dimension(model, stsb, dims, tokenizer=tokenizer) if dims else {}


def save_merged_model(trainer, tokenizer) -> str:
    """The folder of the whole trained model: ``output_dir``, or, after a run that trained a LoRA adapter (saved in
    ``output_dir``, where it loads onto its base with peft), ``<output_dir>-merged``, where the adapter is merged
    into the weights (`hub.adapters.merge_and_save`) as a whole checkpoint that loads by every path a full run's
    does. Every script ends its adapter runs here.

    Runs on every process: under DeepSpeed ZeRO-3 the merge gathers every process's parameter shards first.
    """
    from ..hub.adapters import adapted_model, merge_and_save
    from ..models.checkpoint_names import merged_folder
    from .zero3 import whole_parameters

    peft_model = adapted_model(trainer.model)
    if peft_model is None:
        return trainer.args.output_dir
    merged_dir = merged_folder(trainer.args.output_dir)
    announce(f"Merging the LoRA adapter into a whole checkpoint in {merged_dir} ...")
    with whole_parameters(trainer.model):
        if trainer.is_world_process_zero():
            merge_and_save(peft_model, merged_dir, tokenizer)
    if trainer.is_world_process_zero():
        print(
            f"The LoRA adapter is in {trainer.args.output_dir} (it loads onto its base model with peft; its "
            f"README.md says how), the merged model in {merged_dir}."
        )
    return merged_dir


def finish_sentence_encoder_run(
    trainer,
    train_result,
    tokenizer,
    card_info=None,
    stsb=None,
    sts_before: dict[str, float] | None = None,
    **sample_counts: int | None,
) -> None:
    """The end of a sentence-encoder run (CLEAR, SimCSE, DeCLUTR, SG-BERT): save; score STS-B dev (``stsb``, an
    `STSData`) after training beside ``sts_before``; write the card and push; merge a LoRA adapter into a full
    checkpoint beside ``output_dir``; check that the saved checkpoint reloads with `AutoModel` and gives the trained
    embeddings; print how to load it.

    Runs on every process: under DeepSpeed ZeRO-3 every forward pass needs all processes' parameter shards; the
    files are written and the lines printed by the main process only.
    """
    from ..evaluation import sts_eval_metrics
    from .reload_check import loading_instructions, trained_embeddings, verify_reload

    save_trained_model(trainer, train_result, **sample_counts)
    model = trainer.model
    sentences = ["A man is playing a guitar.", "A cat sleeps on the sofa.", "Stocks fell sharply on Monday."]
    if stsb is not None:
        announce("Scoring STS-B dev after training ...")
        after = sts_eval_metrics(model, stsb, tokenizer, prefix=STSB)
        per_dimension = matryoshka_sts(model, stsb, tokenizer)
        after.update({f"{STSB}_spearman_dim{dim}": result["spearman"] for dim, result in per_dimension.items()})
        record_before_after(trainer, after, sts_before)
        log_before_after(trainer, after, sts_before)
        if card_info is not None:
            card_info.eval_results = {"stsb_dev": {"spearman": after[f"{STSB}_spearman"]}}
            card_info.eval_results.update(
                {f"stsb_dev_dim{dim}": {"spearman": result["spearman"]} for dim, result in per_dimension.items()}
            )
        sentences = stsb.sentences1[:32]
    trained = trained_embeddings(model.contrastive, sentences, tokenizer)  # what the saved checkpoint must give
    publish(trainer, card_info)

    loadable_dir = save_merged_model(trainer, tokenizer)
    if not trainer.is_world_process_zero():
        return
    announce("Checking that the saved model reloads with the trained embeddings ...")
    verify_reload(loadable_dir, tokenizer, trained)
    print(loading_instructions(loadable_dir))
