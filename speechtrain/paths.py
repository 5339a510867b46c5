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

__all__ = ["Roots", "link_targets"]

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
        self._dirs: dict[str, Path | None] = {}  # a folder as given -> resolved (a manifest's entries share a few)

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
        full = Path(path).expanduser().absolute()  # keeps '..': the kernel takes it after the link before it
        parent = str(full.parent)
        if parent not in self._dirs:
            self._dirs[parent] = self._walk(full.parent.parts)
        folder = self._dirs[parent]
        if folder is None:
            return None
        real = self._step(folder, full.name) if full.name else folder
        if real is None or not any(real.is_relative_to(r) for r in self.roots):
            return None
        return real

    def inside(self, path: str | os.PathLike[str]) -> bool:
        return self.resolve(path) is not None

    def __str__(self) -> str:
        return ", ".join(str(r) for r in self.roots)
