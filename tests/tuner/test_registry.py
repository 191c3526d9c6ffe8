"""The service's registry and its fair-share arithmetic, without Ray."""
import json
import multiprocessing
import os
import time
from pathlib import Path

import pytest

from tuner.registry import Record, Registry, RegistryError, ServiceSettings, load_settings
from tuner.share import Claim, Unmanaged, divide, unmanaged


def _claims(*specs):
    return [Claim(f"e{i}", w, need, wanted) for i, (w, need, wanted) in enumerate(specs)]


def test_equal_weights_split_the_cluster_evenly():
    assert divide(4, _claims((2, 1, 4), (2, 1, 4))) == {"e0": 2, "e1": 2}


def test_weights_split_in_proportion_and_nobody_gets_nothing():
    # high 4 : low 1 of 4 CPUs: 3.2 and 0.8 -> 3 and 1 (at least one each)
    assert divide(4, _claims((4, 1, 4), (1, 1, 4))) == {"e0": 3, "e1": 1}
    # 4:2:1 of 14 CPUs -> 8, 4, 2
    assert divide(14, _claims((4, 1, 14), (2, 1, 14), (1, 1, 14))) == {"e0": 8, "e1": 4, "e2": 2}


def test_shares_are_counted_in_resources_not_trials():
    # equal weights; one experiment's trials reserve 2 CPUs: each gets 4 CPUs' worth
    assert divide(8, _claims((2, 2, 8), (2, 1, 8))) == {"e0": 2, "e1": 4}


def test_what_one_cannot_use_goes_to_the_others():
    # e0 wants only one trial: e1 grows into the rest
    assert divide(4, _claims((4, 1, 1), (1, 1, 4))) == {"e0": 1, "e1": 3}
    # alone, an experiment takes the whole cluster
    assert divide(4, _claims((1, 1, 8))) == {"e0": 4}


def test_trials_that_take_none_of_the_shared_resource_are_not_capped():
    assert divide(2, _claims((1, 0.0, 6), (1, 1, 6))) == {"e0": 6, "e1": 2}


def test_rounding_leftovers_go_to_whoever_is_furthest_below_its_share():
    got = divide(5, _claims((1, 1, 5), (1, 1, 5)))
    assert sorted(got.values()) == [2, 3]


def test_jobs_outside_the_service_are_counted_by_what_their_live_placement_groups_hold():
    jobs = [{"job_id": "01", "submission_id": None, "status": "RUNNING", "entrypoint": "python -m tuner run a.yaml"},
            {"job_id": "02", "submission_id": "tuner-x-1", "status": "RUNNING", "entrypoint": "python -m tuner run x"},
            {"job_id": "03", "submission_id": None, "status": "SUCCEEDED", "entrypoint": "python old.py"},
            {"job_id": "04", "submission_id": None, "status": "RUNNING", "entrypoint": "python idle.py"}]
    cpu = [{"unit_resources": {"CPU": 1.0}}]
    groups = [{"creator_job_id": "01", "state": "CREATED", "bundles": cpu},
              {"creator_job_id": "01", "state": "CREATED", "bundles": [{"unit_resources": {"CPU": 0.5}}, *cpu]},
              {"creator_job_id": "01", "state": "PENDING", "bundles": cpu},     # not placed: holds nothing
              {"creator_job_id": "02", "state": "CREATED", "bundles": cpu},     # the service's own driver
              {"creator_job_id": "03", "state": "CREATED", "bundles": cpu}]     # a job that ended
    got = unmanaged(jobs, groups, managed={"tuner-x-1"}, resource="CPU")
    assert got == [Unmanaged("01", "python -m tuner run a.yaml", 2, 2.5)]
    # what they hold is not divided among the service's experiments
    assert divide(4 - got[0].held, _claims((2, 1, 4), (2, 1, 4))) == {"e0": 1, "e1": 1}


def _record(reg: Registry, name="a") -> Record:
    rec = Record(id=reg.new_id(name), name=name, owner="me", submitted=time.time(), file="f.yaml",
                 location="/tmp/x", need={"CPU": 1.0}, max_slots=2)
    reg.save(rec)
    return rec


def test_record_round_trip_and_unknown_id(tmp_path):
    reg = Registry(tmp_path)
    rec = _record(reg)
    assert reg.get(rec.id) == rec
    assert (reg.dir / f"{rec.id}.json").stat().st_mode & 0o077 == 0
    with pytest.raises(RegistryError, match="no experiment 'nope'"):
        reg.get("nope")
    with pytest.raises(RegistryError, match="not an experiment id"):
        reg.get("../../etc/passwd")


def test_corrupt_other_version_and_planted_records_are_refused_with_one_line(tmp_path):
    reg = Registry(tmp_path)
    good = _record(reg, "good")
    corrupt = _record(reg, "corrupt")
    (reg.dir / f"{corrupt.id}.json").write_text("{not json")
    newer = _record(reg, "newer")
    data = json.loads((reg.dir / f"{newer.id}.json").read_text())
    (reg.dir / f"{newer.id}.json").write_text(json.dumps({**data, "format": 2}))
    planted = _record(reg, "planted")
    os.chmod(reg.dir / f"{planted.id}.json", 0o666)
    missing_field = _record(reg, "missing")
    data = json.loads((reg.dir / f"{missing_field.id}.json").read_text())
    del data["location"]
    (reg.dir / f"{missing_field.id}.json").write_text(json.dumps(data))
    recs, bad = reg.all()
    assert [r.id for r in recs] == [good.id]
    assert len(bad) == 4
    text = "\n".join(bad)
    assert "corrupt experiment record" in text and "format 2" in text and "writable by group or others" in text
    assert "location" in text
    with pytest.raises(RegistryError, match="another version"):
        reg.get(newer.id)


def test_a_record_that_is_a_link_is_refused(tmp_path):
    reg = Registry(tmp_path)
    rec = _record(reg)
    target = tmp_path / "elsewhere.json"
    (reg.dir / f"{rec.id}.json").rename(target)
    (reg.dir / f"{rec.id}.json").symlink_to(target)
    with pytest.raises(RegistryError, match="symbolic link"):
        reg.get(rec.id)


def _make_ids(root: str, n: int, out) -> None:
    reg = Registry(root)
    out.put([_record(reg, "same").id for _ in range(n)])


def test_ids_made_at_once_by_separate_processes_are_distinct(tmp_path):
    q: multiprocessing.Queue = multiprocessing.Queue()
    procs = [multiprocessing.get_context("fork").Process(target=_make_ids, args=(str(tmp_path), 5, q)) for _ in range(10)]
    for p in procs:
        p.start()
    ids = [i for _ in procs for i in q.get(timeout=60)]
    for p in procs:
        p.join(timeout=60)
    assert len(ids) == 50 and len(set(ids)) == 50
    recs, bad = Registry(tmp_path).all()
    assert len(recs) == 50 and not bad


def test_service_settings_are_validated_naming_the_field(tmp_path):
    f = tmp_path / "service.yaml"
    f.write_text("max_running: 0\nweights: {high: -1}\nstorge: /x\n")
    with pytest.raises(RegistryError) as e:
        load_settings(f)
    msg = str(e.value)
    assert "max_running" in msg and "weights" in msg and "storge" in msg and str(f) in msg
    f.write_text("storage: /srv/tuner\nmax_running: 3\nweights: {high: 8}\n")
    s = load_settings(f)
    assert s.max_running == 3 and s.weight("high") == 8 and s.weight("low") == 1


def test_settings_saved_beside_the_registry_come_back(tmp_path):
    reg = Registry(tmp_path)
    s = ServiceSettings(storage=str(tmp_path), max_running=5)
    reg.save_settings(s)
    assert reg.saved_settings() == s


def test_a_registry_id_names_its_experiment_folder_on_the_head(tmp_path, monkeypatch):
    from tuner.service import experiment_location
    monkeypatch.setenv("TUNER_HOME", str(tmp_path / "home"))
    reg = Registry(tmp_path / "svc")
    rec = _record(reg)
    assert experiment_location(rec.id) == rec.id        # no service on this machine: as given
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "service.json").write_text(json.dumps({"format": 1, "storage": str(tmp_path / "svc")}))
    assert experiment_location(rec.id) == "/tmp/x"
    assert experiment_location("unknown-id") == "unknown-id"
    assert experiment_location(str(tmp_path)) == str(tmp_path)


def test_a_long_lived_registry_reads_again_what_changed_and_only_that(tmp_path, monkeypatch):
    """The dispatcher lists its registry every pass: records are read once, then again when the
    file changed in any way the record or the trust check depends on (even with its old size and
    modification time put back), and never otherwise."""
    import tuner.registry as registry_module
    reg = Registry(tmp_path)
    recs = [_record(reg, n) for n in ("a", "b", "c")]
    old = time.time() - 60
    for r in recs:
        os.utime(reg.path(r.id), (old, old))
    assert [r.id for r in reg.all()[0]] == [r.id for r in recs]
    reads: list[str] = []
    real = registry_module.read_json
    monkeypatch.setattr(registry_module, "read_json", lambda path, what: reads.append(Path(path).stem) or real(path, what))
    assert len(reg.all()[0]) == 3 and reads == []                 # nothing changed: nothing read
    os.chmod(reg.path(recs[0].id), 0o666)                          # a mode change only (same size and mtime)
    body = Path(reg.path(recs[1].id)).read_text()
    Path(reg.path(recs[1].id)).write_text(body.replace('"me"', '"it"'))   # same size, old mtime put back
    os.utime(reg.path(recs[1].id), (old, old))
    Path(reg.path(recs[2].id)).unlink()
    got, bad = reg.all()
    assert sorted(reads) == sorted([recs[0].id, recs[1].id])
    assert [r.id for r in got] == [recs[1].id] and got[0].owner == "it"
    assert len(bad) == 1 and "writable by group or others" in bad[0]
