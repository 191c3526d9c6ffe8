"""The launch configs in cluster/: Ray's own offline check exactly as `ray up` runs it, and the
project's rules (GPU resources declared, token shipped and enabled, pins equal pyproject's)."""
import copy
import re
from pathlib import Path

import pytest
import tomllib
import yaml

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "cluster"
RAY_UP_FILES = ["aws-gpu.yaml", "gcp-gpu.yaml", "onprem.yaml"]


def _pins() -> dict[str, str]:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    out = {}
    for d in deps:
        m = re.match(r"^([a-z-]+)(\[[^\]]*\])?==([\w.]+)", d)
        if m:
            out[m[1]] = m[3]
    return out


def _image() -> str:
    p = _pins()
    return f"REGISTRY/tuner:ray{p['ray']}-torch{p['torch']}"


def _load(name: str) -> dict:
    return yaml.safe_load((CLUSTER / name).read_text())


@pytest.mark.parametrize("name", RAY_UP_FILES)
def test_ray_up_file_passes_rays_own_check(name):
    from tuner import _compat
    _compat.validate_cluster_config(copy.deepcopy(_load(name)))   # what `ray up` does before launching


@pytest.mark.parametrize("name", RAY_UP_FILES)
def test_ray_up_file_ships_the_token_and_starts_every_node_with_it(name):
    cfg = _load(name)
    assert cfg["file_mounts"]["~/.ray/auth_token"] == "~/.ray/auth_token"
    for key in ("head_start_ray_commands", "worker_start_ray_commands"):
        start = [c for c in cfg[key] if "ray start" in c]
        assert start and all("RAY_AUTH_MODE=token ray start" in c for c in start), (key, start)
    head = next(c for c in cfg["head_start_ray_commands"] if "ray start" in c)
    assert "--dashboard-host=127.0.0.1" in head                    # never on a public address
    assert any("torch.cuda.is_available()" in c for c in cfg["worker_setup_commands"])
    assert cfg["docker"]["image"] == _image()


@pytest.mark.parametrize("name", ["aws-gpu.yaml", "gcp-gpu.yaml"])
def test_cloud_gpu_node_types_declare_gpus_and_accelerator_type(name):
    cfg = _load(name)
    types = cfg["available_node_types"]
    assert types[cfg["head_node_type"]]["resources"] == {"CPU": 0}
    gpu_types = {k: v for k, v in types.items() if k != cfg["head_node_type"]}
    assert len(gpu_types) >= 2
    for k, v in gpu_types.items():
        r = v["resources"]
        assert isinstance(r["GPU"], int) and r["GPU"] >= 1, (k, r)
        acc = [key for key in r if key.startswith("accelerator_type:")]
        assert len(acc) == 1 and r[acc[0]] == 1, (k, r)
        assert v["min_workers"] == 0, k                           # autoscales from nothing
    assert cfg["idle_timeout_minutes"] > 0


def test_dockerfile_pins_equal_pyproject():
    text = (CLUSTER / "Dockerfile").read_text()
    args = dict(re.findall(r"^ARG (\w+)=(\S+)$", text, re.MULTILINE))
    pins = _pins()
    assert args == {"RAY_VERSION": pins["ray"], "TORCH_VERSION": pins["torch"], "TORCHVISION_VERSION": pins["torchvision"]}
    assert "FROM rayproject/ray:${RAY_VERSION}-py311-gpu" in text
    assert _image() in text


def test_kuberay_rayjob_mounts_one_volume_everywhere_and_stores_inside_it():
    docs = list(yaml.safe_load_all((CLUSTER / "kuberay-rayjob.yaml").read_text()))
    job = next(d for d in docs if d["kind"] == "RayJob")
    assert job["apiVersion"] == "ray.io/v1"
    spec = job["spec"]["rayClusterSpec"]
    assert spec["rayVersion"] == _pins()["ray"]
    pods = [spec["headGroupSpec"]["template"]["spec"]] + [g["template"]["spec"] for g in spec["workerGroupSpecs"]]
    mounts = set()
    for pod in pods:
        claim = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v}
        for c in pod["containers"]:
            assert c["image"] == _image()
            env = {e["name"]: e["value"] for e in c["env"]}
            assert env["RAY_AUTH_MODE"] == "token" and env["RAY_AUTH_TOKEN_PATH"]
            mounts |= {(claim[m["name"]], m["mountPath"]) for m in c["volumeMounts"] if m["name"] in claim}
    assert len(mounts) == 1                                        # the same claim at the same path
    (claim_name, path), = mounts
    pvc = next(d for d in docs if d["kind"] == "PersistentVolumeClaim")
    assert pvc["metadata"]["name"] == claim_name and pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    env = yaml.safe_load(job["spec"]["runtimeEnvYAML"])["env_vars"]
    assert env["TUNER_STORAGE"].startswith(path + "/")
    assert job["spec"]["entrypoint"].startswith("python -m tuner run ")
    assert any(g["minReplicas"] == 0 and "nvidia.com/gpu" in g["template"]["spec"]["containers"][0]["resources"]["limits"]
               for g in spec["workerGroupSpecs"])


def test_rayignore_keeps_data_and_results_out_of_the_upload():
    lines = {ln.strip() for ln in (ROOT / ".rayignore").read_text().splitlines() if ln.strip() and not ln.startswith("#")}
    assert {"data/", "runs/", ".cache/", "bench_out/"} <= lines
