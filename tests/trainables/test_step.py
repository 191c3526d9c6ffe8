import math

import pytest
import torch
from torch import nn

from trainables.config import ConfigError
from trainables.training.step import DivergedError, TrainStep


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))


def ce(logits, y):
    return nn.functional.cross_entropy(logits, y)


def make_step(model, **kw):
    opt = torch.optim.SGD(model.parameters(), lr=kw.pop("lr", 0.0))
    return TrainStep(model, opt, loss_fn=ce, device=torch.device("cpu"), **kw)


def test_accumulation_equals_one_big_batch_with_uneven_last_micro_batch():
    torch.manual_seed(1)
    x, y = torch.randn(10, 6, dtype=torch.float32), torch.randint(0, 3, (10,))
    ref = mlp()
    ce(ref(x), y).backward()
    model = mlp()
    step = make_step(model)
    r = step([(x[:4], y[:4]), (x[4:8], y[4:8]), (x[8:], y[8:])])  # 4 + 4 + 2 samples
    assert r.samples == 10 and r.applied
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=0)
    assert math.isclose(r.loss, float(ce(ref(x), y)), abs_tol=1e-5)


def test_short_final_group_counts_each_sample_once():
    torch.manual_seed(2)
    x, y = torch.randn(6, 6), torch.randint(0, 3, (6,))
    ref = mlp()
    ce(ref(x), y).backward()
    model = mlp()
    make_step(model)([(x[:5], y[:5]), (x[5:], y[5:])])
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=0)


def test_fp16_refused_on_cpu():
    with pytest.raises(ConfigError, match="fp16"):
        make_step(mlp(), precision="fp16")


def test_bf16_step_on_cpu_updates_weights():
    model = mlp()
    before = [p.detach().clone() for p in model.parameters()]
    x, y = torch.randn(8, 6), torch.randint(0, 3, (8,))
    r = make_step(model, precision="bf16", lr=0.1)([(x, y)])
    assert r.applied and math.isfinite(r.loss) and r.grad_norm > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_grad_scaler_skips_a_step_with_inf_gradients():
    model = mlp()
    w = model[0].weight
    w.register_hook(lambda g: torch.full_like(g, float("inf")))
    before = [p.detach().clone() for p in model.parameters()]
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    step = make_step(model, lr=0.1, scaler=scaler)
    r = step([(torch.randn(4, 6), torch.randint(0, 3, (4,)))])
    assert not r.applied
    assert scaler.get_scale() < 1024.0
    for a, b in zip(before, model.parameters()):
        assert torch.equal(a, b)


def test_grad_clipping_bounds_the_update_and_reports_the_norm():
    model = mlp()
    x, y = torch.randn(8, 6) * 100, torch.randint(0, 3, (8,))
    r = make_step(model, grad_clip=0.01)([(x, y)])
    total = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])
    assert r.grad_norm > 0.01 and float(total) <= 0.01 + 1e-6


def test_nonfinite_losses_skip_then_raise():
    model = mlp()
    step = TrainStep(model, torch.optim.SGD(model.parameters(), lr=0.1),
                     loss_fn=lambda logits, y: ce(logits, y) * float("nan"), device=torch.device("cpu"),
                     max_nonfinite_steps=3)
    batch = [(torch.randn(4, 6), torch.randint(0, 3, (4,)))]
    before = [p.detach().clone() for p in model.parameters()]
    assert not step(batch).applied and not step(batch).applied
    for a, b in zip(before, model.parameters()):
        assert torch.equal(a, b)
    with pytest.raises(DivergedError):
        step(batch)
    assert step.nonfinite_total == 3


def fused_step(model, loss_fn=ce, **kw):
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, fused=True)
    return TrainStep(model, opt, loss_fn=loss_fn, device=torch.device("cpu"), **kw)


def test_the_fused_step_reads_the_host_once_per_sync_every_steps(host_reads):
    torch.manual_seed(3)
    step = fused_step(mlp(), sync_every=5, grad_clip=1.0)
    batches = [[(torch.randn(4, 6), torch.randint(0, 3, (4,))) for _ in range(2)] for _ in range(20)]
    host_reads.clear()
    for group in batches:
        step(group)
    assert len(host_reads) == 20 // 5
    t = step.epoch_totals()
    assert len(host_reads) == 20 // 5 + 1
    assert t["samples"] == 160 and t["counted"] == 160 and t["applied"] == 20 and t["norm_sum"] > 0


def test_the_fused_step_matches_the_host_step():
    torch.manual_seed(4)
    batches = [[(torch.randn(5, 6), torch.randint(0, 3, (5,)))] for _ in range(6)]
    a, b = mlp(), mlp()
    host = TrainStep(a, torch.optim.SGD(a.parameters(), lr=0.1, momentum=0.9), loss_fn=ce, device=torch.device("cpu"))
    dev = fused_step(b, sync_every=4)
    for g in batches:
        host(g)
        dev(g)
    ta, tb = host.epoch_totals(), dev.epoch_totals()
    for k in ta:
        assert math.isclose(ta[k], tb[k], rel_tol=1e-5), k
    for p, q in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(p, q, atol=1e-6, rtol=1e-5)


def test_nonfinite_steps_are_skipped_on_the_device_and_counted_at_the_sync():
    model = mlp()
    bad = {"on": False}

    def loss(logits, y):
        return ce(logits, y) * (float("nan") if bad["on"] else 1.0)
    step = fused_step(model, loss_fn=loss, sync_every=5, max_nonfinite_steps=3)
    batch = [(torch.randn(4, 6), torch.randint(0, 3, (4,)))]
    step(batch)
    before = [p.detach().clone() for p in model.parameters()]
    momentum = [step.optimizer.state[p]["momentum_buffer"].clone() for p in model.parameters()]
    bad["on"] = True
    step(batch), step(batch)
    r = step(batch)                                  # three bad steps: no host read yet, no raise
    assert not r.applied
    for a, b, m in zip(before, model.parameters(), momentum):
        assert torch.equal(a, b) and torch.equal(m, step.optimizer.state[b]["momentum_buffer"])
    bad["on"] = False
    with pytest.raises(DivergedError, match="3 consecutive"):
        step(batch)                                  # step 5 is fine, but the sync sees the run of 3
    assert step.nonfinite_total == 3
