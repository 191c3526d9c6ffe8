import json
import math

import fault_plugin
import pytest
import torch
from conftest import digits_config

from trainables.loop import train_loop
from trainables.runtime.session import PlainSession
from trainables.training.step import TrainStep

REQUIRED = {"epoch", "status", "train_loss", "val_loss", "val_acc", "lr", "samples_per_s", "epoch_s", "sparsity"}


def test_three_epochs_on_digits_reach_90_percent(cache_dir):
    s = PlainSession("cpu")
    m = train_loop(digits_config(cache_dir, epochs=3, width=1.0), s)
    assert [r["epoch"] for r in s.reports] == [1, 2, 3]
    assert all(REQUIRED <= set(r) and r["status"] == "ok" for r in s.reports)
    assert m["val_acc"] >= 0.9, m


@pytest.mark.parametrize("optimizer,scheduler", [("adamw", "onecycle"), ("sgd", "plateau"), ("sgd", "none")])
def test_optimizers_and_schedules_run(cache_dir, optimizer, scheduler):
    s = PlainSession("cpu")
    lr = 0.003 if optimizer == "adamw" else 0.05
    train_loop(digits_config(cache_dir, epochs=2, optimizer=optimizer, scheduler=scheduler, lr=lr,
                             warmup_epochs=0.5 if scheduler == "none" else 0, max_steps_per_epoch=5), s)
    assert all(r["status"] == "ok" and math.isfinite(r["val_loss"]) for r in s.reports)


def test_pruning_in_the_loop_reports_sparsity(cache_dir):
    s = PlainSession("cpu")
    train_loop(digits_config(cache_dir, epochs=3, prune_amount=0.5, prune_start_epoch=2, prune_end_epoch=3,
                             max_steps_per_epoch=4), s)
    assert [round(r["sparsity"], 2) for r in s.reports] == [0.0, 0.25, 0.5]


def test_divergence_ends_the_trial_with_a_finite_metric(cache_dir, monkeypatch):
    for k, v in fault_plugin.env(inject="nan_loss").items():
        monkeypatch.setenv(k, v)            # the test plugin's NaN loss (trainables/runtime/plugin.py)
    s = PlainSession("cpu")
    m = train_loop(digits_config(cache_dir, epochs=2, max_nonfinite_steps=3), s)
    assert m["status"] == "diverged" and s.reports[-1]["status"] == "diverged"
    assert all(math.isfinite(v) for v in (m["val_acc"], m["val_loss"], m["train_loss"]))


def test_out_of_memory_ends_the_trial_as_infeasible(cache_dir, monkeypatch):
    def oom(self, group):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
    monkeypatch.setattr(TrainStep, "__call__", oom)
    s = PlainSession("cpu")
    m = train_loop(digits_config(cache_dir, epochs=2), s)
    assert m["status"] == "infeasible" and len(s.reports) == 1
    assert math.isfinite(m["val_loss"]) and m["val_acc"] == 0.0


def test_profile_writes_a_chrome_trace_of_the_active_steps_for_one_trial_only(cache_dir, tmp_path):
    from trainables.observe import profiling
    folder = tmp_path / "profiles"
    cfg = digits_config(cache_dir, epochs=2, max_steps_per_epoch=3, profile=True, profile_dir=str(folder))
    train_loop(cfg, PlainSession("cpu"))   # 6 steps: the schedule (1 wait, 1 warmup, 3 active) spans epochs
    events = json.loads((folder / profiling.TRACE).read_text())["traceEvents"]
    names = {e.get("name", "") for e in events}
    steps = sorted(n for n in names if n.startswith("ProfilerStep#"))
    assert len(steps) == profiling.ACTIVE, steps   # the active steps, not the wait/warmup ones
    assert any(n.startswith("aten::") for n in names) and "aten::" in (folder / profiling.TABLE).read_text()
    # The folder is claimed: another trial of the same experiment does not profile again.
    stamp = (folder / profiling.TRACE).stat().st_mtime_ns
    train_loop(cfg, PlainSession("cpu"))
    assert (folder / profiling.TRACE).stat().st_mtime_ns == stamp


def test_model_histograms_and_graph_are_written_only_when_asked(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from trainables.loop import train_loop
    from trainables.runtime.session import PlainSession
    board = tmp_path / "model"
    m = train_loop(digits_config(tmp_path / "cache", epochs=2, tb_histograms=True, tb_graph=True, tb_dir=str(board)),
                   PlainSession("cpu"))
    assert m["status"] == "ok"
    acc = EventAccumulator(str(board), size_guidance={"histograms": 0})
    acc.Reload()
    tags = acc.Tags()
    assert tags["graph"] is True
    assert tags["histograms"] and all(name.endswith(("weight", "bias")) for name in tags["histograms"])
    assert [e.step for e in acc.Histograms(tags["histograms"][0])] == [1, 2]
    train_loop(digits_config(tmp_path / "cache", epochs=1, tb_dir=str(tmp_path / "off")), PlainSession("cpu"))
    assert not (tmp_path / "off").exists()                      # off by default


def test_an_epoch_reads_the_host_once_per_sync_every_steps_and_a_fixed_number_of_times_more(cache_dir, host_reads):
    """The loop around the step does not wait for the device either: an epoch with twice the
    steps (half the batch) reads the host only sync_every-many times more (the CPU stand-in for
    the GPU's sync count; tests/trainables/conftest.py says what is counted)."""
    def reads(batch: int) -> tuple[int, int]:
        from trainables.loop import _Trial
        trial = _Trial(digits_config(cache_dir, micro_batch_size=batch, sync_every=4, optimizer="sgd"),
                       PlainSession("cpu"))
        host_reads.clear()
        trial.train_epoch(1)
        return len(host_reads), trial.steps_per_epoch
    few, few_steps = reads(64)
    many, many_steps = reads(32)
    assert many_steps >= 2 * few_steps - 1
    assert many - few <= (many_steps - few_steps) // 4 + 1, (few, many, few_steps, many_steps)
