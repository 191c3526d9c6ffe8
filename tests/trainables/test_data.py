import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import psutil
import pytest
import torch
from cifar_files import write_cifar

from trainables.config import DataConfig
from trainables.data import loaders as L
from trainables.data import sources as D
from trainables.training.kernels import augment_torch


@pytest.fixture
def cifar(tmp_path, monkeypatch):
    """The fixture's files are real CIFAR-10 pickles but not the published ones: torchvision's
    md5 check is relaxed to an existence check, everything else runs as shipped."""
    import torchvision.datasets.cifar as tvc
    monkeypatch.setattr(tvc, "check_integrity", lambda fpath, md5=None: os.path.isfile(fpath))
    root = tmp_path / "data"
    arrays = write_cifar(root)
    return DataConfig(dataset="cifar10", data_root=str(root), cache_dir=str(tmp_path / "cache")), arrays


def test_cifar_reads_through_torchvision_and_the_hdf5_cache_round_trips(cifar):
    cfg, src = cifar
    first = D.load_arrays(cfg)
    assert D.cache_path(cfg).is_file()
    for k in src:
        np.testing.assert_array_equal(first[k], src[k])
    import h5py
    with h5py.File(D.cache_path(cfg)) as f:
        np.testing.assert_array_equal(f["train_x"][()], src["train_x"])
    mtime = D.cache_path(cfg).stat().st_mtime_ns
    D.load_arrays(cfg)
    assert D.cache_path(cfg).stat().st_mtime_ns == mtime  # second use reads, no rebuild


def test_cache_from_other_source_files_is_rebuilt(cifar, tmp_path):
    cfg, _ = cifar
    D.load_arrays(cfg)
    new = write_cifar(Path(cfg.data_root), seed=1)
    got = D.load_arrays(cfg)
    np.testing.assert_array_equal(got["train_x"], new["train_x"])


def test_cifar_validation_is_a_seeded_slice_and_test_is_the_test_batch(cifar):
    cfg, src = cifar
    cfg.val_fraction = 0.2
    a, b, c = D.load_data(cfg, seed=0), D.load_data(cfg, seed=0), D.load_data(cfg, seed=1)
    assert len(a.val) == 20 and len(a.train) == 80
    np.testing.assert_array_equal(a.val.images, b.val.images)
    assert not np.array_equal(a.val.images, c.val.images)
    np.testing.assert_array_equal(a.test.images, src["test_x"])


def test_missing_cifar_gives_one_clear_error(tmp_path):
    cfg = DataConfig(dataset="cifar10", data_root=str(tmp_path / "nowhere"), cache_dir=str(tmp_path / "c"))
    with pytest.raises(D.DataError) as e:
        D.load_arrays(cfg)
    msg = str(e.value)
    assert str(tmp_path / "nowhere") in msg and "download" in msg


def test_digits_split_is_stratified_and_test_is_held_out(tmp_path):
    cfg = DataConfig(dataset="digits", cache_dir=str(tmp_path))
    d0, d1 = D.load_data(cfg, seed=0), D.load_data(cfg, seed=3)
    assert d0.num_classes == 10 and d0.in_channels == 1
    np.testing.assert_array_equal(d0.test.images, d1.test.images)  # test split never moves
    counts = np.bincount(d0.test.labels, minlength=10)
    assert counts.min() >= 30 and counts.max() <= 40
    total = len(d0.train) + len(d0.val) + len(d0.test)
    assert total == 1797


def index_split(n: int) -> D.Split:
    """Images that carry their own index, to see which samples a loader yields."""
    idx = np.arange(n)
    img = np.zeros((n, 2, 4, 4), np.uint8)
    img[:, 0] = (idx % 256)[:, None, None]
    img[:, 1] = (idx // 256)[:, None, None]
    return D.Split(img, idx.astype(np.int64))


def decode(x: torch.Tensor) -> list[int]:
    x = x.float()
    return (x[:, 0, 0, 0] + 256 * x[:, 1, 0, 0]).round().long().tolist()


def make_loader(mode, split, rank=0, world=1, batch=7):
    if mode == "device":
        return L.DeviceLoader(split, batch_size=batch, device=torch.device("cpu"), scale=torch.ones(2),
                              shift=torch.zeros(2), out_dtype=torch.float32, train=True, augment=False,
                              padding=1, flip=False, seed=5, rank=rank, world=world)
    cfg = DataConfig(loader="torch", augment=False)
    bundle = D.DataBundle(split, split, split, 1, np.zeros(2, np.float32), np.ones(2, np.float32))
    return L.torch_loader(cfg, bundle, split, batch_size=batch, train=True, seed=5, rank=rank, world=world)


@pytest.mark.parametrize("mode", ["device", "torch"])
def test_one_process_sees_every_training_sample_once_per_epoch(mode):
    split = index_split(300)
    loader = make_loader(mode, split)
    orders = []
    for epoch in (1, 2):
        L.set_epoch(loader, epoch)
        seen = [i for x, _ in loader for i in decode(x)]
        assert sorted(seen) == list(range(300))
        orders.append(seen)
    assert orders[0] != orders[1]  # reshuffled each epoch


@pytest.mark.parametrize("mode", ["device", "torch"])
def test_ddp_shards_are_disjoint_equal_and_drop_fewer_than_world(mode):
    n, world = 101, 3
    split = index_split(n)
    shards, steps = [], []
    for rank in range(world):
        loader = make_loader(mode, split, rank=rank, world=world, batch=5)
        L.set_epoch(loader, 4)
        seen = [i for x, _ in loader for i in decode(x)]
        shards.append(seen)
        steps.append(len(loader))
    flat = [i for s in shards for i in s]
    assert len(flat) == len(set(flat))                 # each sample at most once
    assert n - len(flat) <= world - 1                  # at most world-1 dropped
    assert len(set(steps)) == 1 and len({len(s) for s in shards}) == 1


def test_num_workers_two_really_runs_two_worker_processes():
    split = index_split(200)
    cfg = DataConfig(loader="torch", augment=False, num_workers=2)
    bundle = D.DataBundle(split, split, split, 1, np.zeros(2, np.float32), np.ones(2, np.float32))
    loader = L.torch_loader(cfg, bundle, split, batch_size=4, train=True, seed=0)
    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    it = iter(loader)
    next(it)
    workers = {p.pid for p in me.children(recursive=True)} - before
    assert len(workers) == 2
    del it


def test_augmentation_statistics():
    n, pad = 4000, 4
    split = D.Split(np.full((n, 1, 8, 8), 200, np.uint8), np.zeros(n, np.int64))
    loader = L.DeviceLoader(split, batch_size=n, device=torch.device("cpu"), scale=torch.ones(1),
                            shift=torch.zeros(1), out_dtype=torch.float32, train=True, augment=True,
                            padding=pad, flip=True, seed=0)
    captured = {}
    real = L.kernels.augment

    def spy(images, offsets, flips, *a, **k):
        captured.update(offsets=offsets.clone(), flips=flips.clone())
        return real(images, offsets, flips, *a, **k)
    L.kernels.augment = spy
    try:
        next(iter(loader))
    finally:
        L.kernels.augment = real
    off, fl = captured["offsets"], captured["flips"]
    assert 0.45 < fl.float().mean() < 0.55
    assert off.min() == 0 and off.max() == 2 * pad and off.float().mean().sub(pad).abs() < 0.2


def test_normalised_batches_have_zero_mean_unit_std(tmp_path):
    cfg = DataConfig(dataset="digits", cache_dir=str(tmp_path))
    d = D.load_data(cfg)
    scale, shift = d.scale_shift
    loader = L.DeviceLoader(d.train, batch_size=len(d.train), device=torch.device("cpu"), scale=scale, shift=shift,
                            out_dtype=torch.float32, train=False, augment=False, padding=1, flip=False, seed=0)
    x, _ = next(iter(loader))
    assert abs(float(x.mean())) < 1e-3 and abs(float(x.std()) - 1) < 1e-2


def plain_augment(images, offsets, flips, scale, shift, padding):
    """The augmentation written sample by sample, pixel by pixel."""
    n, c, h, w = images.shape
    out = torch.empty(n, c, h, w)
    for i in range(n):
        for ch in range(c):
            for y in range(h):
                for x in range(w):
                    xs = w - 1 - x if flips[i] else x
                    sy, sx = y + int(offsets[i, 0]) - padding, xs + int(offsets[i, 1]) - padding
                    v = float(images[i, ch, sy, sx]) if 0 <= sy < h and 0 <= sx < w else 0.0
                    out[i, ch, y, x] = torch.tensor(v, dtype=torch.float32) * scale[ch] + shift[ch]
    return out


@pytest.mark.parametrize("padding", [0, 2, 4])
def test_augment_equals_a_plain_per_sample_loop(padding):
    g = torch.Generator().manual_seed(padding)
    imgs = torch.randint(0, 256, (5, 3, 6, 7), dtype=torch.uint8, generator=g)
    off = torch.randint(0, 2 * padding + 1, (5, 2), generator=g)
    fl = torch.tensor([True, False, True, True, False])
    scale, shift = torch.tensor([0.02, 0.5, 1.3]), torch.tensor([-1.0, 0.25, 3.0])
    got = augment_torch(imgs, off, fl, scale, shift, torch.float32, padding)
    assert got.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(got, plain_augment(imgs, off, fl, scale, shift, padding))
    half = augment_torch(imgs, off, fl, scale, shift, torch.bfloat16, padding)
    assert half.dtype == torch.bfloat16 and torch.equal(half, got.to(torch.bfloat16))


BUILD = """
import sys
from trainables.data import loaders as L, sources as D
from trainables.config import DataConfig
D.load_arrays(DataConfig(dataset="digits", cache_dir=sys.argv[1]))
"""


def test_two_processes_building_one_cache_leave_one_valid_file(tmp_path):
    cache = tmp_path / "cache"
    procs = [subprocess.Popen([sys.executable, "-c", BUILD, str(cache)]) for _ in range(2)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    assert sorted(os.listdir(cache)) == ["digits.h5"]
    arrays = D.load_arrays(DataConfig(dataset="digits", cache_dir=str(cache)))
    assert arrays["train_x"].shape[1:] == (1, 8, 8) and len(arrays["train_y"]) + len(arrays["test_y"]) == 1797


def test_loader_settings_refused_in_device_mode():
    from trainables.config import TrainConfig, problems_of
    p = problems_of(TrainConfig(loader="device", num_workers=2, pin_memory=True), has_gpu=False)
    assert any("num_workers" in m and "loader='torch'" in m for m in p)
    assert any("pin_memory" in m for m in p)


def test_torch_loader_trains_in_the_loop_and_reports_test_accuracy(tmp_path):
    from trainables.loop import train_loop
    from trainables.runtime.session import PlainSession
    s = PlainSession("cpu")
    m = train_loop({"dataset": "digits", "cache_dir": str(tmp_path), "loader": "torch", "epochs": 2,
                    "flip": False, "crop_padding": 1, "eval_test": True, "precomputed_augment": 2}, s)
    assert m["status"] == "ok" and 0 <= m["test_acc"] <= 1 and m["val_acc"] > 0.5


def test_resident_prepadded_path_equals_the_batch_path():
    g = torch.Generator().manual_seed(7)
    data = torch.randint(0, 256, (20, 3, 6, 5), dtype=torch.uint8, generator=g)
    idx = torch.tensor([3, 17, 0, 3, 9])
    off = torch.randint(0, 5, (5, 2), generator=g)
    fl = torch.tensor([False, True, True, False, True])
    scale, shift = torch.tensor([0.1, 0.2, 0.3]), torch.tensor([1.0, -1.0, 0.5])
    padded = torch.nn.functional.pad(data, (2, 2, 2, 2))
    want = augment_torch(data[idx], off, fl, scale, shift, torch.float32, 2)
    got = augment_torch(padded, off, fl, scale, shift, torch.float32, 2, index=idx, prepadded=True)
    assert torch.equal(got, want)


def test_the_cache_reads_while_another_process_holds_a_lock_on_it(tmp_path):
    # On a network filesystem HDF5's file locks fail or wait; a held exclusive lock stands in
    # for that here: with locking on, h5py refuses to open the file.
    from trainables.config import DataConfig
    cfg = DataConfig(dataset="digits", cache_dir=str(tmp_path))
    first = D.load_arrays(cfg)
    path = D.cache_path(cfg)
    mtime = path.stat().st_mtime_ns
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, sys, time\n"
        f"f = open({str(path)!r}, 'rb+')\nfcntl.flock(f, fcntl.LOCK_EX)\nprint('locked', flush=True)\ntime.sleep(60)\n")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        import h5py
        with pytest.raises(OSError):
            h5py.File(path, "r", locking=True).close()         # what a locking reader meets
        again = D.load_arrays(cfg)                               # the cache is read, not rebuilt
        assert path.stat().st_mtime_ns == mtime and all(np.array_equal(first[k], again[k]) for k in first)
    finally:
        holder.kill()
        holder.wait()
