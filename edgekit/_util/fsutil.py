"""Atomic writes and disk-space checks."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import glob
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, overload

from edgekit.errors import DiskSpaceError

# Leave this much free after a write, so the machine stays usable.
DISK_MARGIN = 256 * 2**20


def write_text_atomic(path: Path, text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: Path, data: bytes, mode: int | None = None) -> None:
    """Write via a temp file beside `path` and one rename; `mode` sets permissions before the rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        if mode is not None:
            os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_json_atomic(path: Path, data: Any) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")


def fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def ensure_free_space(path: Path, needed: int, *, margin: int = DISK_MARGIN, hint: str | None = None) -> None:
    """Raise before writing `needed` bytes under `path` if the disk cannot take them (and keep `margin` free)."""
    probe = path
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if free - needed < margin:
        raise DiskSpaceError(probe, needed + margin, free, hint)


@contextlib.contextmanager
def staging_dir(final: Path) -> Iterator[Path]:
    """A temp folder beside `final`; on success it takes `final`'s place atomically, else it is removed.

    Replacing an existing `final` is one atomic exchange on Linux (`renameat2(RENAME_EXCHANGE)`): at
    every instant `final` is either the complete old folder or the complete new one, even if the
    process is killed. Elsewhere it falls back to two renames, and the next call puts a previous
    folder back if a kill fell between them. Temp folders of killed processes are removed: the process
    staging a folder holds its lock (`flock`), which the kernel drops when the process dies.
    """
    final.parent.mkdir(parents=True, exist_ok=True)
    with holding(final.parent):  # recovery, and a new temp folder locked before anyone else can see it unlocked
        _recover_staging(final)
        tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}.pid{os.getpid()}.", suffix=".partial"))
        held = lock_folder(tmp)
    try:
        yield tmp
        fsync_dir(tmp)
        swap_in(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        os.close(held)


def swap_in(tmp: Path, final: Path) -> None:
    """Put the complete folder `tmp` at `final`, replacing what is there in one atomic step where possible."""
    if not (final.exists() or final.is_symlink()):
        os.replace(tmp, final)
        fsync_dir(final.parent)
        return
    if exchange_paths(tmp, final):  # tmp now holds the previous folder (or link)
        fsync_dir(final.parent)
        if tmp.is_symlink():
            tmp.unlink()
        shutil.rmtree(tmp, ignore_errors=True)
        return
    old = final.with_name(f".{final.name}.pid{os.getpid()}.old")
    held = lock_folder(final) if final.is_dir() and not final.is_symlink() else None
    try:
        os.replace(final, old)
        os.replace(tmp, final)
        fsync_dir(final.parent)
    finally:
        if held is not None:
            os.close(held)
    shutil.rmtree(old, ignore_errors=True)


def _recover_staging(final: Path) -> None:
    """Undo what killed `staging_dir` calls left beside `final`: restore a previous folder, drop temp folders."""
    for leftover in sorted(final.parent.glob(f".{glob.escape(final.name)}.pid*")):
        match = re.fullmatch(rf"\.{re.escape(final.name)}\.pid\d+\.(?:.*\.partial|old)", leftover.name)
        if not match or not abandoned(leftover):
            continue
        if leftover.name.endswith(".old") and not final.exists():
            os.replace(leftover, final)  # killed between the fallback's two renames: the old folder is complete
        else:
            shutil.rmtree(leftover, ignore_errors=True)


@overload
def lock_folder(path: Path, *, wait: Literal[True] = True) -> int: ...
@overload
def lock_folder(path: Path, *, wait: bool) -> int | None: ...
def lock_folder(path: Path, *, wait: bool = True) -> int | None:
    """Lock folder `path` (flock); return the descriptor that holds the lock until it is closed.

    None when another process holds it and `wait` is false. The kernel drops the lock when its holder
    dies, whatever PID namespace it ran in, so a free lock means the folder's producer is gone.
    """
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextlib.contextmanager
def holding(path: Path) -> Iterator[None]:
    fd = lock_folder(path)
    try:
        yield
    finally:
        os.close(fd)


def abandoned(path: Path) -> bool:
    """True when no live process holds `path`'s lock: its producer died (or it is not a folder at all)."""
    try:
        fd = lock_folder(path, wait=False)
    except OSError:  # gone, a link or a file: nothing holds it
        return True
    if fd is None:
        return False
    os.close(fd)
    return True


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def exchange_paths(a: Path, b: Path) -> bool:
    """Swap two paths in one atomic step (Linux renameat2 RENAME_EXCHANGE). False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):  # a libc without the wrapper (glibc < 2.28)
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    renameat2.restype = ctypes.c_int
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):  # old kernel, or a filesystem without it
        return False
    raise OSError(err, os.strerror(err), str(a), None, str(b))
