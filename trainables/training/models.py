"""Model builders. Classes and input channels come from the data set."""
from __future__ import annotations

import logging

import torch
from torch import nn

from trainables.config import ConfigError, ModelConfig

log = logging.getLogger(__name__)


def _sep_block(cin: int, cout: int, stride: int) -> nn.Sequential:
    """Depthwise 3x3 then pointwise 1x1, each followed by BatchNorm and ReLU."""
    return nn.Sequential(
        nn.Conv2d(cin, cin, 3, stride, 1, groups=cin, bias=False), nn.BatchNorm2d(cin), nn.ReLU(inplace=True),
        nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
    )


class ConvNet(nn.Module):
    """A small CPU-friendly classifier of depthwise-separable blocks."""

    def __init__(self, in_channels: int, num_classes: int, width: float = 1.0, dropout: float = 0.1):
        super().__init__()
        c = [max(8, round(w * width)) for w in (32, 64, 128, 256)]
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, c[0], 3, 1, 1, bias=False), nn.BatchNorm2d(c[0]), nn.ReLU(inplace=True),
            _sep_block(c[0], c[1], 1), _sep_block(c[1], c[2], 2), _sep_block(c[2], c[3], 2),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        )
        self.head = nn.Sequential(nn.Dropout(dropout), nn.Linear(c[3], num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def _first_conv(conv: nn.Conv2d, in_channels: int, kernel: int, stride: int, padding: int) -> nn.Conv2d:
    return nn.Conv2d(in_channels, conv.out_channels, kernel, stride, padding, bias=conv.bias is not None)


def _resnet(builder, in_channels: int, num_classes: int, cifar_stem: bool) -> nn.Module:
    m = builder(weights=None, num_classes=num_classes)
    if cifar_stem:  # 3x3 stride-1 stem without max-pool keeps 32x32 inputs informative
        m.conv1 = _first_conv(m.conv1, in_channels, 3, 1, 1)
        m.maxpool = nn.Identity()
    elif in_channels != 3:
        m.conv1 = _first_conv(m.conv1, in_channels, 7, 2, 3)
    return m


def _features_first_conv(m: nn.Module, in_channels: int) -> nn.Module:
    if in_channels != 3:
        conv = m.features[0][0]
        m.features[0][0] = _first_conv(conv, in_channels, conv.kernel_size[0], conv.stride[0], conv.padding[0])
    return m


def head_of(model: nn.Module) -> nn.Module:
    """The classification head: the part re-initialised for a new class count and left
    trainable by freeze_backbone."""
    for name in ("head", "fc", "classifier"):
        if hasattr(model, name):
            return getattr(model, name)
    raise ConfigError(f"{type(model).__name__} has no known head")


def build_model(cfg: ModelConfig, in_channels: int, num_classes: int) -> nn.Module:
    name = cfg.model
    if name != "convnet":
        # torchvision costs ~1.2 s to import (it pulls in torch._dynamo): only when needed,
        # since every DDP worker pays it before its first step.
        from torchvision import models as tvm
    if name == "convnet":
        model = ConvNet(in_channels, num_classes, cfg.width, cfg.dropout)
    elif name == "resnet18":
        model = _resnet(tvm.resnet18, in_channels, num_classes, cifar_stem=True)
    elif name == "resnet50":
        model = _resnet(tvm.resnet50, in_channels, num_classes, cifar_stem=False)
    elif name == "mobilenet_v3_small":
        model = _features_first_conv(tvm.mobilenet_v3_small(weights=None, num_classes=num_classes), in_channels)
    elif name == "efficientnet_b0":
        model = _features_first_conv(tvm.efficientnet_b0(weights=None, num_classes=num_classes), in_channels)
    else:
        raise ConfigError(f"model={name!r} is not one of convnet, resnet18, resnet50, "
                          "mobilenet_v3_small, efficientnet_b0")
    if cfg.pretrained:
        load_pretrained(model, cfg.pretrained)
    if cfg.freeze_backbone:
        for p in model.parameters():
            p.requires_grad_(False)
        for p in head_of(model).parameters():
            p.requires_grad_(True)
    return model


def load_pretrained(model: nn.Module, path: str) -> list[str]:
    """Load a local state dict; tensors whose shape differs (a head for another class
    count) keep their fresh initialisation. Returns the names re-initialised."""
    from trainables.runtime.checkpoint import read_state_dict
    state = read_state_dict(path)
    own = model.state_dict()
    unknown = sorted(set(state) - set(own))
    if unknown:
        raise ConfigError(f"pretrained={path!r} has weights this model lacks: {unknown[:5]}; "
                          "is it for another architecture?")
    reinit = [k for k, v in state.items() if v.shape != own[k].shape]
    for k in reinit:
        del state[k]
    model.load_state_dict(state, strict=False)
    if reinit:
        log.warning("pretrained %s: re-initialised %s (shape differs, e.g. another class count)",
                    path, ", ".join(reinit))
    return reinit
