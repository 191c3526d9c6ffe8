"""Each Triton kernel against its plain-PyTorch reference.  Without CUDA they run under
the Triton interpreter (conftest sets TRITON_INTERPRET=1 before any kernel import)."""
import importlib.util

import pytest
import torch
import torch.nn.functional as F

from trainables.config import ConfigError
from trainables.training import kernels

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")
DEV = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def aug_inputs(n, c, h, w, pad, seed):
    g = torch.Generator().manual_seed(seed)
    imgs = torch.randint(0, 256, (n, c, h, w), dtype=torch.uint8, generator=g)
    off = torch.randint(0, 2 * pad + 1, (n, 2), generator=g)
    fl = torch.rand(n, generator=g) < 0.5
    scale, shift = torch.rand(c, generator=g) * 0.05, torch.randn(c, generator=g)
    return [t.to(DEV) for t in (imgs, off, fl, scale, shift)]


@pytest.mark.parametrize("n,c,h,w,pad", [(1, 3, 32, 32, 4), (7, 3, 5, 9, 2), (13, 1, 8, 8, 1), (3, 2, 6, 6, 0)])
def test_augment_kernel_is_bit_exact_in_fp32(n, c, h, w, pad):
    from trainables.training.kernels.augment_triton import augment_triton
    args = aug_inputs(n, c, h, w, pad, seed=n)
    ref = kernels.augment_torch(*args, torch.float32, pad)
    got = augment_triton(*args, torch.float32, pad)
    assert got.is_contiguous(memory_format=torch.channels_last) and got.shape == ref.shape
    if DEV.type == "cuda":  # the GPU may fuse the multiply-add: within one ulp
        torch.testing.assert_close(got, ref, rtol=2 ** -23, atol=2 ** -20)
    else:
        assert torch.equal(got, ref)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_augment_kernel_within_dtype_tolerance(dtype):
    from trainables.training.kernels.augment_triton import augment_triton
    args = aug_inputs(9, 3, 7, 11, 3, seed=3)
    ref = kernels.augment_torch(*args, dtype, 3)
    got = augment_triton(*args, dtype, 3)
    assert got.dtype == dtype
    eps = torch.finfo(dtype).eps  # one ulp at 1.0
    torch.testing.assert_close(got.float(), ref.float(), rtol=eps, atol=eps)


def smoothed_ce(logits, target, eps):
    """Written from the definition: cross-entropy against (1-e)*onehot + e/C."""
    c = logits.shape[1]
    q = torch.full_like(logits, eps / c, dtype=torch.float64)
    q.scatter_add_(1, target.view(-1, 1), torch.full((len(target), 1), 1 - eps, dtype=torch.float64, device=logits.device))
    return -(q * torch.log_softmax(logits.double(), 1)).sum(1).mean()


@pytest.mark.parametrize("n,c", [(1, 10), (7, 10), (33, 100), (5, 1000), (3, 3)])
@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_cross_entropy_forward_and_backward_match(n, c, eps):
    from trainables.training.kernels.cross_entropy_triton import cross_entropy_triton
    g = torch.Generator().manual_seed(n * c)
    logits = (torch.randn(n, c, generator=g) * 3).to(DEV).requires_grad_()
    target = torch.randint(0, c, (n,), generator=g).to(DEV)
    ref = smoothed_ce(logits, target, eps)
    got = cross_entropy_triton(logits, target, eps)
    assert abs(float(got) - float(ref)) < 1e-5
    torch.testing.assert_close(got, kernels.cross_entropy_torch(logits, target, eps), atol=1e-5, rtol=0)
    g_ref, = torch.autograd.grad(ref, logits)
    g_got, = torch.autograd.grad(got, logits)
    torch.testing.assert_close(g_got, g_ref.float(), atol=1e-5, rtol=0)


def test_cross_entropy_from_bf16_logits_under_autocast():
    from trainables.training.kernels.cross_entropy_triton import cross_entropy_triton
    g = torch.Generator().manual_seed(0)
    x = torch.randn(9, 10, generator=g).to(DEV)
    w = torch.randn(10, 10, generator=g).to(DEV).requires_grad_()
    t = torch.randint(0, 10, (9,), generator=g).to(DEV)
    with torch.autocast(DEV.type, dtype=torch.bfloat16):
        logits = x @ w
        assert logits.dtype == torch.bfloat16
        got = cross_entropy_triton(logits, t, 0.1)
        ref = F.cross_entropy(logits.float(), t, label_smoothing=0.1)
    assert got.dtype == torch.float32
    assert abs(float(got) - float(ref)) < 1e-5
    gw_got, = torch.autograd.grad(got, w, retain_graph=True)
    gw_ref, = torch.autograd.grad(ref, w)
    torch.testing.assert_close(gw_got, gw_ref, atol=1e-5, rtol=0)


def test_dispatcher_refuses_triton_where_it_cannot_run(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    if torch.cuda.is_available():
        pytest.skip("CUDA is present: Triton can run here")
    with pytest.raises(ConfigError, match="kernels='triton' cannot run"):
        kernels.resolve("triton", torch.device("cpu"))
    assert kernels.resolve("auto", torch.device("cpu")) == "torch"


def test_dispatcher_choices():
    assert kernels.resolve("torch", DEV) == "torch"
    assert kernels.resolve("triton", DEV) == "triton"  # CUDA, or the interpreter here
    assert kernels.resolve("auto", DEV) == ("triton" if DEV.type == "cuda" else "torch")
    with pytest.raises(ConfigError):
        kernels.resolve("fast", DEV)


class Spy:
    """Stands in for a @triton.jit kernel and counts launches."""

    def __init__(self, kernel):
        self.kernel, self.launches = kernel, 0

    def __getitem__(self, grid):
        self.launches += 1
        return self.kernel[grid]


@pytest.mark.parametrize("choice", ["triton", "torch"])
def test_training_launches_triton_kernels_only_when_asked(choice, tmp_path, monkeypatch):
    from trainables.loop import train_loop
    from trainables.runtime.session import PlainSession
    from trainables.training.kernels import augment_triton as at
    from trainables.training.kernels import cross_entropy_triton as ct
    spies = {"aug": Spy(at.augment_kernel), "fwd": Spy(ct.ce_fwd_kernel), "bwd": Spy(ct.ce_bwd_kernel)}
    monkeypatch.setattr(at, "augment_kernel", spies["aug"])
    monkeypatch.setattr(ct, "ce_fwd_kernel", spies["fwd"])
    monkeypatch.setattr(ct, "ce_bwd_kernel", spies["bwd"])
    cfg = {"dataset": "digits", "cache_dir": str(tmp_path), "epochs": 1, "micro_batch_size": 32,
           "max_steps_per_epoch": 2, "width": 0.25, "kernels": choice, "label_smoothing": 0.1,
           "crop_padding": 1, "flip": True, "val_fraction": 0.05}
    m = train_loop(cfg, PlainSession("cpu" if DEV.type == "cpu" else "cuda"))
    assert m["status"] == "ok"
    counts = {k: s.launches for k, s in spies.items()}
    if choice == "triton":
        assert counts["aug"] >= 2 and counts["fwd"] == 2 and counts["bwd"] == 2, counts
    else:
        assert counts == {"aug": 0, "fwd": 0, "bwd": 0}


def test_augment_kernel_reads_resident_prepadded_data():
    from trainables.training.kernels.augment_triton import augment_triton
    imgs, off, fl, scale, shift = aug_inputs(6, 3, 7, 9, 3, seed=11)
    idx = torch.tensor([5, 0, 2, 2, 4, 1], device=DEV)
    padded = torch.nn.functional.pad(imgs, (3, 3, 3, 3))
    want = kernels.augment_torch(imgs[idx], off, fl, scale, shift, torch.float32, 3)
    got = augment_triton(padded, off, fl, scale, shift, torch.float32, 3, index=idx, prepadded=True)
    torch.testing.assert_close(got, want, rtol=2 ** -23, atol=2 ** -20)
    if DEV.type == "cpu":
        assert torch.equal(got, want)
