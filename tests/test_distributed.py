"""Cross-device negatives are exact: 2 CPU processes (gloo) on a split batch = 1 process on the whole batch."""

from __future__ import annotations

import socket
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from contrastive_hf import ContrastiveConfig, ContrastiveForPreTraining
from contrastive_hf.training.grad_cache import DeepSpeedChunkBackward, grad_cache_step

from conftest import tiny_bert_config

WORLD = 2
BATCH = 6  # global batch, split 3 + 3
VOCAB = 60
SETTINGS = {
    "nt_xent": {"contrastive_loss": "nt_xent", "num_views": 2},
    "info_nce_hard": {"contrastive_loss": "info_nce", "num_views": 3, "hard_negative_weight": 0.3},
    # GradCache in chunks of 2 on each process, and a sentence of rank 0 repeated on rank 1 (never a negative)
    "grad_cache_duplicates": {"contrastive_loss": "info_nce", "num_views": 3, "grad_cache": True},
}
# sentence ids of the global batch: row 4 (on rank 1) repeats the positive of row 0 (on rank 0)
SENTENCE_IDS = torch.arange(BATCH * 3).view(BATCH, 3)
SENTENCE_IDS[4, 1] = SENTENCE_IDS[0, 1]


def build(name: str) -> tuple[ContrastiveForPreTraining, torch.Tensor]:
    settings = dict(SETTINGS[name])
    num_views = settings.pop("num_views")
    settings.pop("grad_cache", None)
    torch.manual_seed(0)
    encoder = tiny_bert_config(vocab_size=VOCAB, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = ContrastiveForPreTraining(ContrastiveConfig(encoder=encoder, mlm_weight=0.0, **settings))
    generator = torch.Generator().manual_seed(1)
    views = torch.randint(5, VOCAB, (BATCH, num_views, 7), generator=generator)
    return model, views


def gradients(model) -> dict[str, torch.Tensor]:
    return {name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None}


def deepspeed_batch_checks(rank: int) -> dict:
    """What GradCache's DeepSpeed backward says of per-process batches of 4 and 4, then 4 and 5, under each stage:
    None where it takes them, else its error message."""
    results = {}
    for stage in (1, 2, 3):
        accelerator = SimpleNamespace(state=SimpleNamespace(deepspeed_plugin=SimpleNamespace(zero_stage=stage)))
        backward = DeepSpeedChunkBackward(accelerator)
        for sizes in ((4, 4), (4, 5)):
            try:
                backward.check_batch_sizes(sizes[rank], torch.device("cpu"))
                results[stage, sizes] = None
            except ValueError as error:
                results[stage, sizes] = str(error)
    return results


def worker(rank: int, port: int, output: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    torch.set_num_threads(1)
    results = {}
    for name in SETTINGS:
        model, views = build(name)
        rows = slice(rank * BATCH // WORLD, (rank + 1) * BATCH // WORLD)
        if SETTINGS[name].get("grad_cache"):
            inputs = {"input_ids": views[rows], "sentence_ids": SENTENCE_IDS[rows]}
            kwargs = {"negatives_kwargs": {"gather_across_devices": True}}
            loss = grad_cache_step(model, model, inputs, 2, **kwargs).loss
        else:
            loss = model(input_ids=views[rows], gather_across_devices=True).loss
            loss.backward()
        grads = gradients(model)
        for grad in grads.values():  # what DDP does: average parameter gradients over ranks
            dist.all_reduce(grad)
            grad /= WORLD
        mean_loss = loss.detach().clone()
        dist.all_reduce(mean_loss)
        results[name] = {"loss": mean_loss / WORLD, "grads": grads}
    checks = deepspeed_batch_checks(rank)
    gathered = [None] * WORLD
    dist.all_gather_object(gathered, checks)
    for index, rank_checks in enumerate(gathered):
        results[f"deepspeed_batch_checks_{index}"] = rank_checks
    if rank == 0:
        torch.save(results, output)
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def two_process_results(tmp_path_factory) -> dict:
    """What `worker` computed on 2 gloo processes (one spawn for every test here: starting them is slow)."""
    output = str(tmp_path_factory.mktemp("distributed") / "distributed.pt")
    mp.spawn(worker, args=(free_port(), output), nprocs=WORLD, join=True)
    return torch.load(output)


def test_two_processes_give_the_loss_and_gradients_of_the_whole_batch(two_process_results):
    distributed = two_process_results
    for name in SETTINGS:
        model, views = build(name)
        sentence_ids = SENTENCE_IDS if SETTINGS[name].get("grad_cache") else None
        loss = model(input_ids=views, sentence_ids=sentence_ids).loss
        loss.backward()
        reference = gradients(model)
        torch.testing.assert_close(distributed[name]["loss"], loss.detach(), atol=1e-5, rtol=1e-5)
        assert distributed[name]["grads"].keys() == reference.keys()
        for parameter, grad in reference.items():
            torch.testing.assert_close(distributed[name]["grads"][parameter], grad, atol=1e-5, rtol=1e-4)


def test_without_gathering_each_process_only_sees_its_own_batch(tmp_path):
    """The control: the same split without the gather gives a different (smaller-batch) loss."""
    model, views = build("nt_xent")
    half = model(input_ids=views[: BATCH // 2]).loss
    whole = model(input_ids=views).loss
    assert not torch.allclose(half, whole)


def test_grad_cache_under_zero_2_and_3_refuses_uneven_batches_on_every_process_instead_of_hanging(
    two_process_results,
):
    """ZeRO-2 reduces in every chunk's backward and ZeRO-3 gathers in every forward: processes running different
    chunks would wait on each other forever. Every process raises, naming the sizes; ZeRO-1 (which reduces once, at
    the step) takes them."""
    for rank in range(WORLD):
        results = two_process_results[f"deepspeed_batch_checks_{rank}"]
        assert all(results[stage, (4, 4)] is None for stage in (1, 2, 3))
        assert results[1, (4, 5)] is None
        for stage in (2, 3):
            assert f"ZeRO-{stage} needs the same batch size on every process" in results[stage, (4, 5)]
            assert "[4, 5]" in results[stage, (4, 5)]
