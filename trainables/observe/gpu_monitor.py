"""GPU metrics per epoch: NVML utilisation, memory and power from a background sampler, and
torch.cuda's peak allocated and reserved memory.

NVML numbers GPUs physically while Ray sets CUDA_VISIBLE_DEVICES for each trial, so the
trial's device is found by UUID, never by index.  Without NVML (the `pynvml` module of
nvidia-ml-py), without a GPU, or when NVML fails, the NVML figures are left out and nothing
raises: monitoring never ends a trial.
"""
from __future__ import annotations

import logging
import threading
from typing import Any

import torch

log = logging.getLogger(__name__)
GIB = 1024 ** 3


def device_uuid(device: torch.device) -> str | None:
    """The CUDA device's UUID as NVML writes it (GPU-xxxxxxxx-...), else None."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    try:
        uuid = str(torch.cuda.get_device_properties(device).uuid)
    except Exception:  # noqa: BLE001 - an old driver without UUIDs: no NVML figures
        return None
    return uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def nvml_handle(nvml, uuid: str):
    """The NVML handle of the GPU whose UUID is `uuid` (None when no GPU matches)."""
    for i in range(nvml.nvmlDeviceGetCount()):
        handle = nvml.nvmlDeviceGetHandleByIndex(i)
        if _text(nvml.nvmlDeviceGetUUID(handle)).lower() == uuid.lower():
            return handle
    return None


class GpuMonitor:
    """Samples the trial's GPU every `interval_s` on a daemon thread; `epoch_metrics()` gives the
    figures since the last call: gpu_util (mean %), gpu_mem_peak_gib and gpu_mem_total_gib
    (NVML), gpu_power_w (mean), cuda_peak_allocated_gib and cuda_peak_reserved_gib (torch)."""

    def __init__(self, device: torch.device, interval_s: float = 0.5, nvml=None, uuid: str | None = None):
        self.device, self.interval_s = device, interval_s
        self.cuda = device.type == "cuda" and torch.cuda.is_available()
        self._samples: list[tuple[float, float, float]] = []   # utilisation %, memory used, power W
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.thread = None
        self.nvml, self.handle, self.total = None, None, 0.0
        uuid = uuid or device_uuid(device)
        if uuid is None:
            return
        try:
            if nvml is None:
                import pynvml
                nvml = pynvml
            nvml.nvmlInit()
            self.handle = nvml_handle(nvml, uuid)
            if self.handle is None:
                log.warning("no NVML device has UUID %s: no GPU utilisation figures", uuid)
                return
            self.nvml = nvml
            self.total = float(nvml.nvmlDeviceGetMemoryInfo(self.handle).total)
        except Exception as e:  # noqa: BLE001 - no NVML library, no driver: no figures, no failure
            log.info("NVML unavailable (%s): no GPU utilisation figures", e)
            self.nvml = self.handle = None
            return
        self.thread = threading.Thread(target=self._run, name="gpu-monitor", daemon=True)
        self.thread.start()

    def sample(self) -> None:
        n, h = self.nvml, self.handle
        if n is None:
            return
        try:
            util = float(n.nvmlDeviceGetUtilizationRates(h).gpu)
            used = float(n.nvmlDeviceGetMemoryInfo(h).used)
            try:
                power = n.nvmlDeviceGetPowerUsage(h) / 1000.0
            except Exception:  # noqa: BLE001 - some GPUs do not report power
                power = float("nan")
        except Exception as e:  # noqa: BLE001
            log.info("NVML sample failed (%s): sampling stops", e)
            self._stop.set()
            return
        with self._lock:
            self._samples.append((util, used, power))

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval_s)

    def restart(self) -> None:
        """Forget what was sampled so far (the next figures cover what follows)."""
        with self._lock:
            self._samples = []
        if self.cuda:
            torch.cuda.reset_peak_memory_stats(self.device)

    def epoch_metrics(self) -> dict[str, float]:
        out: dict[str, float] = {}
        with self._lock:
            samples, self._samples = self._samples, []
        if self.handle is not None and samples:
            out["gpu_util"] = sum(s[0] for s in samples) / len(samples)
            out["gpu_mem_peak_gib"] = max(s[1] for s in samples) / GIB
            out["gpu_mem_total_gib"] = self.total / GIB
            powers = [s[2] for s in samples if s[2] == s[2]]
            if powers:
                out["gpu_power_w"] = sum(powers) / len(powers)
        if self.cuda:
            out["cuda_peak_allocated_gib"] = torch.cuda.max_memory_allocated(self.device) / GIB
            out["cuda_peak_reserved_gib"] = torch.cuda.max_memory_reserved(self.device) / GIB
            torch.cuda.reset_peak_memory_stats(self.device)
        return out

    def close(self) -> None:
        self._stop.set()
        if self.thread is not None:
            self.thread.join(timeout=5)
            self.thread = None
        if self.nvml is not None:
            try:
                self.nvml.nvmlShutdown()
            except Exception:  # noqa: BLE001, S110 - NVML's own shutdown: nothing left to do
                pass
            self.nvml = None
