"""`edgekit install`, stopped at one step, for the kill tests (tests/e2e/test_ship.py).

    python tests/support/paused_install.py POINT FLAG_FILE install PACK --root ROOT --trusted-key KEY

POINT is where this process writes its pid to FLAG_FILE and waits to be killed:
    unpack     the first model file written into the new slot, the others not yet
    verified   the new slot unpacked and verified (signature by a trusted key), not yet smoke-tested
    switched   `current` switched to the new slot and recorded, old slots not yet removed
(The kill during the smoke test needs no pause: the test kills the installer while its smoke-test child runs.)
The seams are `edgekit.ship.unpack.extract_member` and `edgekit.ship.install.verify_slot` / `cleanup_slots`,
patched here, in this process: production code has no test hook.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from pausing import pause, run_edgekit


def main() -> None:
    point, flag, *args = sys.argv[1:]

    from edgekit.ship import install, unpack

    if point == "unpack":
        extract = unpack.extract_member

        def paused_extract(tar: Any, member: Any, record: Any, dest: Path, label: str) -> None:
            extract(tar, member, record, dest, label)
            if member.name.startswith("models/"):
                pause(flag)

        unpack.extract_member = paused_extract
    elif point == "verified":
        verify = install.verify_slot

        def paused_verify(slot: Path, policy: Any) -> Any:
            checked = verify(slot, policy)
            pause(flag)
            return checked

        install.verify_slot = paused_verify
    elif point == "switched":
        cleanup = install.cleanup_slots

        def paused_cleanup(box: Any, keep: int) -> list[str]:
            pause(flag)
            return cleanup(box, keep)

        install.cleanup_slots = paused_cleanup
    else:
        raise SystemExit(f"unknown pause point {point!r}")
    run_edgekit(args)


if __name__ == "__main__":
    main()
