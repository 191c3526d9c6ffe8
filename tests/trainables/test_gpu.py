"""CUDA-only checks; they skip with a reason on machines without a GPU (and run in
benchmarks/gpu_check.sh)."""
import pytest
import torch
from torch import nn

from trainables.runtime import checkpoint as ck
from trainables.training.step import TrainStep

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def test_fp16_step_uses_the_grad_scaler_and_channels_last():
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4)).cuda()
    model = model.to(memory_format=torch.channels_last)
    step = TrainStep(model, torch.optim.SGD(model.parameters(), lr=0.1), loss_fn=nn.functional.cross_entropy,
                     device=torch.device("cuda"), precision="fp16", channels_last=True)
    assert step.scaler is not None
    x = step.to_device(torch.randn(4, 3, 8, 8))
    assert x.is_cuda and x.is_contiguous(memory_format=torch.channels_last)
    r = step([(torch.randn(4, 3, 8, 8), torch.randint(0, 4, (4,)))])
    assert r.samples == 4 and r.loss == r.loss


def test_gpu_checkpoint_loads_on_cpu(tmp_path):
    path = ck.save(tmp_path / "c.pt", {"model": {"module.w": torch.ones(3, device="cuda")}})
    w = ck.load(path, map_location="cpu")["model"]["w"]
    assert w.device.type == "cpu" and torch.equal(w, torch.ones(3))


def test_train_loop_on_cuda_with_kernels(tmp_path):
    from trainables.loop import train_loop
    from trainables.runtime.session import PlainSession
    m = train_loop({"dataset": "digits", "cache_dir": str(tmp_path), "epochs": 2, "precision": "bf16",
                    "kernels": "auto", "flip": False, "crop_padding": 1}, PlainSession("cuda"))
    assert m["status"] == "ok" and m["val_acc"] > 0.5


def test_the_step_does_not_wait_for_the_gpu_between_syncs():
    import warnings
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)).cuda()
    step = TrainStep(model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, fused=True),
                     loss_fn=nn.functional.cross_entropy, device=torch.device("cuda"), grad_clip=1.0, sync_every=8)
    batch = [(torch.randn(16, 32, device="cuda"), torch.randint(0, 4, (16,), device="cuda"))]
    step(batch)
    step.sync()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(16):
                step(batch)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    syncs = [str(w.message) for w in caught if "synchroniz" in str(w.message).lower()]
    assert len(syncs) <= 16 // 8, syncs


def test_a_cuda_trial_reports_nvml_and_torch_memory_figures(tmp_path):
    pytest.importorskip("pynvml", reason="nvidia-ml-py is not installed")
    from trainables.loop import train_loop
    from trainables.runtime.session import PlainSession
    m = train_loop({"dataset": "digits", "cache_dir": str(tmp_path), "epochs": 1, "flip": False,
                    "crop_padding": 1}, PlainSession("cuda"))
    print({k: m[k] for k in m if k.startswith(("gpu_", "cuda_"))})
    assert 0 <= m["gpu_util"] <= 100 and m["gpu_mem_total_gib"] > 1 and m["cuda_peak_allocated_gib"] > 0
