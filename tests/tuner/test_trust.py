"""The trust boundary of an experiment folder.

Which files `status`, `export`, `report` and `resume` read is found by recording every open
under the folder while each command runs, by any process, through inotify (tests/opens.py),
not by reading the code: test_compat.py's end-to-end test of a folder written by 0.1.0 runs
the four commands once and fails on a file read that the owner-and-mode check did not judge
first.  Here: a payload planted in each kind of file, with a foreign owner, writable by
others, or writable by a group that is not the user's private one, is refused by every
command and never runs."""
from __future__ import annotations

import grp
import os
import pickle
import shutil
from pathlib import Path

import pytest

from tuner.experiment import load_saved
from tuner.schema import ExperimentError

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "written-by-0.1.0"
NOWHERE = "127.0.0.1:1"


def _copy(tmp_path: Path) -> Path:
    folder = shutil.copytree(FIXTURE, tmp_path / "runs" / FIXTURE.name)
    for p in [folder, *folder.rglob("*")]:
        p.chmod(p.stat().st_mode & ~0o022)   # as a run leaves it: only its owner writes
    return folder


class Payload:
    """Unpickled, it touches a file: proof that the pickle ran."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def _plant(folder: Path, target: str, marker: Path) -> Path:
    """A payload in the file `target` names (a folder: in the params.pkl inside it); the path
    whose owner or mode the case then changes."""
    trial = min(folder.glob("trial_*"))
    data = pickle.dumps(Payload(marker))
    paths = {"search_gen_state": next(folder.glob("search_gen_state-*.json")),
             "basic_variant_state": folder / "basic-variant-state-2026-12-04_16-19-08.json",
             "error.pkl": trial / "error.pkl", "params.pkl": trial / "params.pkl",
             "checkpoint": trial / "checkpoint_000000" / "checkpoint.pt", "trial folder": trial / "params.pkl"}
    paths[target].write_bytes(data)
    paths[target].chmod(0o644)
    return trial if target == "trial folder" else paths[target]


def _other_group() -> int | None:
    """A group that is not this user's private group, that this process may give a file."""
    from tuner.experiment import private_group
    candidates = [g.gr_gid for g in grp.getgrall()] if os.getuid() == 0 else os.getgroups()
    return next((g for g in candidates if not private_group(g)), None)


def _spoil(path: Path, how: str) -> None:
    if how == "others":
        path.chmod(path.stat().st_mode | 0o002)
    elif how == "group":
        gid = _other_group()
        if gid is None:
            pytest.skip("no group other than this user's private one to give the file")
        os.chown(path, -1, gid)
        path.chmod(path.stat().st_mode | 0o020)
    else:
        if os.getuid() != 0:
            pytest.skip("giving a file a foreign owner needs root (chown)")
        os.chown(path, 65534, -1)


TARGETS = ["search_gen_state", "basic_variant_state", "error.pkl", "params.pkl", "checkpoint", "trial folder"]


@pytest.mark.parametrize("how", ["others", "group", "owner"])
@pytest.mark.parametrize("target", TARGETS)
def test_a_payload_planted_where_another_could_write_is_refused_and_never_runs(tmp_path, target, how, capsys):
    from tuner.cli import main
    folder = _copy(tmp_path)
    marker = tmp_path / "payload-ran"
    spoiled = _plant(folder, target, marker)
    _spoil(spoiled, how)
    with pytest.raises(ExperimentError) as e:
        load_saved(folder)
    assert any(str(spoiled) in p and "refused" in p for p in e.value.problems), e.value.problems
    for verb in ("status", "export", "report", "resume"):   # in this process: refused before Ray
        extra = {"export": ["--out", str(tmp_path / "o")], "resume": ["--address", NOWHERE]}.get(verb, [])
        rc = main([verb, str(folder), *extra])
        err = capsys.readouterr().err
        assert rc == 2 and "refused" in err and str(spoiled) in err and "Traceback" not in err, (verb, err)
    assert not marker.exists(), "the payload ran"
    assert not (tmp_path / "o").exists()


def test_a_link_anywhere_in_the_folder_is_refused(tmp_path):
    folder = _copy(tmp_path)
    trial = min(folder.glob("trial_*"))
    (trial / "result.json").unlink()
    (trial / "result.json").symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(ExperimentError, match="result.json is a symbolic link"):
        load_saved(folder)


def test_the_folder_as_a_run_leaves_it_is_trusted(tmp_path):
    folder = _copy(tmp_path)
    assert load_saved(folder).name == FIXTURE.name
