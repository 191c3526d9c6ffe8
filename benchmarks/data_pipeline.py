"""Images per second of the `device` loader against a torch DataLoader with PIL transforms.

    .venv/bin/python benchmarks/data_pipeline.py            # 50,000 images, about a minute

Same 50,000 synthetic 32x32x3 uint8 images for every mode, in one run:
  device      the tuner's resident loader: randperm, slice, one batched augment per batch
  torch nw=0  DataLoader + RandomCrop(32, padding=4), RandomHorizontalFlip, ToTensor, Normalize
  torch nw=2  the same with two worker processes
Target on 2 CPU cores: device >= 10x the best torch setting.
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset

from trainables.data.loaders import DeviceLoader
from trainables.data.sources import Split

TARGET = 10.0
MEAN, STD = (125.3, 123.0, 113.9), (63.0, 62.1, 66.7)


class PILDataset(Dataset):
    def __init__(self, images_nhwc: np.ndarray, labels: np.ndarray):
        from torchvision import transforms as T
        self.images, self.labels = images_nhwc, labels
        self.tf = T.Compose([T.RandomCrop(32, padding=4), T.RandomHorizontalFlip(), T.ToTensor(),
                             T.Normalize([m / 255 for m in MEAN], [s / 255 for s in STD])])

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return self.tf(Image.fromarray(self.images[i])), int(self.labels[i])


def rate(loader, n: int) -> float:
    t0 = time.perf_counter()
    seen = 0
    for x, _ in loader:
        seen += x.shape[0]
    dt = time.perf_counter() - t0
    assert seen == n, (seen, n)
    return n / dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=50_000)
    ap.add_argument("--batch", type=int, default=256)
    args = ap.parse_args()
    g = np.random.default_rng(0)
    nchw = g.integers(0, 256, (args.images, 3, 32, 32), dtype=np.uint8)
    labels = g.integers(0, 10, args.images)
    nhwc = np.ascontiguousarray(nchw.transpose(0, 2, 3, 1))
    scale = torch.tensor([1 / s for s in STD])
    shift = torch.tensor([-m / s for m, s in zip(MEAN, STD)])
    dev = DeviceLoader(Split(nchw, labels), batch_size=args.batch, device=torch.device("cpu"), scale=scale,
                       shift=shift, out_dtype=torch.float32, train=True, augment=True, padding=4, flip=True, seed=0)
    rates = {}
    dev.set_epoch(0)
    rate(dev, args.images)  # warm-up epoch (allocator, first-touch pages)
    dev.set_epoch(1)
    rates["device"] = rate(dev, args.images)
    for nw in (0, 2):
        dl = DataLoader(PILDataset(nhwc, labels), batch_size=args.batch, shuffle=True, num_workers=nw,
                        generator=torch.Generator().manual_seed(0))
        rates[f"torch_nw{nw}"] = rate(dl, args.images)
    best_torch = max(v for k, v in rates.items() if k.startswith("torch"))
    ratio = rates["device"] / best_torch
    for k, v in rates.items():
        print(f"{k:10s} {v:10.0f} img/s   {v / best_torch:6.2f}x best torch")
    print(f"device / best torch = {ratio:.2f}x (target >= {TARGET}x)")
    print("BENCH " + json.dumps({"bench": "data_pipeline", "images": args.images,
                                 **{f"{k}_img_per_s": round(v, 1) for k, v in rates.items()},
                                 "ratio_device_to_best_torch": round(ratio, 2), "target_ratio": TARGET,
                                 "met": ratio >= TARGET}))


if __name__ == "__main__":
    main()
