"""Every open of a file or folder under a folder, by any process (the driver, pyarrow's C++
readers, Ray's workers), recorded through inotify: what a command really reads."""
from __future__ import annotations

from pathlib import Path


class Opens:
    """Watches `root` and every folder in it as it is now (a folder made later holds only what
    the command itself wrote)."""

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
        self.ino.close()
        return out
