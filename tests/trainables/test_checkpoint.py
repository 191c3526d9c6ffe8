import json
import os
from pathlib import Path

import pytest
import torch
from conftest import digits_config

from trainables.loop import train_loop
from trainables.runtime import checkpoint as ck
from trainables.runtime.session import PlainSession


def test_round_trip_gives_bit_identical_next_epoch(cache_dir, tmp_path):
    cfg = digits_config(cache_dir, epochs=2, max_steps_per_epoch=4, augment=True, dropout=0.3)
    full = PlainSession("cpu", storage=str(tmp_path / "a"))
    train_loop(cfg, full)
    resumed = PlainSession("cpu", resume_from=full.checkpoints[0], storage=str(tmp_path / "b"))
    train_loop(cfg, resumed)
    assert len(resumed.reports) == 1 and resumed.reports[0]["epoch"] == 2
    a = ck.load(full.checkpoints[1])["model"]
    b = ck.load(resumed.checkpoints[0])["model"]
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    assert full.reports[1]["train_loss"] == resumed.reports[0]["train_loss"]


def test_payload_carries_config_version_and_rng_as_tensors(tmp_path):
    path = ck.save(tmp_path / "c.pt", {"model": {"w": torch.ones(2)}, "rng": ck.rng_state(),
                                       "config": {"lr": 0.1}})
    p = ck.load(path)
    assert p["config"] == {"lr": 0.1} and p["version"] and p["git"]
    assert isinstance(p["rng"]["torch"], torch.Tensor)
    assert not any(n.endswith(".tmp") for n in os.listdir(tmp_path))


def test_module_prefixed_state_dicts_load(tmp_path):
    path = ck.save(tmp_path / "c.pt", {"model": {"module.fc.weight": torch.ones(2)}})
    assert list(ck.load(path)["model"]) == ["fc.weight"]
    torch.save({"module.fc.weight": torch.zeros(3)}, tmp_path / "sd.pt")
    assert list(ck.read_state_dict(tmp_path / "sd.pt")) == ["fc.weight"]


def test_cuda_saved_tensors_map_to_cpu(tmp_path):
    if not torch.cuda.is_available():
        # Without a GPU, check the map_location path the other way round: CPU -> meta.
        path = ck.save(tmp_path / "c.pt", {"model": {"w": torch.ones(2)}})
        assert ck.load(path, map_location="meta")["model"]["w"].device.type == "meta"
        return
    path = ck.save(tmp_path / "c.pt", {"model": {"w": torch.ones(2, device="cuda")}})
    assert ck.load(path, map_location="cpu")["model"]["w"].device.type == "cpu"


def test_truncated_checkpoint_is_refused(tmp_path):
    path = ck.save(tmp_path / "c.pt", {"model": {"w": torch.ones(1000)}})
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ck.CheckpointError, match="corrupt.*truncated"):
        ck.load(path)


def test_one_flipped_byte_is_detected(tmp_path):
    path = ck.save(tmp_path / "c.pt", {"model": {"w": torch.ones(1000)}})
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01          # inside the tensor data: torch.load alone would not notice
    path.write_bytes(bytes(data))
    with pytest.raises(ck.CheckpointError, match="SHA-256 differs"):
        ck.load(path)


def test_a_failed_write_leaves_the_previous_checkpoint_and_manifest(tmp_path, monkeypatch):
    import errno
    path = ck.save(tmp_path / "c.pt", {"model": {"w": torch.ones(10)}, "epoch": 1})

    def full(obj, f):
        f.write(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(ck.torch, "save", full)
    with pytest.raises(OSError):
        ck.save(path, {"model": {"w": torch.zeros(10)}, "epoch": 2})
    monkeypatch.undo()
    assert ck.load(path)["epoch"] == 1 and not list(tmp_path.glob(".*.tmp"))


class Payload:
    def __reduce__(self):
        return (os.system, ("touch " + os.environ["TUNER_PWNED"],))


def test_pickle_payload_is_refused_and_never_runs(tmp_path, monkeypatch):
    marker = tmp_path / "pwned"
    monkeypatch.setenv("TUNER_PWNED", str(marker))
    path = tmp_path / "evil.pt"
    torch.save({"format": ck.FORMAT, "model": {}, "x": Payload()}, path)
    with pytest.raises(ck.CheckpointError, match="no checksum manifest"):
        ck.load(path)
    # Even with a matching manifest planted beside it, the payload is refused unread.
    ck.manifest_path(path).write_text(json.dumps({"file": path.name, "bytes": path.stat().st_size,
                                                  "sha256": ck.sha256_of(path)}))
    with pytest.raises(ck.CheckpointError, match="not a readable tuner checkpoint"):
        ck.load(path)
    assert not marker.exists()


def test_foreign_file_is_refused(tmp_path):
    path = tmp_path / "other.pt"
    torch.save({"weights": torch.ones(1)}, path)
    with pytest.raises(ck.CheckpointError, match="no checksum manifest"):
        ck.load(path)
    (tmp_path / "text.pt").write_text("hello")
    with pytest.raises(ck.CheckpointError):
        ck.load(tmp_path / "text.pt")


def test_a_checkpoint_write_failing_mid_run_ends_the_trial_and_keeps_the_previous(tmp_path, monkeypatch, cache_dir):
    import errno
    real, calls = ck.save, []

    def disk_full_on_second(path, payload):
        calls.append(path)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, payload)
    monkeypatch.setattr(ck, "save", disk_full_on_second)
    session = PlainSession("cpu", storage=str(tmp_path / "trial"))
    last = train_loop(digits_config(cache_dir, epochs=3, max_steps_per_epoch=2), session)
    assert last["status"] == "storage_error" and "No space left" in last["reason"] and last["epoch"] == 2
    assert [r["epoch"] for r in session.reports] == [1, 2] and len(session.checkpoints) == 1
    assert ck.load(session.checkpoints[0])["epoch"] == 1   # the previous checkpoint is intact


def _flip_a_byte(folder: str) -> None:
    path = os.path.join(folder, ck.FILENAME)
    data = bytearray(Path(path).read_bytes())
    data[len(data) // 2] ^= 0x01
    Path(path).write_bytes(bytes(data))


def test_a_corrupt_latest_checkpoint_falls_back_to_the_previous_one(cache_dir, tmp_path):
    cfg = digits_config(cache_dir, epochs=3, max_steps_per_epoch=2)
    first = PlainSession("cpu", storage=str(tmp_path / "trial"))
    train_loop(cfg, first)
    _flip_a_byte(first.checkpoints[2])           # the latest (epoch 3) is corrupt
    resumed = PlainSession("cpu", resume_from=first.checkpoints[2], storage=str(tmp_path / "again"))
    train_loop(cfg.replace(epochs=4), resumed)
    # Epoch 2's checkpoint was the newest intact one: epochs 3 and 4 are trained from it, with
    # the weights it saved.
    assert [r["epoch"] for r in resumed.reports] == [3, 4]
    assert resumed.reports[0]["resumed_from_epoch"] == 2
    assert resumed.reports[0]["restored_weights_sha256"] == ck.load(first.checkpoints[1])["weights_sha256"]


def test_no_intact_checkpoint_fails_clearly_naming_each(cache_dir, tmp_path):
    cfg = digits_config(cache_dir, epochs=2, max_steps_per_epoch=2)
    first = PlainSession("cpu", storage=str(tmp_path / "trial"))
    train_loop(cfg, first)
    for folder in first.checkpoints:
        _flip_a_byte(folder)
    with pytest.raises(ck.CheckpointError, match="no intact checkpoint to resume from") as err:
        train_loop(cfg.replace(epochs=3), PlainSession("cpu", resume_from=first.checkpoints[1]))
    assert all(folder in str(err.value) for folder in first.checkpoints)


def test_kept_checkpoints_are_listed_newest_first(tmp_path):
    from trainables.runtime.session import kept_beside
    for name in ("checkpoint_000002", "checkpoint_000010", "checkpoint_000009", "other"):
        (tmp_path / "tune" / name).mkdir(parents=True)
    assert [os.path.basename(p) for p in kept_beside(tmp_path / "tune" / "checkpoint_000010")] == \
        ["checkpoint_000009", "checkpoint_000002"]
    for name in ("checkpoint_2026-12-03_01-02-03.000001", "checkpoint_2026-12-03_01-02-09.000002"):
        (tmp_path / "train" / name).mkdir(parents=True)
    (tmp_path / "train" / "checkpoint_manager_snapshot.json").write_text("{}")
    assert [os.path.basename(p) for p in kept_beside(tmp_path / "train" / "checkpoint_2026-12-03_01-02-09.000002")] \
        == ["checkpoint_2026-12-03_01-02-03.000001"]
    assert kept_beside(None) == [] and kept_beside(tmp_path / "gone") == []


def test_ranks_that_resumed_from_different_epochs_stop_with_a_clear_error(monkeypatch):
    from types import SimpleNamespace

    from trainables import loop
    # What the all-reduce gives when rank 0 resumed at epoch 3 and rank 1 at epoch 2.
    monkeypatch.setattr(loop, "_all_reduce", lambda values, device: [3.0 + 2.0, 9.0 + 4.0])
    trial = SimpleNamespace(start_epoch=3, device="cpu", session=SimpleNamespace(world_size=2, rank=0))
    with pytest.raises(ck.CheckpointError, match="resumed from different checkpoints"):
        loop.agree_on_start(trial)
    monkeypatch.setattr(loop, "_all_reduce", lambda values, device: [3.0 + 3.0, 9.0 + 9.0])
    loop.agree_on_start(trial)   # both at epoch 3: goes on


def test_a_ray_checkpoint_on_a_local_disk_is_read_in_place(tmp_path):
    from types import SimpleNamespace

    from trainables.runtime.session import local_folder
    assert local_folder(SimpleNamespace(path=str(tmp_path))) == str(tmp_path)
    copied = SimpleNamespace(path="s3://bucket/run/checkpoint_1", to_directory=lambda: "/tmp/copy")
    assert local_folder(copied) == "/tmp/copy" and local_folder(None) is None
