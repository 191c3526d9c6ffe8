import pytest
import torch

from trainables.config import ModelConfig, PruneConfig
from trainables.training.models import build_model
from trainables.training.pruning import make_permanent, prune_to, sparsity, target_sparsity


@pytest.mark.parametrize("scope", ["global", "layer"])
def test_pruning_reaches_and_keeps_sparsity_through_optimizer_steps(scope):
    torch.manual_seed(0)
    m = build_model(ModelConfig(model="convnet", width=0.5), 3, 10)
    assert prune_to(m, 0.3, scope) == pytest.approx(0.3, abs=0.01)
    assert prune_to(m, 0.6, scope) == pytest.approx(0.6, abs=0.01)
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-3)
    for _ in range(3):
        opt.zero_grad()
        m(torch.randn(4, 3, 16, 16)).sum().backward()
        opt.step()
    m(torch.randn(1, 3, 16, 16))
    assert sparsity(m) == pytest.approx(0.6, abs=0.01)
    make_permanent(m)
    assert not any(n.endswith("_mask") for n, _ in m.named_buffers())
    assert sparsity(m) == pytest.approx(0.6, abs=0.01)


def test_sparsity_schedule_spreads_over_epochs():
    cfg = PruneConfig(prune_amount=0.6, prune_start_epoch=2, prune_end_epoch=4)
    assert [target_sparsity(cfg, e) for e in range(1, 6)] == pytest.approx([0, 0.2, 0.4, 0.6, 0.6])
    assert target_sparsity(PruneConfig(prune_amount=0.5, prune_start_epoch=3), 3) == 0.5
