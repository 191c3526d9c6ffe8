"""The experiment folder: the saved experiment, its trust check, loading it, and pulling its state from cloud storage."""
from __future__ import annotations

import os
import stat
from pathlib import Path

import yaml

from trainables.runtime import storage
from tuner.schema import Experiment, ExperimentError

EXPERIMENT_FILE = "tuner-experiment.yaml"


def save_experiment(exp: Experiment) -> None:
    data = exp.model_dump(mode="json", exclude_unset=True)  # what the user wrote, not every default
    # ASHA's kind always: a resume runs the kind the search started with, whatever the default is then.
    data["budget"] = {**data.get("budget", {}), "asha": exp.budget.asha}
    write_file(exp, EXPERIMENT_FILE, yaml.safe_dump(data, sort_keys=False))


def saved_overrides(text: str) -> list[str]:
    """What a saved experiment left to defaults that have changed since: a folder saved before
    promotion ASHA was the default (no budget.asha in it) ran stopping ASHA."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return []   # parse reports it
    budget = data.get("budget") if isinstance(data, dict) else None
    return [] if isinstance(budget, dict) and "asha" in budget else ["budget.asha=stopping"]


def write_file(exp: Experiment, name: str, text: str) -> None:
    """A file of the experiment folder: in the folder, and for cloud storage also in the local copy."""
    exp.exp_dir.mkdir(parents=True, exist_ok=True)
    (exp.exp_dir / name).write_text(text)
    if exp.remote:
        storage.write_bytes(storage.join(exp.location, name), text.encode())


def _state_file(rel: str, journal: bool) -> bool:
    """What `pull` copies: everything but checkpoints (fetched one by one when needed) and,
    unless asked for, the searcher's journal (only resume needs it; a run on this machine may
    be appending to the local one)."""
    from .searcher import JOURNAL
    parts = rel.split("/")
    return not any(p.startswith("checkpoint_") for p in parts) and (journal or parts[-1] != JOURNAL)


def pull(exp: Experiment, journal: bool = False) -> list[str]:
    """Bring a cloud experiment's state into its local copy (nothing to do for a folder)."""
    if not exp.remote:
        return []
    try:
        return storage.download(exp.location, exp.exp_dir, lambda rel: _state_file(rel, journal))
    except storage.UnsafeKey as e:
        raise ExperimentError(exp.location, [str(e)]) from None


def local_checkpoint(exp: Experiment, path: str) -> str:
    """A trial checkpoint folder on this machine: for cloud storage, fetched into the local copy."""
    if not exp.remote or Path(path).is_dir():
        return path
    _, root = storage.filesystem(exp.location)
    # A path on the bucket (a DDP trial's, from its report), or Tune's for the local copy,
    # which for a cloud experiment holds the bucket's path after the copy's own: the part
    # after the experiment's path on the bucket is the checkpoint's place in the folder.
    at = path.rfind(root.rstrip("/") + "/")
    if at < 0:
        raise ExperimentError(exp.location, [f"checkpoint {path} is outside the experiment folder"])
    rel = path[at + len(root.rstrip("/")) + 1:].rstrip("/")
    try:
        target = storage.inside(exp.exp_dir, rel, path)   # a reported path with '..' would leave the copy
    except storage.UnsafeKey as e:
        raise ExperimentError(exp.location, [str(e)]) from None
    storage.download(storage.join(exp.location, *rel.split("/")), target)
    return str(target)


def covered(exp_dir: Path) -> list[Path]:
    """What the trust check judges: the folder and everything in it, each trial folder and file
    at any depth (Tune's state, the searcher's, `search_gen_state-*.json` and
    `basic-variant-state-*.json`, which are cloudpickles despite their names, trial params,
    error.pkl, checkpoints).  Links are listed, never followed."""
    out = [exp_dir]
    for root, dirs, files in os.walk(exp_dir):   # os.walk does not descend into linked folders
        out += [Path(root, n) for n in sorted(dirs) + sorted(files)]
    return out


def untrusted(exp_dir: Path) -> list[str]:
    """What in the folder someone else could have written: a link, or a file or folder owned by
    another user or writable by group or others.  Such a folder is refused before anything in
    it is read (resume/status/export/report read pickles there, and unpickling runs code)."""
    return [why for p in covered(exp_dir) if (why := untrusted_path(p))]


def untrusted_path(p: Path) -> str | None:
    """Why someone else could have written this one path (not followed if a link), or None."""
    me = os.getuid()
    st = p.lstat()
    if stat.S_ISLNK(st.st_mode):
        return f"{p} is a symbolic link"
    if st.st_uid != me:
        return f"{p} is owned by uid {st.st_uid}, not by you (uid {me})"
    if st.st_mode & 0o002 or (st.st_mode & 0o020 and not private_group(st.st_gid)):
        return f"{p} is writable by group or others (mode {stat.filemode(st.st_mode)})"
    return None


def private_group(gid: int) -> bool:
    """A group only this user is in (a user-private group, as umask 002 systems use)."""
    import grp
    import pwd
    try:
        g, me = grp.getgrgid(gid), pwd.getpwuid(os.getuid())
    except KeyError:
        return False
    return gid == me.pw_gid and g.gr_name == me.pw_name and set(g.gr_mem) <= {me.pw_name}


def load_saved(exp_dir: str | Path, journal: bool = False) -> Experiment:
    """The experiment saved in a folder or at a cloud URI (its state downloaded into the local
    copy first; the bucket's access policy is what guards a cloud experiment's pickles)."""
    from . import _compat
    _compat.install_old_names()   # its pickles may name classes where version 0.1.0 had them
    if storage.is_uri(exp_dir):
        return _load_remote(str(exp_dir), journal)
    path = Path(exp_dir) / EXPERIMENT_FILE
    if not path.is_file():
        raise ExperimentError(str(exp_dir), [(f"not an experiment folder: {path} is missing "
                                             "(give the folder that `tuner run` printed)")])
    bad = untrusted(Path(exp_dir))
    if bad:
        more = [f"refused: and {len(bad) - 5} more like these"] if len(bad) > 5 else []
        raise ExperimentError(str(exp_dir), [
            f"refused: {b}; the folder holds pickled state that runs code when read — "
            "check who changed it, then `chmod -R go-w` it if it is yours" for b in bad[:5]] + more)
    from .config import parse
    text = path.read_text()
    exp = parse(text, str(path), saved_overrides(text))
    # The folder may have moved since the run: trust where it is now.
    return exp.model_copy(update={"storage_path": str(Path(exp_dir).resolve().parent),
                                  "name": Path(exp_dir).resolve().name})


def _load_remote(location: str, journal: bool) -> Experiment:
    from .config import parse
    parent, name = storage.parent_and_name(location)
    try:
        text = storage.read_bytes(storage.join(location, EXPERIMENT_FILE)).decode()
    except FileNotFoundError:
        raise ExperimentError(location, [(f"not an experiment: {storage.join(location, EXPERIMENT_FILE)} is missing "
                                         "(give the location that `tuner run` printed)")]) from None
    except Exception as e:  # noqa: BLE001 - pyarrow: credentials, endpoint, bad URI
        raise ExperimentError(location, [(f"cannot read it: {storage.first_line(e)}; check the URI and "
                                         "the credentials")]) from None
    exp = parse(text, storage.join(location, EXPERIMENT_FILE), saved_overrides(text))
    exp = exp.model_copy(update={"storage_path": parent, "name": name})
    pull(exp, journal)
    return exp

