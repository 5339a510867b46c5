"""AccelRecord: what one acceleration changed, or why it did not apply."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class AccelRecord:
    """The outcome of one ``apply_xxx`` call.

    ``applied``: the acceleration is in effect. ``exact``: it keeps the same maths (only the
    float rounding order may differ) rather than approximating it (lower precision).
    ``detail``: what changed, or why it did not apply. ``info``: counts, backends, kernels.
    """

    name: str
    applied: bool
    exact: bool
    detail: str
    info: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (JSON-safe when ``info`` is)."""
        return asdict(self)

    def line(self) -> str:
        """One line for the start-up summary."""
        mark = "on " if self.applied else "off"
        kind = "exact" if self.exact else "approx"
        return f"  [{mark}] {self.name:<24} ({kind:<6}) {self.detail}"


def merge_records(name: str, records: dict[str, AccelRecord]) -> AccelRecord:
    """One record for an acceleration applied to several modules (e.g. a GAN's generator and
    discriminator): applied when it applied to any module; the detail names each module."""
    if len(records) == 1:
        (only,) = records.values()
        return AccelRecord(name, only.applied, only.exact, only.detail, dict(only.info))
    applied = any(r.applied for r in records.values())
    exact = all(r.exact for r in records.values())
    detail = "; ".join(f"{mod}: {r.detail}" for mod, r in records.items())
    info = {mod: {"applied": r.applied, "detail": r.detail, **r.info} for mod, r in records.items()}
    return AccelRecord(name, applied, exact, detail, {"modules": info})
