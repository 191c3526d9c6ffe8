"""Four trials at once on one host: they build the same data cache and write checkpoints
into one folder at the same time, and nothing they wrote is corrupt afterwards."""
import hashlib
import multiprocessing as mp

import pytest
import torch


def _trial(index: int, cache_dir: str, out_dir: str, barrier, results) -> None:
    from trainables.config import DataConfig
    from trainables.data.sources import load_arrays
    from trainables.runtime import checkpoint as ck
    barrier.wait(timeout=60)                       # all four start building the cache together
    arrays = load_arrays(DataConfig(dataset="digits", cache_dir=cache_dir))
    digest = hashlib.sha256(b"".join(arrays[k].tobytes() for k in sorted(arrays))).hexdigest()
    for epoch in range(1, 6):
        ck.save(f"{out_dir}/trial{index}/checkpoint.pt",
                {"model": {"w": torch.full((20000,), float(index * 100 + epoch))}, "epoch": epoch})
    results.put((index, digest))


@pytest.mark.timeout(180)
def test_four_trials_build_one_cache_and_write_checkpoints_at_once(tmp_path):
    from trainables.config import DataConfig
    from trainables.data.sources import cache_path, load_arrays
    from trainables.runtime import checkpoint as ck
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(4), ctx.Queue()
    cache = str(tmp_path / "cache")
    procs = [ctx.Process(target=_trial, args=(i, cache, str(tmp_path / "ckpt"), barrier, results)) for i in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=150)
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    digests = dict(results.get(timeout=5) for _ in range(4))
    assert len(set(digests.values())) == 1, digests          # every trial saw the same data
    arrays = load_arrays(DataConfig(dataset="digits", cache_dir=cache))   # the cache left behind reads back
    again = hashlib.sha256(b"".join(arrays[k].tobytes() for k in sorted(arrays))).hexdigest()
    assert again == digests[0] and cache_path(DataConfig(dataset="digits", cache_dir=cache)).is_file()
    assert not list((tmp_path / "cache").glob(".*.tmp"))
    for i in range(4):                                         # each trial's last checkpoint, intact
        payload = ck.load(tmp_path / "ckpt" / f"trial{i}" / "checkpoint.pt")
        assert payload["epoch"] == 5 and torch.equal(payload["model"]["w"], torch.full((20000,), float(i * 100 + 5)))
    assert not list((tmp_path / "ckpt").rglob(".*.tmp"))
