"""The two loader modes that feed the training step from a DataBundle.

`device` mode keeps the whole split on the training device and augments whole batches;
`torch` mode is a classic DataLoader whose workers and pinned memory are real knobs.
"""
from __future__ import annotations

import hashlib
import math
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import (
    DataLoader,
    Dataset,
    DistributedSampler,
    RandomSampler,
    Sampler,
)

from trainables.config import DataConfig
from trainables.data.sources import DataBundle, Split, read_h5, write_h5_atomic
from trainables.training import kernels

# ---------------------------------------------------------------- sharding


def shard_indices(perm: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    """Equal shards: every rank gets floor(N / world) samples, at most world-1 dropped."""
    per_rank = len(perm) // world
    return perm[rank: per_rank * world: world]


def epoch_generator(seed: int, epoch: int, rank: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed * 1_000_003 + epoch * 1009 + rank)


# ---------------------------------------------------------------- device mode


class DeviceLoader:
    """The split resident on `device`; per epoch a randperm, slices, and one batched augment."""

    def __init__(self, split: Split, *, batch_size: int, device: torch.device, scale: torch.Tensor,
                 shift: torch.Tensor, out_dtype: torch.dtype, train: bool, augment: bool, padding: int,
                 flip: bool, seed: int, rank: int = 0, world: int = 1, drop_last: bool = False,
                 impl: str = "torch"):
        # Padded once here, so each batch is cropped straight out of the resident data.
        self.x = torch.nn.functional.pad(torch.from_numpy(split.images).to(device), (padding,) * 4)
        self.y = torch.from_numpy(split.labels).to(device)
        self.batch_size, self.device, self.out_dtype = batch_size, device, out_dtype
        self.scale, self.shift = scale.to(device), shift.to(device)
        self.train, self.augment, self.padding, self.flip = train, augment and train, padding, flip
        self.seed, self.rank, self.world, self.drop_last, self.impl = seed, rank, world, drop_last, impl
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _indices(self) -> torch.Tensor:
        n = len(self.y)
        if self.train:
            perm = torch.randperm(n, generator=epoch_generator(self.seed, self.epoch))
            return shard_indices(perm, self.rank, self.world)
        return torch.arange(self.rank, n, self.world)  # validation: every sample exactly once

    def __len__(self) -> int:
        n = len(self.y) // self.world if self.train else len(range(self.rank, len(self.y), self.world))
        return n // self.batch_size if self.drop_last and self.train else math.ceil(n / self.batch_size)

    def __iter__(self):
        idx = self._indices()
        n = len(idx)
        if self.augment:
            g = epoch_generator(self.seed, self.epoch, self.rank + 7919)
            offsets = torch.randint(0, 2 * self.padding + 1, (n, 2), generator=g)
            flips = torch.rand(n, generator=g) < 0.5 if self.flip else torch.zeros(n, dtype=torch.bool)
        else:
            offsets = torch.full((n, 2), self.padding, dtype=torch.long)
            flips = torch.zeros(n, dtype=torch.bool)
        idx, offsets, flips = idx.to(self.device), offsets.to(self.device), flips.to(self.device)
        for b in range(len(self)):
            sl = slice(b * self.batch_size, min(n, (b + 1) * self.batch_size))
            i = idx[sl]
            xb = kernels.augment(self.x, offsets[sl], flips[sl], self.scale, self.shift, self.out_dtype,
                                 self.padding, impl=self.impl, index=i, prepadded=True)
            yield xb, self.y[i]


# ---------------------------------------------------------------- torch mode


class ArrayDataset(Dataset):
    """Per-sample access to uint8 arrays with a torchvision transform; `copies` holds
    precomputed augmented versions, indexed as copy * N + i."""

    def __init__(self, images: np.ndarray, labels: np.ndarray, transform=None):
        self.images, self.labels, self.transform = images, labels, transform
        self.n = len(labels)

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int):
        x = torch.from_numpy(self.images[i])
        if self.transform is not None:
            x = self.transform(x)
        return x, int(self.labels[i % self.n])


class CopySampler(Sampler):
    """Wraps a sampler over N samples; epoch e reads precomputed copy e % K."""

    def __init__(self, inner: Sampler, n: int, copies: int):
        self.inner, self.n, self.copies, self.epoch = inner, n, copies, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        if hasattr(self.inner, "set_epoch"):
            self.inner.set_epoch(epoch)

    def __iter__(self):
        base = (self.epoch % self.copies) * self.n
        return (base + i for i in self.inner)

    def __len__(self) -> int:
        return len(self.inner)


def torch_transform(mean: np.ndarray, std: np.ndarray, size: tuple[int, int], augment: bool, padding: int,
                    flip: bool):
    from torchvision.transforms import v2
    steps = []
    if augment:
        steps.append(v2.RandomCrop(size, padding=padding))
        if flip:
            steps.append(v2.RandomHorizontalFlip())
    steps += [v2.ToDtype(torch.float32, scale=False),
              v2.Normalize(mean.tolist(), std.tolist())]
    return v2.Compose(steps)


def precompute_copies(cfg: DataConfig, split: Split, copies: int, seed: int) -> np.ndarray:
    """K augmented (crop + flip) uint8 copies of the split, cached next to the data set."""
    key = hashlib.sha256(split.images[:: max(1, len(split) // 64)].tobytes()
                         + repr((len(split), copies, seed, cfg.crop_padding, cfg.flip)).encode()).hexdigest()
    path = Path(cfg.cache_dir) / f"{cfg.dataset}-aug.h5"
    cached = read_h5(path, key) if path.exists() else None
    if cached is not None:
        return cached["images"]
    imgs = torch.from_numpy(split.images)
    ones, zeros = torch.ones(imgs.shape[1]), torch.zeros(imgs.shape[1])
    out = []
    for k in range(copies):
        g = epoch_generator(seed, k, 104729)
        n = len(split)
        offsets = torch.randint(0, 2 * cfg.crop_padding + 1, (n, 2), generator=g)
        flips = (torch.rand(n, generator=g) < 0.5) if cfg.flip else torch.zeros(n, dtype=torch.bool)
        aug = kernels.augment_torch(imgs, offsets, flips, ones, zeros, torch.float32, cfg.crop_padding)
        out.append(aug.to(torch.uint8).contiguous().numpy())
    arr = np.concatenate(out)
    write_h5_atomic(path, {"images": arr}, {"content_key": key})
    return arr


def torch_loader(cfg: DataConfig, data: DataBundle, split: Split, *, batch_size: int, train: bool,
                 seed: int, rank: int = 0, world: int = 1) -> DataLoader:
    size = split.images.shape[2:]
    images = split.images
    augment = cfg.augment and train
    if train and cfg.precomputed_augment:
        images, augment = precompute_copies(cfg, split, cfg.precomputed_augment, seed), False
    ds = ArrayDataset(images, split.labels,
                      torch_transform(data.mean, data.std, size, augment, cfg.crop_padding, cfg.flip))
    if train and world > 1:
        sampler = DistributedSampler(range(len(split)), num_replicas=world, rank=rank, shuffle=True,
                                     seed=seed, drop_last=True)
    elif train:
        sampler = RandomSampler(range(len(split)), generator=torch.Generator().manual_seed(seed))
    else:
        sampler = list(range(rank, len(split), world))
    if train and cfg.precomputed_augment:
        sampler = CopySampler(sampler, len(split), cfg.precomputed_augment)
    workers = cfg.num_workers
    dl = DataLoader(ds, batch_size=batch_size, sampler=sampler, num_workers=workers,
                      pin_memory=cfg.pin_memory and torch.cuda.is_available(),
                      persistent_workers=cfg.persistent_workers and workers > 0,
                      prefetch_factor=cfg.prefetch_factor if workers > 0 else None,
                      drop_last=cfg.drop_last and train,
                      generator=torch.Generator().manual_seed(seed))
    dl.base_seed = seed
    return dl


def set_epoch(loader, epoch: int) -> None:
    """Reseed the per-epoch shuffle of either loader kind."""
    if isinstance(loader, DeviceLoader):
        loader.set_epoch(epoch)
        return
    sampler = loader.sampler
    if hasattr(sampler, "set_epoch"):
        sampler.set_epoch(epoch)
    elif isinstance(sampler, RandomSampler) and sampler.generator is not None:
        sampler.generator.manual_seed(loader.base_seed * 1_000_003 + epoch)
    if loader.generator is not None:  # per-epoch augmentation randomness in the workers
        loader.generator.manual_seed(loader.base_seed * 1_000_003 + epoch + 1)
