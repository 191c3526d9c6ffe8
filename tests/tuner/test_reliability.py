"""Bad input and unusable folders are refused before anything starts; state that others
could have written is not trusted.  None of these tests starts Ray: where a check could be
skipped by mistake, the CLI is pointed at an address where nothing listens, so a missed
refusal fails fast instead of starting a Ray."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tuner.config import parse
from tuner.schema import ExperimentError

NOWHERE = "127.0.0.1:1"  # no Ray listens here

SPEC = """
name: rel
storage_path: {storage}
budget: {{num_samples: 2, max_epochs: 2}}
train: {{dataset: digits, cache_dir: {cache}}}
search:
  lr: {{type: loguniform, low: 1.0e-2, high: 0.1}}
"""


def _cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "tuner", *args], check=False, capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


BAD_YAML = {
    "unknown key": "name: rel\nstorage_path: {storage}\nbudgett: {{num_samples: 2}}\n",
    "out of range": "name: rel\nstorage_path: {storage}\ntrain: {{dropout: 1.5}}\n",
    "python tag": "name: rel\nstorage_path: {storage}\ntrain: !!python/object/apply:os.system ['true']\n",
    "duplicate key": "name: rel\nstorage_path: {storage}\nname: other\n",
    "syntax": "name: rel\nstorage_path: {storage}\ntrain: {{lr: 0.1\n",
    "yes/off boolean": "name: rel\nstorage_path: {storage}\ntrain: {{augment: off}}\n",
}


@pytest.mark.parametrize("case", BAD_YAML, ids=list(BAD_YAML))
def test_bad_yaml_is_refused_with_no_ray_and_no_folder(case, tmp_path):
    spec = tmp_path / "bad.yaml"
    spec.write_text(BAD_YAML[case].format(storage=tmp_path / "runs"))
    r = _cli("run", str(spec), "--address", NOWHERE)
    assert r.returncode == 2 and r.stderr.startswith("error: ") and "Traceback" not in r.stderr, r.stderr
    assert "connect" not in r.stderr and "Ray" not in r.stdout, (r.stdout, r.stderr)
    assert not (tmp_path / "runs").exists()


def test_storage_path_blocked_by_a_file_is_refused_before_ray(tmp_path):
    (tmp_path / "runs").write_text("a file where the storage folder must be")
    spec = tmp_path / "e.yaml"
    spec.write_text(SPEC.format(storage=tmp_path / "runs" / "sub", cache=tmp_path / "cache"))
    r = _cli("run", str(spec), "--address", NOWHERE)
    assert r.returncode == 2 and "storage_path" in r.stderr and "is a file" in r.stderr, r.stderr
    assert "cannot connect" not in r.stderr and r.stderr.count("\n  - ") == 1
    assert (tmp_path / "runs").read_text().startswith("a file")   # nothing overwritten


def test_cache_dir_blocked_by_a_file_is_refused_before_ray(tmp_path):
    (tmp_path / "cache").write_text("x")
    spec = tmp_path / "e.yaml"
    spec.write_text(SPEC.format(storage=tmp_path / "runs", cache=tmp_path / "cache"))
    r = _cli("run", str(spec), "--address", NOWHERE)
    assert r.returncode == 2 and "train.cache_dir" in r.stderr and "is a file" in r.stderr, r.stderr
    assert not (tmp_path / "runs").exists()


def test_a_corrupt_cifar_file_is_refused_by_the_driver_before_ray(tmp_path):
    import hashlib

    from cifar_files import write_cifar
    from torchvision.datasets import CIFAR10
    write_cifar(tmp_path / "data")   # the real format, but not the published bytes
    folder = tmp_path / "data" / "cifar-10-batches-py"
    (folder / "data_batch_3").unlink()    # missing: the trial's to report (the nodes may hold it)
    before = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir()}
    spec = tmp_path / "e.yaml"
    spec.write_text(SPEC.format(storage=tmp_path / "runs", cache=tmp_path / "cache")
                    .replace("dataset: digits", f"dataset: cifar10, data_root: {tmp_path / 'data'}"))
    r = _cli("run", str(spec), "--address", NOWHERE)
    assert r.returncode == 2 and "Traceback" not in r.stderr and "cannot connect" not in r.stderr, r.stderr
    bad = [ln for ln in r.stderr.splitlines() if "published checksum" in ln]
    named = {ln.split("cifar-10-batches-py/")[1].split()[0] for ln in bad}
    assert named == set(before), r.stderr
    md5 = dict(CIFAR10.train_list)["data_batch_1"]
    assert any("data_batch_1 does not match" in ln and md5 in ln for ln in bad), r.stderr
    assert not (tmp_path / "runs").exists()
    assert before == {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir()}  # untouched


def test_low_free_space_is_refused_before_ray_and_before_any_folder(tmp_path, monkeypatch):
    from trainables.runtime import preflight
    from tuner import run as run_mod
    monkeypatch.setattr(preflight, "free_bytes", lambda path: 10 << 20)   # 10 MiB left

    def no_ray(*a, **k):
        raise AssertionError("Ray must not be started")
    monkeypatch.setattr(run_mod, "connect", no_ray)
    exp = parse(SPEC.format(storage=tmp_path / "runs", cache=tmp_path / "cache"))
    with pytest.raises(preflight.PreflightError, match=r"10 MiB free, below the 1024 MiB"):
        run_mod.run_experiment(exp, echo=lambda s: None)
    assert not (tmp_path / "runs").exists()


def test_a_local_ray_without_authentication_is_refused_unless_asked(tmp_path):
    spec = tmp_path / "e.yaml"
    spec.write_text(SPEC.format(storage=tmp_path / "runs", cache=tmp_path / "cache"))
    env = {"RAY_AUTH_MODE": "disabled", "RAY_ADDRESS": ""}
    r = _cli("run", str(spec), env=env)
    assert r.returncode == 2 and "RAY_AUTH_MODE=disabled" in r.stderr and "--allow-no-auth" in r.stderr, r.stderr
    assert not (tmp_path / "runs").exists()


def _fake_experiment(tmp_path) -> Path:
    exp_dir = tmp_path / "runs" / "rel"
    exp_dir.mkdir(parents=True)
    (exp_dir / "tuner-experiment.yaml").write_text("name: rel\n")
    (exp_dir / "searcher-state-0.pkl").write_bytes(b"not read")
    return exp_dir


@pytest.mark.parametrize("target", [".", "searcher-state-0.pkl"])
def test_state_writable_by_others_is_refused_before_it_is_read(tmp_path, target, capsys):
    from tuner.cli import main
    from tuner.experiment import load_saved
    exp_dir = _fake_experiment(tmp_path)
    (exp_dir / target).chmod(0o777 if target == "." else 0o666)
    with pytest.raises(ExperimentError, match="writable by group or others"):
        load_saved(exp_dir)
    for verb in ("status", "export", "resume"):  # the CLI in this process: it refuses before Ray
        rc = main([verb, str(exp_dir), *(["--out", str(tmp_path / "o")] if verb == "export" else []),
                   *(["--address", NOWHERE] if verb == "resume" else [])])
        err = capsys.readouterr().err
        assert rc == 2 and "refused" in err and "Traceback" not in err, (verb, err)
    (exp_dir / target).chmod(0o755 if target == "." else 0o644)
    assert load_saved(exp_dir).name == "rel"


@pytest.mark.integration
def test_the_dashboard_and_jobs_api_refuse_requests_without_the_token(ray_address):
    import urllib.error
    import urllib.request
    url = os.environ.get("TUNER_TEST_DASHBOARD_URL")
    if not url:
        pytest.skip("the session's Ray has no dashboard")
    token_file = Path.home() / ".ray" / "auth_token"
    assert token_file.is_file(), "a new local Ray writes its token here (token authentication is on by default)"

    def get(path, token=None):
        req = urllib.request.Request(f"http://{url}{path}",
                                     headers={"Authorization": f"Bearer {token}"} if token else {})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code
    for path in ("/api/jobs/", "/api/v0/actors"):
        assert get(path) == 401, path
        assert get(path, "not-the-token") in (401, 403), path
        assert get(path, token_file.read_text().strip()) == 200, path
    assert url.startswith("127.0.0.1:")          # the dashboard listens on loopback only


@pytest.mark.integration
def test_the_gcs_grpc_port_refuses_calls_without_the_token(ray_address):
    import grpc
    from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc
    token = (Path.home() / ".ray" / "auth_token").read_text().strip()
    # A plain channel: none of the token interceptors Ray's own clients add.
    with grpc.insecure_channel(ray_address) as channel:
        nodes = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel).GetAllNodeInfo
        request = gcs_service_pb2.GetAllNodeInfoRequest()
        for metadata in ((), (("authorization", "Bearer not-the-token"),)):
            with pytest.raises(grpc.RpcError) as err:
                nodes(request, metadata=metadata, timeout=10)
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED, (metadata, err.value)
        reply = nodes(request, metadata=(("authorization", f"Bearer {token}"),), timeout=10)
        assert len(reply.node_info_list) >= 1


def test_group_writable_state_is_trusted_only_for_the_users_private_group(tmp_path):
    from tuner.experiment import load_saved, private_group
    exp_dir = _fake_experiment(tmp_path)
    exp_dir.chmod(0o775)                      # what umask 002 gives
    if private_group(exp_dir.stat().st_gid):
        assert load_saved(exp_dir).name == "rel"
    else:
        with pytest.raises(ExperimentError, match="writable by group or others"):
            load_saved(exp_dir)


@pytest.mark.timeout(120)
def test_a_node_that_leaves_during_the_node_check_is_skipped_and_one_still_listed_is_named(ray_address, tmp_path,
                                                                                           monkeypatch):
    # A node removed (or preempted) between the listing of alive nodes and its check is no
    # preflight failure: its pinned task cannot be scheduled, and the node is gone by then.
    import ray

    from trainables.runtime.preflight import PreflightError
    from tuner.cluster import NodeCheck
    (tmp_path / "runs").mkdir()
    check = NodeCheck(parse(f"name: leaving\nstorage_path: {tmp_path / 'runs'}\n"))
    real = ray.nodes()
    ghost = {"NodeID": "ab" * 28, "Alive": True, "NodeManagerAddress": "10.9.9.9", "Resources": {}}
    listings = []

    def nodes():
        listings.append(1)
        return real + [ghost] if len(listings) == 1 else real    # gone when its check fails
    monkeypatch.setattr(ray, "nodes", nodes)
    check.check_nodes(timeout_s=60)
    assert len(listings) == 2                                     # the check asked again before skipping it
    # Still listed alive, yet its check cannot run: one error naming it.
    monkeypatch.setattr(ray, "nodes", lambda: real + [ghost])
    with pytest.raises(PreflightError, match=r"node 10\.9\.9\.9 \(abababababab\): the check could not run there"):
        check.check_nodes(timeout_s=60)


def test_the_nodes_version_check_reads_package_metadata_without_importing_torch():
    code = ("import sys; from trainables.runtime.preflight import versions; v = versions(); "
            "print(sorted(v), 'torch' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60,
                       cwd=Path(__file__).resolve().parents[2])
    assert r.stdout.strip() == "['python', 'ray', 'torch'] False", r.stdout + r.stderr
