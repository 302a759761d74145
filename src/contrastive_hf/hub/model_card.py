"""Model cards for every checkpoint a `ContrastiveTrainer` writes, from the Jinja2 template
``templates/contrastive_model_card.md``.

A card states the method (with its paper), the base model, the encoder, pooler and projection, the positive pairs,
the objective, negatives and temperature, the training data, hyper-parameters, hardware and framework versions, the
results, and how to load the checkpoint (sentence-transformers first: it needs no remote code). Its metadata follows
sentence-transformers' cards (``library_name: sentence-transformers``, ``pipeline_tag: sentence-similarity``, its
tags, results in ``model-index`` as ``spearman_cosine`` between 0 and 1) and names data sets by Hub id only when the
data came from the Hub; a local file is described in the text and its results carry a plain task name, as
sentence-transformers' own cards do (``sts-dev``).

`ModelCardInfo` holds what a run knows beyond the model: a script fills it; a `ContrastiveTrainer` used from
Python builds one from its model, collator, arguments and logged evaluations (`card_info_from_trainer`). The method's
paragraph and citation are the text its recipe registered (`hub.method_cards`).
"""

from __future__ import annotations

import os
import platform
import re
from dataclasses import dataclass, field, replace
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import torch
from huggingface_hub import EvalResult, ModelCard, ModelCardData

from .._files import hub_id_or_none
from ..models.checkpoint_names import merged_folder
from ..models.configuration_contrastive import BIDIRECTIONAL_DECODERS
from ..models.masked_lm_checkpoint import is_decoder
from ..models.objectives import get_loss
from ..models.poolers import POOLERS, get_pooler
from ..models.sentence_transformers_files import sentence_transformers_unsupported_reason
from .adapters import adapted_model, base_model_settings, describe_adapter
from .method_cards import GENERIC_METHOD, claimed_method, method_card

__all__ = [
    "ModelCardInfo",
    "card_info_from_trainer",
    "render_model_card",
    "write_model_card",
    "TEMPLATE_PATH",
    "text_embeddings_inference_caveats",
]

# The Jinja2 template of every card (shipped in the wheel as package data).
TEMPLATE_PATH = Path(__file__).parent / "templates" / "contrastive_model_card.md"


# How evaluation tasks are named in the card's metadata: plain task names (no Hub data set is claimed for data read
# from local files), with sentence-transformers' type for STS-B dev.
_RESULT_TYPES = {"stsb_dev": "sts-dev", "stsb_test": "sts-test"}
_DATASET_NAMES = {
    "stsb_dev": "STS Benchmark (dev)",
    "stsb_test": "STS Benchmark (test)",
    "stsb": "STS Benchmark",
    "sickr": "SICK-R",
}
# eval_recall@5, eval_mrr, eval_<set>_recall@5_dim64: the retrieval metrics a run logs (never the _before ones)
_RETRIEVAL_METRIC = re.compile(r"eval_(?:(?P<task>\w+?)_)?(?P<metric>(?:recall@\d+|mrr)(?:_dim\d+)?)")

# GLUE figures (`evaluation.glue.glue_card_results`: "glue_<config>[_matched|_mismatched]") as run_glue.py's cards
# name them: the `evaluate` metric ids, the data set "GLUE <CONFIG>".
_GLUE_METRIC_TYPES = {
    "accuracy": "accuracy",
    "f1": "f1",
    "pearson": "pearsonr",
    "spearman": "spearmanr",
    "matthews_correlation": "matthews_correlation",
}
_FRAMEWORKS = ("contrastive_hf", "transformers", "sentence-transformers", "torch", "datasets", "accelerate")


@dataclass
class ModelCardInfo:
    """What a card says about a run; every field is free of local paths, tokens and user names."""

    method: str
    model_name: str
    base_model: str | None  # a Hub id, or None when trained from scratch or from a local checkpoint
    augmentation: str
    training_data: str
    hyperparameters: dict
    # {"stsb_dev": {"spearman": 72.3}, "sts12": {"spearman": 60.1}, "mr": {"accuracy": 80.2}, "avg_sts": {...}};
    # GLUE's from evaluation.glue.glue_card_results: {"glue_mrpc": {"accuracy": 84.1, "f1": 88.2}, "avg_glue": {...}}
    eval_results: dict = field(default_factory=dict)
    world_size: int = 1
    zero_stage: int | None = None  # DeepSpeed ZeRO stage, when training ran under DeepSpeed
    negatives_gathered: bool = True  # with world_size > 1: every process's views were negatives of every query
    adapter: str | None = None  # e.g. "LORA adapter (r=8, alpha=16) on query, value": the repo holds only the adapter
    # With an adapter: the base model its adapter_config.json names (a Hub id or a relative name, never an absolute
    # path: `hub.adapters.adapter_base_name`) and the contrastive_hf class peft rebuilds it as
    adapter_base: str | None = None
    adapter_class: str | None = None
    repo_id: str | None = None
    hard_negatives: int = 0  # hard negatives per anchor (views 2.. of each example); True counts as one
    prebatch_size: int = 0  # the keys of this many previous batches were extra negatives
    objective: str | None = None  # the objective in words, for methods not described by mlm_weight / cl_weight
    datasets: list[str] = field(default_factory=list)  # Hub ids of the training data, when it came from the Hub
    # What the augmentation does, in words: the registered description of each augmentation it names
    augmentation_description: str = ""
    license: str | None = None
    language: list[str] | str | None = None
    tags: list[str] = field(default_factory=list)
    # What the card says of the machine and the libraries; None: the ones this process runs on (set to render a
    # recorded run's card again, as model_cards/ does)
    hardware: str | None = None
    frameworks: str | None = None


def _data_changes_at_resume(trainer) -> list[str]:
    """What resumes with ``--resume_with_changed_data`` changed in the run's data (its `DataLayout`'s record)."""
    layout = getattr(trainer, "data_layout", None)
    return list(layout.layout.get("changed_at_resume", [])) if layout is not None else []


def card_info_from_trainer(
    trainer, model_name: str | None = None, hyperparameters: dict | None = None, **fields
) -> ModelCardInfo:
    """What a `ContrastiveTrainer` run can say about itself: the method and views from its collator
    (``card_description()``), the base model from the model, hyper-parameters from its arguments, and the last
    logged evaluation of each eval set (``eval_<name>_spearman``). ``hyperparameters`` adds to those;
    ``fields`` set `ModelCardInfo` fields a script knows better (``training_data``, ``augmentation``...)."""
    model = trainer.saved_model()
    collator = trainer.data_collator
    described = collator.card_description() if hasattr(collator, "card_description") else {}
    method = _method_of_run(described, model) or getattr(trainer, "card_method", None) or GENERIC_METHOD
    args = trainer.args
    extra_hyperparameters, hyperparameters = (
        hyperparameters,
        {
            "steps": trainer.state.global_step,
            "batch size": args.per_device_train_batch_size * args.world_size,
            "learning rate": args.learning_rate,
            "seed": args.seed,
        },
    )
    if getattr(collator, "max_length", None):
        hyperparameters["max length"] = collator.max_length
    changed = _data_changes_at_resume(trainer)
    if changed:  # --resume_with_changed_data: what the run trained on before, beside what the collator makes now
        hyperparameters["data changed when resumed"] = "; ".join(changed)
    results = {}
    for entry in trainer.state.log_history:
        for key, value in entry.items():
            if key.startswith("eval_") and key.endswith(("_spearman", "_pearson")):
                task, metric = key[len("eval_") :].rsplit("_", 1)
                results.setdefault(f"{task}_dev" if task == "stsb" else task, {})[metric] = value
            retrieval = _RETRIEVAL_METRIC.fullmatch(key)
            if retrieval:  # a dual encoder's retrieval evaluation (evaluation/retrieval.py): eval_[<set>_]recall@k
                results.setdefault(retrieval["task"] or "retrieval", {})[retrieval["metric"]] = value
    name_or_path = getattr(model.config, "_name_or_path", "")
    hyperparameters.update(extra_hyperparameters or {})
    info = ModelCardInfo(
        method=method,
        model_name=model_name or os.path.basename(os.path.normpath(args.output_dir)),
        base_model=hub_id_or_none(name_or_path),
        augmentation=described.get("views", "as the collator makes them"),
        augmentation_description=described.get("views_description", ""),
        training_data=described.get("data", "not recorded (pass dataset=... to create_model_card)"),
        hyperparameters=hyperparameters,
        eval_results={task: metrics for task, metrics in results.items() if "spearman" in metrics or "mrr" in metrics},
        hard_negatives=int(described.get("hard_negatives", 0)),
        objective=_handed_loss_objective(trainer, model),
        **_adapter_fields(model),
    )
    return replace(info, **fields)


def _handed_loss_objective(trainer, model) -> str | None:
    """The objective in words when the trainer's loss is not the one the model's config names (a loss handed to
    ``ContrastiveTrainer(loss=...)``); None when the config says it."""
    loss = getattr(trainer, "loss_fn", None)
    name = getattr(loss, "name", None)
    if not name or name == getattr(model.config, "contrastive_loss", "info_nce"):
        return None
    return f"L_CL ({name}: {loss.description}, over {loss.similarity} similarities, temperature {loss.temperature})"


def _adapter_fields(model) -> dict:
    """`ModelCardInfo`'s adapter fields for ``model``: {} without an adapter."""
    peft_model = adapted_model(model)
    if peft_model is None:
        return {}
    return {
        "adapter": describe_adapter(peft_model),
        "adapter_base": peft_model.peft_config["default"].base_model_name_or_path,
        "adapter_class": type(peft_model.get_base_model()).__name__,
    }


def _method_of_run(described: dict, model) -> str | None:
    """The method a run's collator names, or the one whose recipe claims what the run did (its collator's facts and
    its model's type; `hub.method_cards.claimed_method`); for a mixture of datasets, the one method all its datasets
    share. None when nothing names or claims one."""
    if described.get("method"):
        return described["method"]
    if "parts" in described:
        methods = {_method_of_run(part, model) for part in described["parts"]}
        return methods.pop() if len(methods) == 1 else None
    facts = {"model_type": model.config.model_type, "mlm_weight": getattr(model.config, "mlm_weight", 0), **described}
    return claimed_method(facts)


def _describe_model(model) -> dict:
    """The card's description of the model's parts, for either family (`ContrastiveModel` or `DualEncoderModel`)."""
    config = model.config
    dual = getattr(config, "model_type", "") == "dual_encoder"
    encoder = config.query_encoder if dual else config.encoder
    encoder_text = (
        f"{encoder.model_type}, {getattr(encoder, 'num_hidden_layers', '?')} layers, hidden size "
        f"{encoder.hidden_size}, vocabulary {encoder.vocab_size}"
    )
    if not dual and encoder.model_type in BIDIRECTIONAL_DECODERS:  # a decoder: which way it attends
        encoder_text += ", attending both ways" if config.bidirectional_attention else ", causal attention"
    if dual:
        towers = "one shared encoder" if config.share_encoders else "a question encoder and a passage encoder"
        projection = f"linear to {config.projection_dim}" if config.projection_dim else "none"
        return {
            "encoder_description": f"{towers}: {encoder_text}",
            "projection_description": projection,
            "objective_description": f"L_CL ({_loss_words(config.contrastive_loss)}), over {config.similarity} "
            "similarities",
            "similarity": config.similarity,
        }
    if config.projection_type == "none":
        projection = "none"
    else:
        usage = "kept at inference" if config.projection_at_inference else "training only"
        size = config.projection_dim or encoder.hidden_size
        if config.projection_type == "linear":
            projection = f"linear to {size} ({usage})"
        else:
            projection = (
                f"MLP, {config.projection_layers} layers, {config.projection_activation}, output {size} ({usage})"
            )
    loss = _loss_words(config.contrastive_loss)
    objective = f"L_CL ({loss})"
    if config.mlm_weight > 0:
        # a decoder's MLM is masked next-token prediction (`ContrastiveForPreTraining.predicts_next_token`)
        mlm = "L_MNTP (masked next-token prediction)" if is_decoder(encoder) else "L_MLM"
        objective = f"{config.mlm_weight} x {mlm} + {config.cl_weight} x L_CL ({loss})"
    return {
        "encoder_description": encoder_text,
        "projection_description": projection,
        "objective_description": objective,
        "similarity": "cosine",
    }


def _loss_words(name: str) -> str:
    """A registered loss in the card's words: ``name: description``."""
    return f"{name}: {get_loss(name).description}"


def _framework_versions() -> str:
    versions = []
    for package in _FRAMEWORKS:
        try:
            versions.append(f"{package} {version(package)}")
        except PackageNotFoundError:
            continue
    return ", ".join(versions)


def render_model_card(model, info: ModelCardInfo) -> ModelCard:
    """The card of ``model`` (a contrastive_hf model) for the run ``info``; its metadata parses as a Hub card."""
    config = model.config
    method = method_card(info.method)
    eval_rows, eval_results = [], []
    for task, metrics in info.eval_results.items():
        if task.startswith("glue_") or task == "avg_glue":
            rows, results = _glue_results(task, metrics)
            eval_rows += rows
            eval_results += results
            continue
        for metric, value in metrics.items():
            if _RETRIEVAL_METRIC.fullmatch(f"eval_{metric}"):
                eval_rows.append({"task": task, "metric": metric, "value": f"{value:.4f}"})  # a fraction
                eval_results.append(_retrieval_result(task, metric, value, getattr(config, "similarity", "cosine")))
                continue
            if metric not in ("spearman", "pearson", "accuracy"):
                continue
            eval_rows.append({"task": task, "metric": f"{metric} x 100", "value": f"{value:.2f}"})
            if task.startswith("avg"):
                continue  # averages go in the table only: the Hub's model-index wants one data set per result
            similarity = metric != "accuracy"
            eval_results.append(
                EvalResult(
                    task_type="sentence-similarity" if similarity else "text-classification",
                    dataset_type=_result_type(task),
                    dataset_name=_DATASET_NAMES.get(task, _DATASET_NAMES.get(task.split("_")[0], task)),
                    dataset_split="validation" if "dev" in task else "test",
                    metric_type=f"{metric}_cosine" if similarity else "accuracy",
                    metric_value=round(value / 100, 4),  # sentence-transformers' scale: 0 to 1
                )
            )
    stacks = sentence_transformers_unsupported_reason(model) is None and bool(model.sentence_transformers_stacks())
    card_data = ModelCardData(
        library_name="peft" if info.adapter else ("sentence-transformers" if stacks else "transformers"),
        pipeline_tag="sentence-similarity",
        tags=list(
            dict.fromkeys(
                ["sentence-transformers", "sentence-similarity", "feature-extraction", "contrastive-learning"]
                + [info.method.lower().replace(" ", "-"), "contrastive_hf", *info.tags]
            )
        ),
        base_model=info.base_model,
        datasets=info.datasets or None,
        license=info.license,
        language=info.language,
        model_name=info.model_name,
        eval_results=eval_results or None,
    )
    hyperparameters = ", ".join(f"{key} {value}" for key, value in info.hyperparameters.items())
    described = _describe_model(model)
    repo_id = info.repo_id or info.model_name
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
        pooler_type=config.pooler_type,
        pooler_description=get_pooler(config.pooler_type).description,
        views_description=f"`{info.augmentation}`"
        + (f": {info.augmentation_description}" if info.augmentation_description else ""),
        objective_description=info.objective or described["objective_description"],
        temperature=config.temperature,
        negatives_description=_describe_negatives(info),
        sentence_transformers=stacks,
        dual_encoder=getattr(config, "model_type", "") == "dual_encoder",
        tei_caveats="; ".join(text_embeddings_inference_caveats(model)) if stacks else "",
        training_data=", ".join(info.datasets) if info.datasets else info.training_data,
        hyperparameters=hyperparameters,
        hardware=info.hardware or _hardware(info.world_size, info.zero_stage),
        frameworks=info.frameworks or _framework_versions(),
        eval_rows=eval_rows,
        repo_id=repo_id,
        embedding_size=config.embedding_size,
        adapter=info.adapter,
        adapter_base=info.adapter_base,
        adapter_base_local=bool(info.adapter) and hub_id_or_none(info.adapter_base) is None,
        adapter_class=info.adapter_class or type(model).__name__,
        base_model_arguments=", ".join(f"{name}={value!r}" for name, value in base_model_settings(config).items()),
        merged_folder=merged_folder(info.model_name),
        # the checkpoint the loading lines name: with an adapter, the merged model (the adapter folder loads with
        # peft only), as the run saved it beside the adapter, or under the Hub id it would have there
        checkpoint_id=merged_folder(repo_id) if info.adapter else repo_id,
        matryoshka_description=_describe_matryoshka(config),
        limitations="Scores were measured on the evaluation data named above only. The model inherits the biases "
        "of its training text and is not meant for languages it was not trained on.",
        **{key: value for key, value in described.items() if key != "objective_description"},
    )


# What Text Embeddings Inference computes from sentence-transformers modules (read from its source): Pooling with
# cls or mean (the poolers registered as served_by_text_embeddings_inference, `models/poolers.py`), Dense layers with
# tanh or no activation; it reads neither include_prompt nor truncate_dim.
TEI_ACTIVATIONS = (None, "tanh")


TEI_POOLERS = POOLERS.names_view(lambda pooler: pooler.served_by_text_embeddings_inference)


def text_embeddings_inference_caveats(model) -> list[str]:
    """Why Text Embeddings Inference would serve other embeddings than ``model``'s, one reason each; [] when it
    serves the checkpoint as trained."""
    stacks = model.sentence_transformers_stacks()
    if len(stacks) > 1:
        return ["it serves one encoder, and this checkpoint routes queries and documents to two"]
    reasons = []
    for stack in stacks.values():
        if not get_pooler(stack.pooler_type).served_by_text_embeddings_inference:
            reasons.append(f"it pools with cls or mean only, not {stack.pooler_type}")
        activations = sorted({str(activation) for _, activation in stack.dense if activation not in TEI_ACTIVATIONS})
        if activations:
            reasons.append(f"it runs Dense layers with tanh or no activation only, not {', '.join(activations)}")
        if not stack.include_prompt:
            reasons.append("it pools the prompt's tokens too (it ignores include_prompt=False)")
    if getattr(model.config, "truncate_dim", None):
        reasons.append(f"it returns every dimension (it ignores truncate_dim={model.config.truncate_dim})")
    return reasons


def _retrieval_result(task: str, metric: str, value: float, similarity: str) -> EvalResult:
    """A retrieval figure as sentence-transformers' information-retrieval evaluator names it: recall@k (DPR's top-k
    accuracy, a relevant passage among the first k) as ``<similarity>_accuracy@k``, the mean reciprocal rank over
    every rank as ``<similarity>_mrr``."""
    name, _, dim = metric.partition("_dim")
    metric_type = f"{similarity}_accuracy@{name.split('@')[1]}" if name.startswith("recall@") else f"{similarity}_mrr"
    return EvalResult(
        task_type="information-retrieval",
        dataset_type=f"{task}-{dim}" if dim else task,
        dataset_name="held-out question-passage pairs" if task == "retrieval" else task,
        dataset_split="validation",
        metric_type=metric_type,
        metric_value=round(float(value), 4),
    )


def _glue_results(task: str, metrics: dict) -> tuple[list[dict], list[EvalResult]]:
    """The card's table rows and model-index entries of one GLUE entry: ``glue_<config>[_<split>]`` -> figures x 100
    and ``"dataset"`` (the Hub id it was loaded from; absent for local files, which get a plain task name)."""
    if task == "avg_glue":  # the table only: the model-index wants one data set per result
        return [{"task": task, "metric": "score x 100", "value": f"{metrics['score']:.2f}"}], []
    config, _, split = task[len("glue_") :].partition("_")
    hub = metrics.get("dataset")
    rows, results = [], []
    for metric, value in metrics.items():
        if metric not in _GLUE_METRIC_TYPES:
            continue
        rows.append({"task": task, "metric": f"{metric} x 100", "value": f"{value:.2f}"})
        results.append(
            EvalResult(
                task_type="text-classification",
                dataset_type=hub or f"glue-{config}",
                dataset_name=f"GLUE {config.upper()}" + ("" if hub else " (local files)"),
                dataset_config=config,
                dataset_split=f"validation_{split}" if split else "validation",
                metric_type=_GLUE_METRIC_TYPES[metric],
                metric_value=round(value / 100, 4),  # the card's scale: 0 to 1
            )
        )
    return rows, results


def _result_type(task: str) -> str:
    """A task's name in the card's metadata: sentence-transformers' ``sts-dev``, and ``sts-dev-256`` for the first 256
    dimensions of a Matryoshka model (``stsb_dev_dim256``), as its Matryoshka cards name them."""
    base, _, dim = task.partition("_dim")
    return f"{_RESULT_TYPES.get(base, base)}-{dim}" if dim else _RESULT_TYPES.get(task, task)


def _describe_matryoshka(config) -> str | None:
    """The card's line on Matryoshka training, or None: the dimensions and weights, and the default truncation."""
    dims = getattr(config, "matryoshka_dims", None)
    if not dims:
        return None
    weights = getattr(config, "matryoshka_weights", None) or [1.0] * len(dims)
    sizes = ", ".join(f"{dim} (weight {weight:g})" for dim, weight in zip(dims, weights, strict=True))
    text = f"loss summed over the first {sizes} dimensions: `encode(..., truncate_dim=m)` for any of these m"
    if getattr(config, "truncate_dim", None):
        text += f"; embeddings are truncated to {config.truncate_dim} by default"
    return text


def _describe_negatives(info: ModelCardInfo) -> str:
    if info.world_size == 1:
        parts = ["in-batch"]
    elif info.negatives_gathered:
        parts = [f"in-batch, gathered across the {info.world_size} processes (the global batch)"]
    else:
        parts = ["in-batch, each process's own batch"]
    if info.hard_negatives:
        count = int(info.hard_negatives)
        parts.append("a hard negative per anchor" if count == 1 else f"{count} hard negatives per anchor")
    if info.prebatch_size:
        parts.append(f"pre-batch negatives (the keys of the previous {info.prebatch_size} batch(es))")
    return "; ".join(parts)


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
