"""The trust boundary of an experiment folder.

Which files `status`, `export`, `report` and `resume` read is found by recording every open
under the folder while each command runs, by any process (the driver, pyarrow's readers,
Ray's workers) through inotify, not by reading the code; each must be one the owner-and-mode
check judged first.  Then a payload planted in each kind of file, with a foreign owner,
writable by others, or writable by a group that is not the user's private one, is refused by
every command and never runs."""
from __future__ import annotations

import grp
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tuner.experiment import covered, load_saved
from tuner.schema import ExperimentError

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "written-by-0.1.0"
NOWHERE = "127.0.0.1:1"


def _copy(tmp_path: Path) -> Path:
    folder = shutil.copytree(FIXTURE, tmp_path / "runs" / FIXTURE.name)
    for p in [folder, *folder.rglob("*")]:
        p.chmod(p.stat().st_mode & ~0o022)   # as a run leaves it: only its owner writes
    return folder


class Opens:
    """Every open of a file or folder under `root` (as it is now) by any process, via inotify."""

    def __init__(self, root: Path):
        from inotify_simple import INotify, flags
        self.ino, self.flags = INotify(), flags
        self.dirs = {self.ino.add_watch(d, flags.OPEN | flags.Q_OVERFLOW): d
                     for d in [root, *(p for p in root.rglob("*") if p.is_dir() and not p.is_symlink())]}

    def read(self) -> set[Path]:
        out = set()
        while events := self.ino.read(timeout=200):
            for e in events:
                assert not e.mask & self.flags.Q_OVERFLOW, "inotify dropped events: the record is incomplete"
                out.add(self.dirs[e.wd] / e.name if e.name else self.dirs[e.wd])
        return out


def _cli(*args, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "TUNER_CACHE": str(cwd / "cache")}
    return subprocess.run([sys.executable, "-m", "tuner", *args], check=False, capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, env=env)


@pytest.mark.integration
@pytest.mark.timeout(400)
def test_every_file_the_commands_read_is_judged_by_the_trust_check(tmp_path, ray_address):
    folder = _copy(tmp_path)
    commands = {"status": ["status", str(folder)], "export": ["export", str(folder), "--out", str(tmp_path / "best")],
                "report": ["report", str(folder)], "resume": ["resume", str(folder), "--address", ray_address]}
    opened_by: dict[str, set[Path]] = {}
    for name, args in commands.items():
        before = {folder, *folder.rglob("*")}   # what a command writes and reads back is its own
        judged = set(covered(folder))           # what the check each command starts with judges
        rec = Opens(folder)
        r = _cli(*args, cwd=tmp_path)
        assert r.returncode == 0, (name, r.stdout[-2000:], r.stderr[-2000:])
        opened_by[name] = {p for p in rec.read() if p in before}
        unjudged = sorted(str(p.relative_to(folder)) for p in opened_by[name] - judged)
        assert not unjudged, f"`{name}` read files the trust check did not judge: {unjudged}"
    # The record sees what each command reads, Tune's own reads (pyarrow, C++) included.
    names = {p.name for ps in opened_by.values() for p in ps}
    assert {"tuner-experiment.yaml", "tuner.pkl", "checkpoint.pt"} <= names, names
    assert any(n.startswith("search_gen_state-") for n in names), names   # a cloudpickle, despite .json
    assert any(p.name.startswith("experiment_state-") for p in opened_by["status"]), opened_by["status"]


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
