"""The accuracy sign-off as a table in the terminal, for one bundle."""

from __future__ import annotations

from collections.abc import Mapping

from rich.table import Table

from edgekit.cli.common import console


def render_verdicts(verdicts: Mapping[str, str], excluded: list[str], optional: set[str]) -> None:
    if not verdicts:
        return
    table = Table("artifact", "verdict", title="accuracy sign-off")
    colours = {"pass": "green", "fail": "red", "inconclusive": "yellow"}
    for name, verdict in verdicts.items():
        note = " (left out of the bundle)" if name in excluded else ""
        if name in optional and verdict != "pass":
            note += " (required = false: does not fail the build)"
        table.add_row(name, f"[{colours.get(verdict, 'white')}]{verdict}[/]{note}")
    console.print(table)
