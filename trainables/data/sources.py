"""Data sets and their HDF5 cache.

Every data set becomes uint8 (N, C, H, W) images and int64 labels, cached in one HDF5
file per data set; `load_data` splits it into train/val/test with normalisation stats.
The loaders that feed a step from it are in `trainables.data.loaders`.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from trainables.config import ConfigError, DataConfig

CIFAR_DIR = "cifar-10-batches-py"
CIFAR_FILES = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch", "batches.meta"]
DIGITS_TEST_FRACTION = 0.2
DIGITS_TEST_SEED = 20240601  # fixed: the held-out test split never depends on a trial's seed


class DataError(ConfigError):
    """A data set that cannot be found or read; the message names the path and the fix."""


@dataclass
class Split:
    images: np.ndarray  # uint8 (N, C, H, W)
    labels: np.ndarray  # int64 (N,)

    def __len__(self) -> int:
        return len(self.labels)


@dataclass
class DataBundle:
    train: Split
    val: Split
    test: Split
    num_classes: int
    mean: np.ndarray   # per channel, in uint8 units, from the training split
    std: np.ndarray

    @property
    def in_channels(self) -> int:
        return self.train.images.shape[1]

    @property
    def scale_shift(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Normalisation as x * scale + shift on uint8 pixel values."""
        scale = 1.0 / self.std
        return torch.tensor(scale, dtype=torch.float32), torch.tensor(-self.mean * scale, dtype=torch.float32)


# ---------------------------------------------------------------- sources


def _hash_files(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for p in paths:
        h.update(p.name.encode())
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 22), b""):
                h.update(chunk)
    return h.hexdigest()


def _cifar_key(cfg: DataConfig) -> tuple[str, Callable[[], dict[str, np.ndarray]]]:
    folder = Path(cfg.data_root) / CIFAR_DIR
    missing = [f for f in CIFAR_FILES if not (folder / f).is_file()]
    if missing:
        if not cfg.download:
            raise DataError(f"CIFAR-10 not found: {folder} lacks {', '.join(missing)}; put the python-format "
                            f"batches there (data_root) or set download: true where the internet is reachable")
        _cifar_download(cfg.data_root)
    key = _hash_files([folder / f for f in CIFAR_FILES])

    def build() -> dict[str, np.ndarray]:
        from torchvision.datasets import CIFAR10
        out = {}
        for split, train in (("train", True), ("test", False)):
            ds = CIFAR10(cfg.data_root, train=train, download=False)
            out[f"{split}_x"] = np.ascontiguousarray(ds.data.transpose(0, 3, 1, 2))
            out[f"{split}_y"] = np.asarray(ds.targets, dtype=np.int64)
        return out
    return key, build


def cifar_problems(data_root: str) -> list[str]:
    """The CIFAR-10 files under data_root that differ from the published ones (torchvision's
    checksum list): a corrupt copy is refused by the driver before any trial starts.  Missing
    files are the trial's to report: on a cluster the nodes may hold the data, not the driver."""
    from torchvision.datasets import CIFAR10
    from torchvision.datasets.utils import check_integrity
    folder = Path(data_root).expanduser() / CIFAR_DIR
    published = [*CIFAR10.train_list, *CIFAR10.test_list, [CIFAR10.meta["filename"], CIFAR10.meta["md5"]]]
    return [f"train.data_root: {folder / name} does not match CIFAR-10's published checksum (md5 {md5}): it is "
            f"corrupt or not CIFAR-10's; delete it and copy it again, or set train.download: true"
            for name, md5 in published if (folder / name).is_file() and not check_integrity(str(folder / name), md5)]


def _cifar_download(root: str) -> None:
    from torchvision.datasets import CIFAR10
    try:
        CIFAR10(root, train=True, download=True)
    except Exception as e:  # noqa: BLE001 - no network, refused, disk full: one clear error
        raise DataError(f"CIFAR-10 download into {root} failed ({type(e).__name__}: {e}); copy "
                        f"{CIFAR_DIR}/ there by hand and set download: false") from None


def _digits_file() -> Path:
    """scikit-learn's bundled digits CSV, found without importing scikit-learn (~1 s)."""
    import importlib.util
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise DataError("dataset='digits' needs scikit-learn (its bundled digits data); pip install scikit-learn")
    return Path(next(iter(spec.submodule_search_locations))) / "datasets" / "data" / "digits.csv.gz"


def _digits_key(cfg: DataConfig) -> tuple[str, Callable[[], dict[str, np.ndarray]]]:
    source = _digits_file()
    key = _hash_files([source]) if source.is_file() else "sklearn-digits"

    def build() -> dict[str, np.ndarray]:
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split
        d = load_digits()
        x = np.round(d.images * (255.0 / 16.0)).astype(np.uint8)[:, None]  # 0..16 -> 0..255, 1 channel
        y = d.target.astype(np.int64)
        xtr, xte, ytr, yte = train_test_split(x, y, test_size=DIGITS_TEST_FRACTION, stratify=y,
                                              random_state=DIGITS_TEST_SEED)
        return {"train_x": xtr, "train_y": ytr, "test_x": xte, "test_y": yte}
    return key, build


def _synthetic(cfg: DataConfig, seed: int) -> dict[str, np.ndarray]:
    g = np.random.default_rng(seed)
    c, h, w = cfg.synthetic_shape
    n, k = cfg.synthetic_size, cfg.synthetic_classes
    n_test = max(k, n // 10)
    y = g.integers(0, k, n + n_test)
    # Class-dependent brightness makes the task learnable, so loss curves mean something.
    base = (y * (200 // max(k - 1, 1))).astype(np.int16)[:, None, None, None]
    x = np.clip(base + g.integers(0, 56, (n + n_test, c, h, w)), 0, 255).astype(np.uint8)
    return {"train_x": x[:n], "train_y": y[:n], "test_x": x[n:], "test_y": y[n:]}


# ---------------------------------------------------------------- HDF5 cache


def cache_path(cfg: DataConfig) -> Path:
    return Path(cfg.cache_dir) / f"{cfg.dataset}.h5"


def write_h5_atomic(path: Path, arrays: dict[str, np.ndarray], attrs: dict) -> None:
    import h5py
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        with h5py.File(tmp, "w", locking=False) as f:   # a file of our own: nothing to lock against
            for name, arr in arrays.items():
                f.create_dataset(name, data=arr)
            f.attrs.update(attrs)
            f.flush()
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)  # readers see the old file or the whole new one, never half
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_h5(path: Path, key: str) -> dict[str, np.ndarray] | None:
    import h5py
    try:
        # No HDF5 file locking: the cache is replaced whole (os.replace), never written in place,
        # and locks fail or hang on network filesystems (NFS, EFS, Filestore) shared by nodes.
        with h5py.File(path, "r", locking=False) as f:
            if f.attrs.get("content_key") != key:
                return None
            return {name: f[name][()] for name in f}
    except (OSError, KeyError):
        return None


def load_arrays(cfg: DataConfig, seed: int = 0) -> dict[str, np.ndarray]:
    """The data set's train/test arrays, from the HDF5 cache (built on first use)."""
    if cfg.dataset == "synthetic":
        return _synthetic(cfg, seed)
    if cfg.dataset == "cifar10":
        key, build = _cifar_key(cfg)
    elif cfg.dataset == "digits":
        key, build = _digits_key(cfg)
    else:
        raise DataError(f"dataset={cfg.dataset!r} is not one of digits, cifar10, synthetic")
    path = cache_path(cfg)
    arrays = read_h5(path, key) if path.exists() else None
    if arrays is None:  # missing, or built from other source files: rebuild
        arrays = build()
        write_h5_atomic(path, arrays, {"content_key": key, "dataset": cfg.dataset})
    return arrays


def _channel_stats(images: np.ndarray, chunk: int = 4096) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel mean and std in chunks: a float64 copy of CIFAR-10 at once would be 1.1 GB
    in every trial and worker."""
    total = np.zeros(images.shape[1])
    squares = np.zeros(images.shape[1])
    for start in range(0, len(images), chunk):
        block = images[start:start + chunk].astype(np.float64)
        total += block.sum(axis=(0, 2, 3))
        squares += np.square(block).sum(axis=(0, 2, 3))
    count = images.shape[0] * images.shape[2] * images.shape[3]
    mean = total / count
    std = np.sqrt(np.maximum(squares / count - mean ** 2, 0.0)) + 1e-6
    return mean, std


def load_data(cfg: DataConfig, seed: int = 0) -> DataBundle:
    arrays = load_arrays(cfg, seed)
    x, y = arrays["train_x"], arrays["train_y"]
    if cfg.train_subset:
        x, y = x[: cfg.train_subset], y[: cfg.train_subset]
    perm = np.random.default_rng(seed).permutation(len(y))
    n_val = max(1, round(len(y) * cfg.val_fraction))
    val_idx, tr_idx = np.sort(perm[:n_val]), np.sort(perm[n_val:])
    train = Split(x[tr_idx], y[tr_idx])
    mean, std = _channel_stats(train.images)
    num_classes = int(max(y.max(), arrays["test_y"].max())) + 1
    return DataBundle(train, Split(x[val_idx], y[val_idx]), Split(arrays["test_x"], arrays["test_y"]),
                      num_classes, mean.astype(np.float32), std.astype(np.float32))
