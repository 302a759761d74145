"""Model cards written at the end of training, from the Jinja2 template ``templates/contrastive_model_card.md``."""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass, field
from pathlib import Path

import torch
from huggingface_hub import EvalResult, ModelCard, ModelCardData

from ..models.sentence_transformers_files import sentence_transformers_unsupported_reason

__all__ = ["METHODS", "ModelCardInfo", "render_model_card", "write_model_card", "TEMPLATE_PATH"]

# The Jinja2 template of every card (shipped in the wheel as package data).
TEMPLATE_PATH = Path(__file__).parent / "templates" / "contrastive_model_card.md"


def _method_cards() -> dict[str, dict]:
    """Each recipe's card text (description, short citation, BibTeX), by method name."""
    from ..recipes import clear, declutr, dpr, sg_bert, simcse

    cards = [clear.MODEL_CARD, *simcse.MODEL_CARDS.values(), declutr.MODEL_CARD, dpr.MODEL_CARD, sg_bert.MODEL_CARD]
    return {card["name"]: card for card in cards}


METHODS = _method_cards()


# Hub data sets and display names for the tasks of an evaluation ("stsb_dev" -> "stsb"); others keep their own name.
_HUB_DATASETS = {
    "stsb": "sentence-transformers/stsb",
    "sts12": "mteb/sts12-sts",
    "sts13": "mteb/sts13-sts",
    "sts14": "mteb/sts14-sts",
    "sts15": "mteb/sts15-sts",
    "sts16": "mteb/sts16-sts",
    "sickr": "mteb/sickr-sts",
}
_DATASET_NAMES = {"stsb": "STS Benchmark", "sickr": "SICK-R"}


@dataclass
class ModelCardInfo:
    """What a card says about a run; every field is free of local paths, tokens and user names."""

    method: str
    model_name: str
    base_model: str | None  # a Hub id, or None when trained from scratch or from a local checkpoint
    augmentation: str
    training_data: str
    hyperparameters: dict
    # {"stsb_dev": {"spearman": 72.3}, "sts12": {"spearman": 60.1}, "mr": {"accuracy": 80.2}, "avg_sts": {...}}
    eval_results: dict = field(default_factory=dict)
    world_size: int = 1
    zero_stage: int | None = None  # DeepSpeed ZeRO stage, when training ran under DeepSpeed
    negatives_gathered: bool = True  # with world_size > 1: every process's views were negatives of every query
    adapter: str | None = None  # e.g. "LORA adapter (r=8, alpha=16) on query, value": the repo holds only the adapter
    repo_id: str | None = None
    hard_negatives: bool = False  # a third view per example was each anchor's hard negative
    prebatch_size: int = 0  # the keys of this many previous batches were extra negatives
    objective: str | None = None  # the objective in words, for methods not described by mlm_weight / cl_weight


def _describe_projection(config) -> str:
    if config.projection_type == "none":
        return "none"
    usage = "kept at inference" if config.projection_at_inference else "training only"
    if config.projection_type == "linear":
        return f"linear to {config.projection_dim or config.encoder.hidden_size} ({usage})"
    return (
        f"MLP, {config.projection_layers} layers, {config.projection_activation}, output "
        f"{config.projection_dim or config.encoder.hidden_size} ({usage})"
    )


def render_model_card(model, info: ModelCardInfo) -> ModelCard:
    """The card of ``model`` (a contrastive model) for the run ``info``; it validates as a Hub model card."""
    config = model.config
    method = METHODS[info.method]
    eval_rows, eval_results = [], []
    for task, metrics in info.eval_results.items():
        for metric, value in metrics.items():
            if metric not in ("spearman", "pearson", "accuracy"):
                continue
            eval_rows.append({"task": task, "metric": f"{metric} x 100", "value": value})
            if task.startswith("avg"):
                continue  # averages go in the table only: the Hub's model-index wants one data set per result
            similarity = metric != "accuracy"
            eval_results.append(
                EvalResult(
                    task_type="sentence-similarity" if similarity else "text-classification",
                    dataset_type=_HUB_DATASETS.get(task.split("_")[0], task.split("_")[0]),
                    dataset_name=_DATASET_NAMES.get(task.split("_")[0], task),
                    dataset_split="validation" if "dev" in task else "test",
                    metric_type=f"{metric}_cosine" if similarity else "accuracy",
                    metric_value=round(value, 2),
                )
            )
    card_data = ModelCardData(
        library_name="peft" if info.adapter else "transformers",
        pipeline_tag="sentence-similarity",
        tags=["sentence-similarity", "contrastive-learning", info.method.lower(), "contrastive_hf"],
        base_model=info.base_model,
        model_name=info.model_name,
        eval_results=eval_results or None,
    )
    hyperparameters = ", ".join(f"{key} {value}" for key, value in info.hyperparameters.items())
    encoder = config.encoder
    return ModelCard.from_template(
        card_data,
        template_path=str(TEMPLATE_PATH),
        model_name=info.model_name,
        method=info.method,
        method_description=method["description"],
        citation_short=method["citation_short"],
        citation_bibtex=method["bibtex"],
        base_model_text=f"[{info.base_model}](https://huggingface.co/{info.base_model})"
        if info.base_model
        else "none (trained from scratch or from a local checkpoint)",
        encoder_description=f"{encoder.model_type}, {getattr(encoder, 'num_hidden_layers', '?')} layers, "
        f"hidden size {encoder.hidden_size}, vocabulary {encoder.vocab_size}",
        pooler_type=config.pooler_type,
        projection_description=_describe_projection(config),
        views_description=f"`{info.augmentation}`",
        objective_description=info.objective
        or (
            f"{config.mlm_weight} x L_MLM + {config.cl_weight} x L_CL ({config.contrastive_loss})"
            if config.mlm_weight > 0
            else f"L_CL ({config.contrastive_loss})"
        ),
        temperature=config.temperature,
        negatives_description=_describe_negatives(info),
        sentence_transformers=_describe_sentence_transformers(model),
        encoder_type=type(model.get_encoder_model()).__name__,
        training_data=info.training_data,
        hyperparameters=hyperparameters,
        hardware=_hardware(info.world_size, info.zero_stage),
        eval_rows=eval_rows,
        repo_id=info.repo_id or info.model_name,
        embedding_size=config.embedding_size,
        adapter=info.adapter,
        base_model=info.base_model or "BASE_MODEL",
        base_model_arguments=_base_model_arguments(config),
        limitations="Scores were measured on the evaluation data named above only. The model inherits the biases "
        "of its training text (English Wikipedia for the demo) and is not meant for languages it was not trained on.",
    )


def _describe_negatives(info: ModelCardInfo) -> str:
    if info.world_size == 1:
        parts = ["in-batch"]
    elif info.negatives_gathered:
        parts = [f"in-batch, gathered across the {info.world_size} processes (the global batch)"]
    else:
        parts = ["in-batch, each process's own batch"]
    if info.hard_negatives:
        parts.append("a hard negative per anchor")
    if info.prebatch_size:
        parts.append(f"pre-batch negatives (the keys of the previous {info.prebatch_size} batch(es))")
    return "; ".join(parts)


def _base_model_arguments(config) -> str:
    """The ContrastiveConfig fields that rebuild the trained model's head around a pretrained encoder."""
    names = ("pooler_type", "projection_type", "projection_dim", "projection_hidden_size", "projection_layers")
    names += ("projection_activation", "projection_output_activation", "projection_at_inference", "temperature")
    return ", ".join(f"{name}={getattr(config, name)!r}" for name in names)


def _describe_sentence_transformers(model) -> str | None:
    """What SentenceTransformer(path) runs for this checkpoint, or None when it cannot express the pooling."""
    model = getattr(model, "contrastive", model)
    if sentence_transformers_unsupported_reason(model) is not None:
        return None
    config = model.config
    steps = ["the encoder", f"{config.pooler_type} pooling"]
    if config.pooler_type == "cls":
        steps[-1] = "[CLS] pooling, the encoder's pooler layer (dense + tanh)"
    if config.projection_at_inference and config.projection_type != "none":
        steps.append("the projection head")
    return ", then ".join(steps)


def _hardware(world_size: int, zero_stage: int | None = None) -> str:
    if torch.cuda.is_available():
        device = torch.cuda.get_device_name(0)
    else:
        device = f"CPU ({platform.machine()}, {os.cpu_count()} cores)"
    text = f"{world_size} processes x {device}" if world_size > 1 else device
    return text + (f", DeepSpeed ZeRO stage {zero_stage}" if zero_stage is not None else "")


def write_model_card(output_dir: str | os.PathLike, model, info: ModelCardInfo) -> Path:
    """Render the card and save it as ``output_dir/README.md``."""
    path = Path(output_dir) / "README.md"
    render_model_card(model, info).save(path)
    return path
