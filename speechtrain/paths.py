"""The one path check of the doors that act for others (the web UI and the jobs it starts): a path is inside a root
when the path the kernel opens, ``..`` taken after each link as the kernel takes it, lies under a resolved root.

A lexical check (``os.path.normpath``) and the kernel disagree after a link: with an operator's
``data/myvoice -> ~/datasets/myvoice``, ``data/myvoice/../secret.csv`` is ``data/secret.csv`` to ``normpath`` but
``~/datasets/secret.csv`` to ``open()``. :class:`Roots` walks a path component by component as the kernel does;
a link met inside a root whose links are followed (the operator's ``--data``) admits its target, and that target
(not its parent) becomes a root. :meth:`Roots.resolve` returns the resolved path, which is what a job is handed.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

__all__ = ["Roots", "link_targets", "writable_file", "write_atomic"]

#: how deep and how wide :func:`link_targets` looks for the operator's links under a root (a corpus of 100k files
#: under ``--data`` must not make every check slow; a deeper link is still admitted when a path goes through it)
SCAN_DEPTH = 3
SCAN_ENTRIES = 20_000


def _real(path: Path) -> Path | None:
    """``path`` resolved (links followed, ``..`` after them); None for a loop of links."""
    try:
        return path.resolve()
    except (RuntimeError, OSError):  # a symlink loop (3.11 raises RuntimeError)
        return None


def link_targets(root: Path, depth: int = SCAN_DEPTH, limit: int = SCAN_ENTRIES) -> list[Path]:
    """The resolved targets of the links under ``root`` (not followed into), ``depth`` folders deep and at most
    ``limit`` entries looked at."""
    found: list[Path] = []
    level, seen = [root], 0
    for _ in range(depth):
        deeper: list[Path] = []
        for folder in level:
            try:
                with os.scandir(folder) as it:
                    for entry in it:
                        seen += 1
                        if seen > limit:
                            return found
                        if entry.is_symlink():
                            target = _real(Path(entry.path))
                            if target is not None:
                                found.append(target)
                        elif entry.is_dir(follow_symlinks=False):
                            deeper.append(Path(entry.path))
            except OSError:
                continue
        level = deeper
    return found


class Roots:
    """Folders a path must lie in, as the kernel resolves it. ``follow``: the roots whose links (the operator's)
    admit their targets as roots too; the other roots' links are resolved and the target must lie in a root."""

    def __init__(self, roots: Iterable[str | os.PathLike[str]], follow: Iterable[str | os.PathLike[str]] = ()) -> None:
        self.follow = [r for r in (_real(Path(p).expanduser().absolute()) for p in follow) if r is not None]
        given = [_real(Path(p).expanduser().absolute()) for p in roots]
        self.roots: list[Path] = list(dict.fromkeys([r for r in given if r is not None] + self.follow))
        for root in self.follow:
            self._admit_all(link_targets(root))
        self._dirs: dict[str, tuple[str | None, bool]] = {}  # a folder as given -> (resolved, under a root)

    def _admit_all(self, targets: Iterable[Path]) -> None:
        for target in targets:
            if target not in self.roots:
                self.roots.append(target)
                self.follow.append(target)  # a linked corpus's own links are the operator's too

    def _followed(self, folder: Path) -> bool:
        return any(folder.is_relative_to(r) for r in self.follow)

    def _step(self, cur: Path, part: str) -> Path | None:
        """``cur`` (resolved) then ``part``, as the kernel takes it; a link inside a followed root admits its target."""
        if part == "..":
            return cur.parent
        nxt = cur / part
        if not nxt.is_symlink():
            return nxt
        target = _real(nxt)
        if target is not None and self._followed(cur):
            self._admit_all([target])
        return target

    def _walk(self, parts: tuple[str, ...]) -> Path | None:
        cur: Path | None = Path(parts[0])
        for part in parts[1:]:
            cur = self._step(cur, part) if cur is not None else None
        return cur

    def resolve(self, path: str | os.PathLike[str]) -> Path | None:
        """The path the kernel opens for ``path`` (relative to the working directory) when it lies under a root
        (or a root itself), else None. Nothing needs to exist."""
        found = self._resolve(path)
        return None if found is None else Path(found)

    def _resolve(self, path: str | os.PathLike[str]) -> str | None:
        # strings, not pathlib, on this path: a manifest of 100k entries is checked entry by entry
        given = os.path.expanduser(os.fspath(path))
        full = given if os.path.isabs(given) else os.path.join(os.getcwd(), given)  # keeps '..' as the kernel does
        parent, name = os.path.split(full)
        if parent not in self._dirs:  # a manifest's entries share a few folders: each is walked once
            walked = self._walk(Path(parent).parts)
            self._dirs[parent] = (None, False) if walked is None else (str(walked), self._under(walked))
        folder, folder_inside = self._dirs[parent]
        if folder is None:
            return None
        if name in ("", "."):
            return folder if folder_inside else None
        real = os.path.join(folder, name)
        if name != ".." and not os.path.islink(real):  # a plain name: inside when its folder is (or it is a root)
            return real if folder_inside or self._under(Path(real)) else None
        stepped = self._step(Path(folder), name)
        return str(stepped) if stepped is not None and self._under(stepped) else None

    def _under(self, real: Path) -> bool:
        return any(real.is_relative_to(r) for r in self.roots)

    def inside(self, path: str | os.PathLike[str]) -> bool:
        return self._resolve(path) is not None

    def __str__(self) -> str:
        return ", ".join(str(r) for r in self.roots)


def writable_file(path: str | os.PathLike[str], flag: str = "") -> Path:
    """``path`` as a file to write (absolute), or one UserError naming it: a folder, or a path under a file."""
    from speechtrain.errors import UserError

    given = Path(path).expanduser()
    full = given.absolute()
    named = f"{flag} {path}" if flag else str(path)
    if full.is_dir():
        raise UserError(f"{named}: is a folder; give a file name (e.g. {given / 'report.json'})")
    for parent in full.parents:
        if parent.exists():
            if not parent.is_dir():
                raise UserError(f"{named}: {parent} is a file, not a folder; choose another path")
            break
    return full


def _mode(path: Path) -> int:
    """The permission bits a file written at ``path`` gets: the old file's, else 0666 less the umask."""
    try:
        return path.stat().st_mode & 0o7777
    except OSError:
        mask = os.umask(0)
        os.umask(mask)
        return 0o666 & ~mask


def write_atomic(path: str | os.PathLike[str], data: str | bytes, flag: str = "") -> Path:
    """Write ``data`` to a temporary file beside ``path`` (on the same file system), then rename it over ``path``: a
    reader, a kill or a full disk leaves the old file or the new one, never half of one. A folder, a path under a
    file, or a write that fails (a full disk) is one UserError naming the path (``flag``: the option that named it);
    nothing is left behind."""
    import errno
    import tempfile

    from speechtrain.errors import UserError, free_space

    full = writable_file(path, flag)
    named = f"{flag} {path}" if flag else str(path)
    tmp: str | None = None
    try:
        full.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{full.name}.", suffix=".tmp", dir=full.parent)
        os.fchmod(fd, _mode(full))  # mkstemp makes it 0600: the file gets the mode an ordinary write gives it
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode("utf-8") if isinstance(data, str) else data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, full)
    except OSError as exc:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        full_disk = exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
        why = "the disk is full" if full_disk else (exc.strerror or str(exc))
        raise UserError(
            f"{named}: not written ({why}; {free_space(full.parent)} free there): nothing was changed; free some "
            "space or choose another path"
        ) from None
    except BaseException:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        raise
    return full
