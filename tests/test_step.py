import math

import pytest
import torch
from torch import nn

from trainables.config import ConfigError
from trainables.step import DivergedError, TrainStep


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
                     loss_fn=lambda l, y: ce(l, y) * float("nan"), device=torch.device("cpu"),
                     max_nonfinite_steps=3)
    batch = [(torch.randn(4, 6), torch.randint(0, 3, (4,)))]
    before = [p.detach().clone() for p in model.parameters()]
    assert not step(batch).applied and not step(batch).applied
    for a, b in zip(before, model.parameters()):
        assert torch.equal(a, b)
    with pytest.raises(DivergedError):
        step(batch)
    assert step.nonfinite_total == 3
