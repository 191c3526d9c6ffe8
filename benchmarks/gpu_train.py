"""ResNet-18 training throughput on CIFAR-10-shaped data, per loader and kernel setting.

    python benchmarks/gpu_train.py [--json OUT.json] [--images 12800] [--smoke]

Runs train_loop (no Ray) for 2 epochs per setting and reads the second epoch's
samples/s (the first warms cuDNN and the caches), sampling GPU utilisation with NVML:
  (a) fp32, torch DataLoader, num_workers 0/4 x pin_memory off/on
  (b) bf16, device loader, kernels: torch
  (c) bf16, device loader, kernels: triton        target: (c) >= (b)
--smoke runs a tiny CPU version to check the script itself.
"""
from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time

import torch

from trainables.loop import train_loop
from trainables.runtime.session import PlainSession


class GpuSampler:
    """Mean GPU utilisation (%) from NVML while a run lasts; matched by UUID, since NVML
    numbers GPUs physically and ignores CUDA_VISIBLE_DEVICES."""

    def __init__(self):
        self.samples, self.stop = [], threading.Event()
        try:
            import pynvml
            pynvml.nvmlInit()
            uuid = str(torch.cuda.get_device_properties(0).uuid)
            self.handle = None
            for i in range(pynvml.nvmlDeviceGetCount()):
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                u = pynvml.nvmlDeviceGetUUID(h)
                u = u.decode() if isinstance(u, bytes) else u
                if u.replace("GPU-", "") == uuid.replace("GPU-", ""):
                    self.handle = h
            self.nvml = pynvml
        except Exception:  # noqa: BLE001 - no NVML (driver, library): the figures go without GPU readings
            self.handle = None

    def __enter__(self):
        if self.handle is not None:
            self.thread = threading.Thread(target=self._run, daemon=True)
            self.thread.start()
        return self

    def _run(self):
        while not self.stop.wait(0.1):
            self.samples.append(self.nvml.nvmlDeviceGetUtilizationRates(self.handle).gpu)

    def __exit__(self, *exc):
        self.stop.set()
        if self.handle is not None:
            self.thread.join()

    @property
    def mean(self):
        return sum(self.samples) / len(self.samples) if self.samples else None


def run(name: str, base: dict, over: dict) -> dict:
    cfg = {**base, **over}
    with GpuSampler() as gpu:
        t0 = time.perf_counter()
        s = PlainSession(cfg.get("device", "auto"))
        train_loop(cfg, s)
        wall = time.perf_counter() - t0
    r = s.reports[-1]
    out = {"setting": name, "status": r["status"], "img_per_s": r["samples_per_s"], "wall_s": wall,
           "gpu_util_pct": gpu.mean}
    print(f"{name:32s} {out['img_per_s']:10.0f} img/s  gpu {out['gpu_util_pct']}%  ({wall:.1f} s)", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument("--images", type=int, default=12800)
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args()
    cache = tempfile.mkdtemp(prefix="tuner-gpu-bench-")
    base = {"dataset": "synthetic", "synthetic_size": args.images, "synthetic_shape": [3, 32, 32],
            "model": "resnet18", "epochs": 2, "micro_batch_size": 256, "lr": 0.05, "cache_dir": cache,
            "val_fraction": 0.05, "checkpoint_every": 1000}
    if args.smoke:
        base.update(synthetic_size=64, model="convnet", width=0.25, micro_batch_size=16, device="cpu")
    settings = []
    for nw in (0, 4):
        for pin in (False, True):
            settings.append((f"a fp32 torch nw={nw} pin={pin}",
                             {"precision": "fp32", "loader": "torch", "num_workers": nw, "pin_memory": pin,
                              "kernels": "torch"}))
    bf16 = "bf16"
    settings.append(("b bf16 device kernels=torch", {"precision": bf16, "loader": "device", "kernels": "torch"}))
    settings.append(("c bf16 device kernels=triton", {"precision": bf16, "loader": "device", "kernels": "triton"}))
    results = [run(name, base, over) for name, over in settings]
    b, c = results[-2]["img_per_s"], results[-1]["img_per_s"]
    summary = {"bench": "gpu_train", "results": results, "c_over_b": c / b if b else None,
               "target": "(c) >= (b)", "met": c >= b}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)
    print("BENCH " + json.dumps({"bench": "gpu_train", "c_over_b": round(c / b, 3) if b else None,
                                 "b_img_per_s": round(b, 1), "c_img_per_s": round(c, 1), "met": c >= b}))


if __name__ == "__main__":
    main()
