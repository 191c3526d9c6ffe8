"""GPU metrics: the trial's GPU found by UUID among NVML's, and silence without NVML or a GPU."""
import sys
from types import SimpleNamespace

import pytest
import torch

from trainables.observe.gpu_monitor import GIB, GpuMonitor


class FakeNvml:
    """Two GPUs as NVML numbers them physically; the trial's is the second one."""

    def __init__(self):
        self.gpus = [
            {"uuid": b"GPU-aaaaaaaa-0000", "util": 5, "used": 1 * GIB, "total": 80 * GIB, "power": 60_000},
            {"uuid": "GPU-bbbbbbbb-1111", "util": 90, "used": 30 * GIB, "total": 80 * GIB, "power": 350_000},
        ]
        self.shut = False

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        self.shut = True

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetUUID(self, h):
        return self.gpus[h]["uuid"]

    def nvmlDeviceGetUtilizationRates(self, h):
        return SimpleNamespace(gpu=self.gpus[h]["util"], memory=0)

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(used=self.gpus[h]["used"], total=self.gpus[h]["total"], free=0)

    def nvmlDeviceGetPowerUsage(self, h):
        return self.gpus[h]["power"]


def test_the_trials_gpu_is_found_by_uuid_and_reported_per_epoch():
    nvml = FakeNvml()
    mon = GpuMonitor(torch.device("cpu"), interval_s=3600, nvml=nvml, uuid="GPU-bbbbbbbb-1111")
    try:
        mon.restart()
        mon.sample()
        nvml.gpus[1].update(util=70, used=40 * GIB, power=250_000)
        mon.sample()
        m = mon.epoch_metrics()
    finally:
        mon.close()
    assert m == pytest.approx({"gpu_util": 80.0, "gpu_mem_peak_gib": 40.0, "gpu_mem_total_gib": 80.0,
                               "gpu_power_w": 300.0})
    assert nvml.shut
    assert GpuMonitor(torch.device("cpu"), nvml=nvml, uuid="GPU-cccc").epoch_metrics() == {}   # not ours: nothing


def test_without_nvml_nothing_is_reported_and_nothing_fails(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)       # `import pynvml` raises ImportError
    mon = GpuMonitor(torch.device("cpu"), uuid="GPU-bbbbbbbb-1111")
    assert mon.epoch_metrics() == {} and mon.handle is None
    mon.close()


def test_an_nvml_that_fails_mid_run_stops_sampling_quietly():
    nvml = FakeNvml()
    mon = GpuMonitor(torch.device("cpu"), interval_s=3600, nvml=nvml, uuid="GPU-bbbbbbbb-1111")
    nvml.nvmlDeviceGetUtilizationRates = lambda h: (_ for _ in ()).throw(RuntimeError("GPU is lost"))
    mon.restart()
    mon.sample()
    assert mon.epoch_metrics() == {}
    mon.close()


def test_a_cpu_trial_reports_no_gpu_figures():
    mon = GpuMonitor(torch.device("cpu"))
    assert mon.epoch_metrics() == {} and mon.thread is None
    mon.close()
