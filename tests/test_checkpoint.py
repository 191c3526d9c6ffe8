import os

import pytest
import torch

from trainables import checkpoint as ck
from trainables.loop import train_loop
from trainables.session import PlainSession

from conftest import digits_config


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
    with pytest.raises(ck.CheckpointError, match="not a readable tuner checkpoint"):
        ck.load(path)


class Payload:
    def __reduce__(self):
        return (os.system, ("touch " + os.environ["TUNER_PWNED"],))


def test_pickle_payload_is_refused_and_never_runs(tmp_path, monkeypatch):
    marker = tmp_path / "pwned"
    monkeypatch.setenv("TUNER_PWNED", str(marker))
    path = tmp_path / "evil.pt"
    torch.save({"format": ck.FORMAT, "model": {}, "x": Payload()}, path)
    with pytest.raises(ck.CheckpointError):
        ck.load(path)
    assert not marker.exists()


def test_foreign_file_is_refused(tmp_path):
    path = tmp_path / "other.pt"
    torch.save({"weights": torch.ones(1)}, path)
    with pytest.raises(ck.CheckpointError, match="not a tuner checkpoint"):
        ck.load(path)
    (tmp_path / "text.pt").write_text("hello")
    with pytest.raises(ck.CheckpointError):
        ck.load(tmp_path / "text.pt")
