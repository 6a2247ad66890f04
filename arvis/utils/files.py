"""Files and folders that appear whole or not at all, with the permissions the process's umask gives.

Torch-free (the command line checks an output folder is writable before it imports torch). Written files and
folders appear whole or not at all (:func:`atomic_path`, :func:`atomic_directory`) and get the permissions the
process's umask gives a new file, as ``open()`` would.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

from arvis.errors import CheckpointError, ConfigError


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; on success it is renamed onto ``path`` atomically.

    Readers never see a half-written file: on error the temporary file is removed and ``path`` is
    untouched. The temporary name ends in ``.tmp`` so folder scanners can skip it. The file gets the
    mode a plain ``open(path, "w")`` would give it (0666 less the umask; ``tempfile.mkstemp``'s 0600
    would make every output private whatever the user's umask says).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp_path = create_temporary(path)
    mode = os.stat(tmp_path).st_mode & 0o777
    try:
        yield tmp_path
        if os.stat(tmp_path).st_mode & 0o777 != mode:  # a writer replaced the file (safetensors writes 0600)
            os.chmod(tmp_path, mode)
        os.replace(tmp_path, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp_path.unlink()
        raise


def current_umask() -> int:
    """The process's umask, read without changing it where the OS allows (Linux ``/proc``)."""
    with contextlib.suppress(OSError, ValueError, StopIteration):
        with open("/proc/self/status") as status:
            return int(next(line for line in status if line.startswith("Umask:")).split()[1], 8)
    mask = os.umask(0o022)  # elsewhere: the classic read-by-setting, restored at once
    os.umask(mask)
    return mask


def apply_umask(folder: str | os.PathLike) -> None:
    """Give ``folder`` and everything under it the permissions the umask gives new files (0666) and folders
    (0777); symlinks are left alone. Writers such as safetensors (0600) and ``tempfile`` (0600 / 0700)
    make their output private whatever the user's umask says; arvis's outputs follow the umask."""
    mask = current_umask()
    os.chmod(folder, 0o777 & ~mask)
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            entry = os.path.join(root, name)
            if not os.path.islink(entry):
                os.chmod(entry, (0o777 if name in dirs else 0o666) & ~mask)



def apply_umask_to_written_files(folder: str | os.PathLike, since_ns: int, subfolders: Iterable[str] = ()) -> None:
    """After a library wrote into ``folder`` (a ``save_pretrained``): give the files it wrote at or after
    ``since_ns`` (``time.time_ns()`` taken before) directly in ``folder`` and in its ``subfolders`` the
    umask's permissions. Nothing else is touched, so saving into a folder that holds other files (even the
    working directory) changes only what was just written."""
    mode = 0o666 & ~current_umask()
    for directory in [Path(folder), *(Path(folder) / name for name in subfolders)]:
        if not directory.is_dir() or directory.is_symlink():
            continue
        for entry in directory.iterdir():
            if entry.is_file() and not entry.is_symlink() and entry.stat().st_mtime_ns >= since_ns:
                os.chmod(entry, mode)


@contextlib.contextmanager
def atomic_directory(path: str | os.PathLike, keep: Iterable[str] | Literal["all"] = ()) -> Iterator[Path]:
    """Yield an empty temporary folder next to ``path``; on success it replaces ``path`` (old content removed).

    A reader sees either the old folder or the complete new one, never a half-written mix; on error ``path``
    is untouched and the temporary folder removed. Entries named in ``keep`` (or every entry, ``"all"``) that the
    new folder lacks are carried over from the old one (a model card surviving a re-export). Files and folders get the
    permissions the umask gives (``tempfile.mkdtemp`` would make the folder 0700, and safetensors writes
    its files 0600 whatever the umask); symlinks are left as they are.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = create_temporary(path, directory=True)
    try:
        yield tmp
        if keep == "all":
            keep = os.listdir(path) if path.is_dir() else ()
        for name in keep:
            if (path / name).exists() and not (tmp / name).exists():
                if (path / name).is_dir():
                    shutil.copytree(path / name, tmp / name, symlinks=True)
                else:
                    shutil.copy2(path / name, tmp / name)
        apply_umask(tmp)
        if path.exists() or path.is_symlink():
            old = create_temporary(path.with_name(f"{path.name}.old"), directory=True)
            old.rmdir()
            os.replace(path, old)
            os.replace(tmp, path)
            if old.is_dir() and not old.is_symlink():
                shutil.rmtree(old, ignore_errors=True)
            else:
                old.unlink()
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def create_temporary(path: str | os.PathLike, directory: bool = False) -> Path:
    """Create a new hidden ``.{name}.{random}.tmp`` file (or folder) next to ``path``, umask-respecting.

    Exclusive creation (``O_EXCL``) with a random name, as ``tempfile.mkstemp`` / ``mkdtemp`` do, but
    with mode 0666 / 0777 so that the process's umask decides the permissions.
    """
    path = Path(path)
    for _ in range(100):
        tmp = path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp"
        try:
            if directory:
                os.mkdir(tmp, 0o777)
            else:
                os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            return tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"could not create a temporary name next to {str(path)!r}")



def read_json_object(path: str | os.PathLike, max_bytes: int | None = None) -> dict[str, Any]:
    """The object a JSON file holds (a configuration); a file over ``max_bytes`` is refused before parsing.

    Raises:
        CheckpointError: the file cannot be read.
        ConfigError: it is not text, not JSON, nested too deep, or not an object (naming the file).
    """
    path = Path(path)
    try:
        if max_bytes is not None and path.stat().st_size > max_bytes:
            raise ConfigError(f"{str(path)!r}: {path.stat().st_size} bytes is not a configuration file")
        text = path.read_text()
    except OSError as err:
        raise CheckpointError(f"{str(path)!r} could not be read ({type(err).__name__}: {err.strerror or err})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{str(path)!r} is not a text (JSON) file") from None
    try:
        obj = json.loads(text)
    except ValueError as err:
        raise ConfigError(f"{str(path)!r} is not valid JSON ({err})") from None
    except RecursionError:
        raise ConfigError(f"{str(path)!r} is nested deeper than the JSON reader allows "
                          f"({sys.getrecursionlimit()} levels); it is not a configuration") from None
    if not isinstance(obj, dict):
        raise ConfigError(f"{str(path)!r}: expected a JSON object, got {type(obj).__name__}")
    return obj


__all__ = ["apply_umask", "apply_umask_to_written_files", "atomic_directory", "atomic_path", "create_temporary",
           "current_umask", "read_json_object"]
