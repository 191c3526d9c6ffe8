"""The Makefile's browser step: its stamp means the browser is there, so a failed install is
tried again by the next `make test` rather than skipped for good."""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bin(tmp_path: Path, uid: int, browser: bool) -> Path:
    """A PATH with the few programs the step runs: `id` answering `uid`, and the browser's two
    programs only when `browser`."""
    b = tmp_path / f"bin-{uid}-{browser}"
    b.mkdir()
    for prog in ("touch", "sh", "true"):
        os.symlink(shutil.which(prog), b / prog)
    (b / "id").write_text(f"#!/bin/sh\necho {uid}\n")
    for prog in ("chromium", "chromedriver") if browser else ():
        (b / prog).write_text("#!/bin/sh\nexit 0\n")
    for p in b.iterdir():
        if not p.is_symlink():
            p.chmod(0o755)
    return b


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_the_browser_stamp_is_written_only_once_the_browser_is_there(tmp_path):
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    (tmp_path / "pyproject.toml").touch()
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / ".installed").touch()     # the install step, done (newer than pyproject.toml)
    make = shutil.which("make")

    def step(path: Path) -> subprocess.CompletedProcess:
        return subprocess.run([make, "-s", ".venv/.browser"], cwd=tmp_path, capture_output=True, text=True,
                              env={"PATH": str(path)}, timeout=60, check=False)

    r = step(_bin(tmp_path, 1000, browser=False))   # no root, no browser: nothing can install it
    assert r.returncode == 0 and "the browser test will skip" in r.stdout, r.stdout + r.stderr
    assert not (tmp_path / ".venv" / ".browser").exists()
    r = step(_bin(tmp_path, 1000, browser=True))
    assert r.returncode == 0 and (tmp_path / ".venv" / ".browser").exists(), r.stdout + r.stderr


def test_make_test_runs_every_test_file():
    """`make test` runs pytest on pyproject's testpaths: a test file outside them would never run."""
    import tomllib
    paths = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["testpaths"]
    covered = [ROOT / p for p in paths]
    files = sorted((ROOT / "tests").rglob("test_*.py"))
    left_out = [str(f.relative_to(ROOT)) for f in files
                if not any(f == c or c in f.parents for c in covered) and "fixtures" not in f.parts]
    assert files and not left_out, f"not in pyproject's testpaths: {left_out}"
