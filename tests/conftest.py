"""Shared fixtures.  Triton kernels run under the interpreter on machines without CUDA;
Triton reads TRITON_INTERPRET when a kernel is decorated, so it is set before any
kernel module is imported."""
import os
import signal
import subprocess
import sys
import time
import urllib.request

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest
from ray_helpers import free_ports


@pytest.fixture
def cache_dir(tmp_path):
    return str(tmp_path / "cache")


def digits_config(cache_dir, **over):
    from trainables.config import TrainConfig
    base = {"dataset": "digits", "cache_dir": cache_dir, "epochs": 1, "micro_batch_size": 64, "lr": 0.05,
                "flip": False, "crop_padding": 1, "width": 0.5}
    base.update(over)
    return TrainConfig.from_dict(base)


S3_TEST_ENV = {"AWS_ACCESS_KEY_ID": "tuner-test", "AWS_SECRET_ACCESS_KEY": "tuner-test",
               "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}


@pytest.fixture(scope="module")
def s3_endpoint(tmp_path_factory):
    """host:port of a moto S3 server (an S3-compatible server in its own process group, ended
    through it): a module's buckets."""
    port = free_ports(1)[0]
    log = open(tmp_path_factory.mktemp("moto") / "server.log", "w")  # noqa: SIM115 - the server writes it until the end
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.time() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/moto-api/", timeout=2)
                break
            except OSError:
                assert proc.poll() is None and time.time() < deadline, "moto server did not start"
                time.sleep(0.2)
        yield f"127.0.0.1:{port}"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
        log.close()


def s3_uri(endpoint: str, bucket: str, path: str) -> str:
    return f"s3://{bucket}/{path}?endpoint_override={endpoint}&scheme=http&region=us-east-1"


def make_bucket(endpoint: str, bucket: str) -> None:
    from pyarrow.fs import S3FileSystem
    S3FileSystem(endpoint_override=endpoint, scheme="http", region="us-east-1",
                 allow_bucket_creation=True).create_dir(bucket)


@pytest.fixture(scope="session")
def ray_address(tmp_path_factory):
    """One local Ray for the whole test session (4 logical CPUs: a 2-worker DDP trial needs a
    driver plus one CPU per worker), shut down at the end."""
    import ray
    os.environ.setdefault("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.2")
    # The S3 test's server (moto, started by tests/integration/test_storage.py) takes any keys; trial
    # workers inherit these from this process.  Never a real account's, never the EC2 metadata.
    os.environ.update(S3_TEST_ENV)
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    # The tuning service's pointer to its registry (TUNER_HOME/service.json on the head), and a Ray
    # job's relative paths, stay in this session's temporary folder.
    os.environ["TUNER_HOME"] = str(tmp_path_factory.mktemp("tuner-home"))
    ctx = ray.init(address="local", num_cpus=4, include_dashboard=True, dashboard_host="127.0.0.1",
                   log_to_driver=False, runtime_env={"env_vars": {"RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.2"}})
    os.environ["TUNER_TEST_DASHBOARD_URL"] = ctx.dashboard_url or ""  # for the network-exposure test
    yield ctx.address_info["address"]
    ray.shutdown()


HOST_READS = ("item", "tolist", "__float__", "__int__", "__bool__", "__index__", "numpy", "cpu")


@pytest.fixture
def host_reads(monkeypatch):
    """Counts every read of a tensor's value by Python code, and every Python number written
    into a tensor element (`t[i] = 0.0`: on CUDA a copy from the host that waits for the GPU,
    which torch.cuda.set_sync_debug_mode reports; the GPU run counted 18 syncs in 16 steps: one
    such write per step and the two syncs)."""
    count = []
    for name in HOST_READS:
        real = getattr(torch.Tensor, name)

        def spy(self, *a, _real=real, **k):
            count.append(1)
            return _real(self, *a, **k)
        monkeypatch.setattr(torch.Tensor, name, spy)
    real_set = torch.Tensor.__setitem__

    def set_spy(self, index, value):
        if not isinstance(value, torch.Tensor):
            count.append(("write", index))
        return real_set(self, index, value)
    monkeypatch.setattr(torch.Tensor, "__setitem__", set_spy)
    return count
