"""Two gloo processes: TrainStep under DDP (gradient sync and agreement between ranks)."""
import json
import os
import sys

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from trainables.loop import NO_FORWARD_BUFFER_SYNC
from trainables.training.step import DivergedError, TrainStep


def _run_body(rank: int, body) -> dict:
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2)),
                                                **NO_FORWARD_BUFFER_SYNC)
    return body(rank, model)


def _rank_main(rank: int, world: int, init_file: str, out_dir: str, body) -> None:
    """One rank: a process group, the same small DDP model everywhere, body's result as JSON.

    A rank that succeeded ends with os._exit, as Ray's workers do: the DDP model keeps the
    gloo process group (and its threads) alive after destroy_process_group, and on Python
    3.11 a gloo thread that releases a collective's tensor while the interpreter finalizes
    must take the GIL, is made to exit instead, and aborts the process ("terminate called
    without an active exception"), about one run in eight before this."""
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        result = _run_body(rank, body)
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
            json.dump(result, f)
    finally:
        dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _spawn(body, tmp_path) -> list[dict]:
    mp.spawn(_rank_main, args=(2, str(tmp_path / "init"), str(tmp_path), body), nprocs=2, join=True)
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]


def _accumulate(rank: int, model) -> dict:
    entered = []
    real_no_sync = model.no_sync

    def spy():
        entered.append(1)
        return real_no_sync()
    model.no_sync = spy
    step = TrainStep(model, torch.optim.SGD(model.parameters(), lr=0.0),
                     loss_fn=nn.functional.cross_entropy, device=torch.device("cpu"))
    g = torch.Generator().manual_seed(100 + rank)
    step([(torch.randn(3, 4, generator=g), torch.randint(0, 2, (3,), generator=g)) for _ in range(3)])
    return {"no_sync": len(entered), "grads": [p.grad.flatten().tolist() for p in model.parameters()]}


def test_no_sync_on_all_but_last_micro_step(tmp_path):
    r0, r1 = _spawn(_accumulate, tmp_path)
    assert r0["no_sync"] == 2 and r1["no_sync"] == 2
    # The last micro-step's all-reduce averaged the accumulated gradients: ranks agree.
    for a, b in zip(r0["grads"], r1["grads"]):
        assert torch.allclose(torch.tensor(a), torch.tensor(b), atol=1e-6)


def _nan_on_rank_zero(rank: int, model) -> dict:
    def loss(logits, y):  # rank 0 sees a non-finite loss, rank 1 a normal one
        base = nn.functional.cross_entropy(logits, y)
        return base * float("nan") if rank == 0 else base
    step = TrainStep(model, torch.optim.SGD(model.parameters(), lr=0.5), loss_fn=loss,
                     device=torch.device("cpu"), max_nonfinite_steps=2)
    g = torch.Generator().manual_seed(rank)
    batch = [(torch.randn(3, 4, generator=g), torch.randint(0, 2, (3,), generator=g))]
    first = step(batch)
    try:
        step(batch)
        raised = False
    except DivergedError:
        raised = True
    return {"applied": first.applied, "raised": raised,
            "weights": [p.detach().flatten().tolist() for p in model.parameters()]}


def test_a_nonfinite_loss_on_one_rank_skips_the_step_on_every_rank(tmp_path):
    r0, r1 = _spawn(_nan_on_rank_zero, tmp_path)
    assert r0["applied"] is False and r1["applied"] is False
    assert r0["raised"] and r1["raised"]          # both give up together: no rank left waiting
    assert r0["weights"] == r1["weights"]


def _oom_on_rank_one(rank: int, model) -> dict:
    def loss(logits, y):  # rank 1 runs out of memory before its backward, rank 0 does not
        if rank == 1:
            raise torch.OutOfMemoryError("injected: out of memory on rank 1")
        return nn.functional.cross_entropy(logits, y)
    step = TrainStep(model, torch.optim.SGD(model.parameters(), lr=0.5), loss_fn=loss,
                     device=torch.device("cpu"))
    g = torch.Generator().manual_seed(rank)
    group = [(torch.randn(3, 4, generator=g), torch.randint(0, 2, (3,), generator=g)) for _ in range(2)]
    try:
        step(group)
        return {"raised": None}
    except torch.OutOfMemoryError as e:
        return {"raised": str(e)}


@pytest.mark.timeout(60)
def test_out_of_memory_on_one_rank_ends_the_step_on_every_rank(tmp_path):
    r0, r1 = _spawn(_oom_on_rank_one, tmp_path)   # a rank left waiting in a collective would hang here
    assert r1["raised"] == "injected: out of memory on rank 1"
    assert r0["raised"] and "other rank" in r0["raised"]


def _fused_oom_on_rank_one_at_step_two(rank: int, model) -> dict:
    calls = []

    def loss(logits, y):  # rank 1 runs out of memory from its second step on
        calls.append(1)
        if rank == 1 and len(calls) >= 2:
            raise torch.OutOfMemoryError("injected: out of memory on rank 1")
        return nn.functional.cross_entropy(logits, y)
    step = TrainStep(model, torch.optim.SGD(model.parameters(), lr=0.5, fused=True), loss_fn=loss,
                     device=torch.device("cpu"), sync_every=3)
    g = torch.Generator().manual_seed(rank)
    batch = [(torch.randn(3, 4, generator=g), torch.randint(0, 2, (3,), generator=g))]
    out = {"raised_at": None, "raised": None}
    weights = []
    for i in range(1, 5):
        try:
            step(batch)
        except torch.OutOfMemoryError as e:
            out.update(raised_at=i, raised=str(e))
            break
        weights.append([p.detach().flatten().tolist() for p in model.parameters()])
    out["weights"] = weights
    return out


@pytest.mark.timeout(60)
def test_fused_step_out_of_memory_on_one_rank_ends_both_at_the_sync(tmp_path):
    r0, r1 = _spawn(_fused_oom_on_rank_one_at_step_two, tmp_path)
    assert r0["raised_at"] == r1["raised_at"] == 3          # the sync point, on every rank
    assert r1["raised"] == "injected: out of memory on rank 1"
    assert r0["raised"] == "1 other rank(s) ran out of memory"           # ranks, not rank-steps
    assert r0["weights"] == r1["weights"] and len(r0["weights"]) == 2
    assert r0["weights"][0] == r0["weights"][1]             # step 2 was skipped on both ranks


def _fused_nan_on_rank_zero(rank: int, model) -> dict:
    def loss(logits, y):
        base = nn.functional.cross_entropy(logits, y)
        return base * float("nan") if rank == 0 else base
    step = TrainStep(model, torch.optim.SGD(model.parameters(), lr=0.5, fused=True), loss_fn=loss,
                     device=torch.device("cpu"), max_nonfinite_steps=2, sync_every=4)
    before = [p.detach().flatten().tolist() for p in model.parameters()]
    g = torch.Generator().manual_seed(rank)
    batch = [(torch.randn(3, 4, generator=g), torch.randint(0, 2, (3,), generator=g))]
    raised_at = None
    for i in range(1, 6):
        try:
            step(batch)
        except DivergedError:
            raised_at = i
            break
    return {"raised_at": raised_at, "unchanged": before == [p.detach().flatten().tolist() for p in model.parameters()]}


def test_fused_step_nonfinite_on_one_rank_skips_everywhere_and_both_give_up_at_the_sync(tmp_path):
    r0, r1 = _spawn(_fused_nan_on_rank_zero, tmp_path)
    assert r0 == r1 == {"raised_at": 4, "unchanged": True}
