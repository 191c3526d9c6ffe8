import pytest
import torch

from trainables.config import ModelConfig
from trainables.training.models import build_model, head_of

SIZES = {"convnet": (3, 16), "resnet18": (3, 16), "resnet50": (3, 32), "mobilenet_v3_small": (3, 32),
         "efficientnet_b0": (3, 32)}


@pytest.mark.parametrize("name", list(SIZES))
def test_every_model_builds_and_trains_a_step(name):
    c, hw = SIZES[name]
    for in_ch in (c, 1):
        model = build_model(ModelConfig(model=name), in_channels=in_ch, num_classes=7)
        x = torch.randn(2, in_ch, hw, hw)
        out = model(x)
        assert out.shape == (2, 7)
        out.sum().backward()
        assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


def test_resnet18_has_the_cifar_stem():
    m = build_model(ModelConfig(model="resnet18"), 3, 10)
    assert m.conv1.kernel_size == (3, 3) and m.conv1.stride == (1, 1)
    assert isinstance(m.maxpool, torch.nn.Identity)


def test_dropout_and_batchnorm_differ_between_train_and_eval():
    torch.manual_seed(0)
    m = build_model(ModelConfig(model="convnet", dropout=0.5), 3, 4)
    x = torch.randn(8, 3, 16, 16)
    m.train()
    a, b = m(x), m(x)
    assert not torch.allclose(a, b)  # dropout draws differ
    m.eval()
    with torch.inference_mode():
        c, d = m(x), m(x)
        single = m(x[:1])
    torch.testing.assert_close(c, d)
    torch.testing.assert_close(single, c[:1], atol=1e-5, rtol=1e-5)  # BN uses running stats, not batch stats


def test_pretrained_loads_and_reinitialises_a_head_of_another_size(tmp_path, caplog):
    src = build_model(ModelConfig(model="convnet"), 3, 10)
    path = tmp_path / "w.pt"
    torch.save(src.state_dict(), path)
    m = build_model(ModelConfig(model="convnet", pretrained=str(path)), 3, 5)
    torch.testing.assert_close(m.features[0].weight, src.features[0].weight)
    assert m.head[1].weight.shape == (5, 256)
    assert "re-initialised" in caplog.text


def test_freeze_backbone_trains_only_the_head():
    m = build_model(ModelConfig(model="resnet18", freeze_backbone=True), 3, 10)
    trainable = {id(p) for p in m.parameters() if p.requires_grad}
    assert trainable == {id(p) for p in head_of(m).parameters()}
