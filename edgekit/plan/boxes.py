"""Boxes to benchmark on: `[[bench.boxes]]` (or `--boxes`), matched against what the cluster offers.

A box is a node that joined with `edgekit agent --box NAME`; its labels are what the agent read from
the machine (CPU model, cores, NUMA nodes, memory, measured bandwidth) and its fingerprint decides
when a cached bench result still applies. `local` means the build machine itself (the default bench).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from edgekit.errors import BoxesMissing

LOCAL_BOX = "local"


@dataclass(frozen=True)
class Box:
    name: str
    labels: dict[str, str] = field(default_factory=dict, compare=False)

    @property
    def fingerprint(self) -> str:
        return self.labels.get("fingerprint", "")


def boxes_to_bench(asked: tuple[str, ...], offered: Mapping[str, Box] | None) -> tuple[Box, ...]:
    """The boxes `asked` (recipe or --boxes) as the cluster offers them; () for the build machine.

    Fails before any work when a box is missing, listing the boxes there are.
    """
    if asked in ((), (LOCAL_BOX,)):
        return ()
    offered = offered or {}
    missing = [name for name in asked if name not in offered]
    if missing:
        raise BoxesMissing(missing, sorted(offered))
    return tuple(offered[name] for name in asked)
