"""A DDP trial's ranks as processes of the trial (trainables/runtime/ranks.py), without Ray: the same
train_loop on two gloo ranks, rank 0's reports only, restarts from the latest checkpoint, and
no rank outliving the process that started it."""
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path

import fault_plugin
import pytest
from conftest import digits_config

from trainables.runtime import checkpoint as ckpt_io
from trainables.runtime.ranks import RankError, run_ranks
from trainables.runtime.session import PlainSession


def _job(cache_dir, **over) -> dict:
    cfg = digits_config(cache_dir, **{"workers": 2, "micro_batch_size": 32, "max_steps_per_epoch": 3, **over})
    return {"config": asdict(cfg), "device": "cpu", "threads": 1}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (ended, not yet reaped by its parent) counts as gone.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _ppid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[1])


def _wait_for(pred, timeout=60.0, what=""):
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.mark.timeout(120)
def test_two_ranks_train_and_only_rank_zero_reports_with_a_checkpoint_each_epoch(cache_dir, tmp_path, monkeypatch):
    import tempfile
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))   # where the group's store goes
    session = PlainSession("cpu", storage=str(tmp_path / "trial"))
    run_ranks(2, _job(cache_dir, epochs=2), session, restarts=0)
    assert [r["epoch"] for r in session.reports] == [1, 2]            # one report per epoch, not one per rank
    assert all(r["global_batch_size"] == 64 for r in session.reports)  # 32 per rank x 2 ranks
    assert [ckpt_io.load(Path(c) / "checkpoint.pt")["epoch"] for c in session.checkpoints] == [1, 2]
    assert not list((tmp_path / "tmp").glob("tuner-ranks-*"))          # the store is removed


@pytest.mark.timeout(180)
def test_a_killed_rank_restarts_the_group_from_the_latest_checkpoint_until_the_budget_is_spent(cache_dir, tmp_path,
                                                                                             capfd, monkeypatch):
    faults = tmp_path / "faults"
    faults.mkdir()
    (faults / "hold").write_text("2")      # every start of the group waits before epoch 2
    for k, v in fault_plugin.env(dir=faults).items():
        monkeypatch.setenv(k, v)           # the ranks inherit it
    session = PlainSession("cpu", storage=str(tmp_path / "trial"))
    killed: list[int] = []

    def kill_rank_one_twice():
        for _ in range(2):
            _wait_for(lambda: (faults / "rank1.pid").exists() and int((faults / "rank1.pid").read_text()) not in killed
                      and len(session.reports) == 1, what="rank 1 of a new group, held before epoch 2")
            pid = int((faults / "rank1.pid").read_text())
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    killer = threading.Thread(target=kill_rank_one_twice, daemon=True)
    killer.start()
    with pytest.raises(RankError, match=r"rank 1 exited with code -9 .*restarted 1 time"):
        run_ranks(2, _job(cache_dir, epochs=3), session, restarts=1)
    killer.join(timeout=5)
    assert len(killed) == 2
    # The second group resumed from epoch 1's checkpoint (its rank 1 wrote a pid file only
    # after restoring) and was held again before epoch 2: epoch 1 was reported once.
    assert [r["epoch"] for r in session.reports] == [1]
    assert "restarting the 2 ranks from the latest checkpoint (1 of 1)" in capfd.readouterr().err
    rank0 = int((faults / "rank0.pid").read_text())
    _wait_for(lambda: not _alive(rank0), timeout=10, what="rank 0 of the failed group to end")


DRIVER = """
import sys
from dataclasses import asdict
sys.path.insert(0, {tests!r})
from conftest import digits_config
from trainables.runtime.ranks import run_ranks
from trainables.runtime.session import PlainSession
cfg = digits_config({cache!r}, workers=2, epochs=3, micro_batch_size=32, max_steps_per_epoch=3)
run_ranks(2, {{"config": asdict(cfg), "device": "cpu", "threads": 1}}, PlainSession("cpu"), restarts=0)
"""


@pytest.mark.timeout(120)
def test_the_ranks_end_when_the_process_that_started_them_is_killed(cache_dir, tmp_path):
    faults = tmp_path / "faults"
    faults.mkdir()
    (faults / "hold").write_text("2")
    code = DRIVER.format(tests=str(Path(__file__).resolve().parents[1]), cache=cache_dir, faults=str(faults))
    root = Path(__file__).resolve().parents[2]
    (tmp_path / "tmp").mkdir()
    driver = subprocess.Popen([sys.executable, "-c", code], cwd=root, start_new_session=True,
                              env={**os.environ, "TMPDIR": str(tmp_path / "tmp"), **fault_plugin.env(dir=faults)})
    try:
        _wait_for(lambda: all((faults / f"rank{r}.pid").exists() for r in (0, 1)), what="both ranks to start")
        ranks = [int((faults / f"rank{r}.pid").read_text()) for r in (0, 1)]
        assert all(_alive(p) for p in ranks)
        assert all(_ppid(p) == driver.pid for p in ranks)
        driver.kill()                       # SIGKILL: no finally, no atexit in the driver
        driver.wait()
        _wait_for(lambda: not any(_alive(p) for p in ranks), timeout=10, what="the ranks to die with their driver")
    finally:
        if driver.poll() is None:
            driver.kill()
        try:
            os.killpg(driver.pid, signal.SIGKILL)   # anything of its group left behind, by its id
        except ProcessLookupError:
            pass


@pytest.mark.timeout(60)
def test_a_one_worker_training_process_fails_with_its_own_error(cache_dir, tmp_path):
    # What a trial that trained in its own process would raise (the status and error file name it).
    from trainables.data.sources import DataError
    job = _job(cache_dir, workers=1, dataset="cifar10", data_root=str(tmp_path / "no-data"))
    with pytest.raises(DataError, match="CIFAR-10 not found") as raised:
        run_ranks(1, job, PlainSession("cpu"), restarts=0)
    assert any("raised in the training process" in n for n in raised.value.__notes__)
