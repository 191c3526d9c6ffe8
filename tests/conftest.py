"""Shared fixtures.  Triton kernels run under the interpreter on machines without CUDA;
Triton reads TRITON_INTERPRET when a kernel is decorated, so it is set before any
kernel module is imported."""
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402


@pytest.fixture
def cache_dir(tmp_path):
    return str(tmp_path / "cache")


def digits_config(cache_dir, **over):
    from trainables.config import TrainConfig
    base = dict(dataset="digits", cache_dir=cache_dir, epochs=1, micro_batch_size=64, lr=0.05,
                flip=False, crop_padding=1, width=0.5)
    base.update(over)
    return TrainConfig.from_dict(base)
