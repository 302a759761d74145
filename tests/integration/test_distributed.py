"""Cross-device negatives are exact: 2 CPU processes (gloo) on a split batch = 1 process on the whole batch, also
when the processes hold different numbers of sentences (a ragged last batch, uneven streamed shards), down to one;
and so under torch's FSDP2 (`fully_shard`: each process holds a shard of every weight), whose gathered full state
dict after an optimizer step is the whole batch's step.

accelerate (1.15) runs FSDP only on accelerator devices: on CPU processes it reports no distributed setup, so
transformers refuses ``--fsdp`` ("only works in distributed training"), and with ``--use_cpu`` it trains with DDP and
leaves the FSDP settings unused. The sharded path is therefore tested here with torch's FSDP2 on gloo, the model and
loss as the Trainer runs them."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from transformers import Qwen2Config

from contrastive_hf import ContrastiveConfig, ContrastiveForPreTraining, ContrastiveModel
from contrastive_hf.models.prebatch_queue import PrebatchQueue
from contrastive_hf.recipes.sg_bert import SelfGuidedModel
from contrastive_hf.training.grad_cache import grad_cache_step

from conftest import free_port, tiny_bert_config

# its module-scoped launches run once, on one pytest-xdist worker (make test: --dist loadgroup)
pytestmark = pytest.mark.xdist_group("distributed")

WORLD = 2
VOCAB = 60
NT_XENT = {"contrastive_loss": "nt_xent", "num_views": 2}
INFO_NCE_HARD = {"contrastive_loss": "info_nce", "num_views": 3, "hard_negative_weight": 0.3}
GRAD_CACHE = {"contrastive_loss": "info_nce", "num_views": 3, "grad_cache": True}  # chunks of 2 on each process
# A decoder (a tiny Qwen2) pooled at its last token, with hard negatives
DECODER = {"contrastive_loss": "info_nce", "num_views": 3, "decoder": True, "pooler_type": "last_token"}
# SG-BERT's objectives: base and opt2 through the library's losses, opt1 and opt3 on the same gathered global batch
SG_BERT = {loss: {"sg_bert": loss} for loss in ("base", "opt1", "opt2", "opt3")}
# name: (settings, sentences on process 0 and on process 1, with sentence ids holding duplicates across processes)
CASES = {
    "nt_xent": (NT_XENT, (3, 3), False),
    "info_nce_hard": (INFO_NCE_HARD, (3, 3), False),
    "grad_cache_duplicates": (GRAD_CACHE, (3, 3), True),
    "uneven_nt_xent_duplicates": (NT_XENT, (5, 3), True),
    "uneven_info_nce_hard_duplicates": (INFO_NCE_HARD, (5, 3), True),
    "uneven_grad_cache_duplicates": (GRAD_CACHE, (3, 5), True),
    "one_row_nt_xent_duplicates": (NT_XENT, (1, 5), True),
    "one_row_info_nce_hard_duplicates": (INFO_NCE_HARD, (5, 1), True),
    "uneven_decoder_last_token_duplicates": (DECODER, (3, 5), True),
    **{f"uneven_sg_bert_{loss}": (settings, (5, 3), False) for loss, settings in SG_BERT.items()},
}


def sentence_ids(sizes: tuple[int, int], num_views: int) -> torch.Tensor:
    """Ids of the global batch's views, with copies across processes: the first sentence of process 1 has the
    positive of the first of process 0 as its positive, and the last sentence's query repeats the first query."""
    ids = torch.arange(sum(sizes) * num_views).view(sum(sizes), num_views)
    ids[sizes[0], 1] = ids[0, 1]
    ids[-1, 0] = ids[0, 0]
    return ids


def build(name: str):
    """The model of a case (dropout off) and its global batch of inputs."""
    settings, sizes, with_ids = CASES[name]
    torch.manual_seed(0)
    encoder = tiny_bert_config(vocab_size=VOCAB, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    generator = torch.Generator().manual_seed(1)
    if "sg_bert" in settings:
        tuned = ContrastiveModel(ContrastiveConfig(encoder=encoder, pooler_type="cls", projection_type="none"))
        model = SelfGuidedModel(tuned, loss=settings["sg_bert"], temperature=0.05, projection_hidden_size=16)
        inputs = {
            "input_ids": torch.randint(5, VOCAB, (sum(sizes), 7), generator=generator),
            "view_layers": torch.randint(0, 3, (sum(sizes),), generator=generator),
        }
        return model, inputs
    if settings.get("decoder"):
        encoder = Qwen2Config(
            vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=32,
        )  # fmt: skip
        settings = {**settings, "projection_type": "none"}
    settings = {key: value for key, value in settings.items() if key not in ("num_views", "grad_cache", "decoder")}
    model = ContrastiveForPreTraining(ContrastiveConfig(encoder=encoder, mlm_weight=0.0, **settings))
    num_views = CASES[name][0]["num_views"]
    inputs = {"input_ids": torch.randint(5, VOCAB, (sum(sizes), num_views, 7), generator=generator)}
    if with_ids:
        inputs["sentence_ids"] = sentence_ids(sizes, num_views)
    return model, inputs


QUEUED_SIZES = ((5, 3), (1, 5))


def queued_batch(sizes: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys ``(M, 4)`` and sentence ids ``(M,)`` of a global batch of ``sum(sizes)`` rows."""
    generator = torch.Generator().manual_seed(sum(sizes))
    return torch.randn(sum(sizes), 4, generator=generator), torch.randint(0, 1000, (sum(sizes),), generator=generator)


def gradients(model) -> dict[str, torch.Tensor]:
    return {name: full(p.grad).detach().clone() for name, p in model.named_parameters() if p.grad is not None}


def full(tensor: torch.Tensor) -> torch.Tensor:
    """A tensor whole: an FSDP2 shard (a DTensor) gathered from every process, or the tensor itself."""
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor


# The cases also run under FSDP2, every encoder layer and the model sharded across the processes.
FSDP_CASES = (
    "nt_xent",
    "uneven_info_nce_hard_duplicates",
    "uneven_grad_cache_duplicates",
    "uneven_decoder_last_token_duplicates",
)
LEARNING_RATE = 0.5


def sharded(model):
    """``model`` under FSDP2 (`torch.distributed.fsdp.fully_shard`): each layer of its encoder (the modules
    transformers names as not to be split, BertLayer or Qwen2DecoderLayer, as accelerate's auto-wrap takes them), then
    the whole."""
    from torch.distributed.fsdp import fully_shard

    encoder = model.contrastive.encoder
    layers = [module for module in encoder.modules() if type(module).__name__ in encoder._no_split_modules]
    assert layers, encoder._no_split_modules
    for layer in layers:
        fully_shard(layer)
    return fully_shard(model)


def local_step(model, inputs: dict, name: str, rank: int) -> torch.Tensor:
    """Forward and backward of case ``name`` on this process's rows of its global batch, negatives gathered across
    the processes (as ContrastiveTrainer sets it with several): this process's loss."""
    settings, sizes, _ = CASES[name]
    rows = slice(sum(sizes[:rank]), sum(sizes[: rank + 1]))
    local = {key: value[rows] for key, value in inputs.items()}
    model.loss_fn.gather_across_devices = True
    if settings.get("grad_cache"):
        return grad_cache_step(model, model, local, 2).loss
    loss = model(**local).loss
    loss.backward()
    return loss


def fsdp_step(name: str, rank: int) -> dict:
    """One SGD step of case ``name`` under FSDP2 on this process's rows: the loss (mean over processes), the full
    gradients (FSDP2 averages them over the processes, as DDP does) and the full state dict after the step."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    model, inputs = build(name)
    model = sharded(model)
    loss = local_step(model, inputs, name, rank)
    grads = gradients(model)
    torch.optim.SGD(model.parameters(), lr=LEARNING_RATE).step()
    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
    mean_loss = loss.detach().clone()
    dist.all_reduce(mean_loss)
    return {"loss": mean_loss / WORLD, "grads": grads, "state": {key: value.clone() for key, value in state.items()}}


def worker(rank: int, port: int, output: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    torch.set_num_threads(1)
    results = {}
    for name in CASES:
        model, inputs = build(name)
        loss = local_step(model, inputs, name, rank)
        grads = gradients(model)
        for grad in grads.values():  # what DDP does: average parameter gradients over ranks
            dist.all_reduce(grad)
            grad /= WORLD
        mean_loss = loss.detach().clone()  # what the Trainer logs: the mean over ranks
        dist.all_reduce(mean_loss)
        results[name] = {"loss": mean_loss / WORLD, "grads": grads}
    for name in FSDP_CASES:
        results[f"fsdp2_{name}"] = fsdp_step(name, rank)
    queue = PrebatchQueue(num_batches=2)  # keys of 5 + 3 rows, then 1 + 5, in rank order
    for sizes in QUEUED_SIZES:
        keys, ids = queued_batch(sizes)
        rows = slice(sum(sizes[:rank]), sum(sizes[: rank + 1]))
        queue.push(keys[rows], ids[rows])
    results["queue"] = {"keys": queue.negatives(), "ids": queue.negative_ids()}
    if rank == 0:
        torch.save(results, output)
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def two_process_results(tmp_path_factory) -> dict:
    """What `worker` computed on 2 gloo processes (one spawn for every test here: starting them is slow)."""
    output = str(tmp_path_factory.mktemp("distributed") / "distributed.pt")
    mp.spawn(worker, args=(free_port(), output), nprocs=WORLD, join=True)
    return torch.load(output)


def test_two_processes_give_the_loss_and_gradients_of_the_whole_batch(two_process_results):
    """Every case of CASES, and the pre-batch queue filled by processes holding different numbers of keys."""
    distributed = two_process_results
    keys, ids = zip(*(queued_batch(sizes) for sizes in QUEUED_SIZES), strict=True)
    torch.testing.assert_close(distributed["queue"]["keys"], torch.cat(keys))  # the whole batches, in rank order
    assert torch.equal(distributed["queue"]["ids"], torch.cat(ids))
    for name in CASES:
        model, inputs = build(name)
        loss = model(**inputs).loss
        loss.backward()
        reference = gradients(model)
        message = f"case {name}"
        torch.testing.assert_close(distributed[name]["loss"], loss.detach(), atol=1e-5, rtol=1e-5, msg=message)
        assert distributed[name]["grads"].keys() == reference.keys(), message
        for parameter, grad in reference.items():
            torch.testing.assert_close(
                distributed[name]["grads"][parameter], grad, atol=1e-5, rtol=1e-4, msg=f"{message}, {parameter}"
            )


@pytest.mark.parametrize("name", FSDP_CASES)
def test_under_fsdp2_two_processes_give_the_whole_batch_s_loss_gradients_and_step(name, two_process_results):
    """Sharded weights, gathered negatives: FSDP2 on 2 processes gives the whole batch's loss and gradients on one,
    and its full state dict after an SGD step is the one-process step's, whole (every weight, unsharded)."""
    sharded_run = two_process_results[f"fsdp2_{name}"]
    model, inputs = build(name)
    loss = model(**inputs).loss
    loss.backward()
    reference = gradients(model)
    torch.optim.SGD(model.parameters(), lr=LEARNING_RATE).step()
    torch.testing.assert_close(sharded_run["loss"], loss.detach(), atol=1e-5, rtol=1e-5)
    assert sharded_run["grads"].keys() == reference.keys()
    for parameter, grad in reference.items():
        torch.testing.assert_close(sharded_run["grads"][parameter], grad, atol=1e-5, rtol=1e-4, msg=parameter)
    stepped = model.state_dict()
    assert sharded_run["state"].keys() == stepped.keys()
    for key, value in stepped.items():
        assert not hasattr(sharded_run["state"][key], "full_tensor"), key  # whole, not a shard
        torch.testing.assert_close(sharded_run["state"][key], value, atol=1e-5, rtol=1e-4, msg=key)


def test_without_gathering_each_process_only_sees_its_own_batch(tmp_path):
    """The control: the same split without the gather gives a different (smaller-batch) loss."""
    model, inputs = build("nt_xent")
    half = model(input_ids=inputs["input_ids"][:3]).loss
    whole = model(**inputs).loss
    assert not torch.allclose(half, whole)
