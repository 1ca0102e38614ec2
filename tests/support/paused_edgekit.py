"""`edgekit`, stopped at the worst moment of one stage, for the kill tests (tests/e2e/test_faults.py).

    python tests/support/paused_edgekit.py STAGE FLAG_FILE build recipe.toml ...

STAGE is a stage whose output is complete in its temp folder but not yet renamed into the cache (fetch,
convert, quantize, reference, validate, bench), or "bundle": the bundle complete beside dist/<name>/ but
not yet swapped in. There this process writes its pid to FLAG_FILE and waits to be killed. The seams
are the cache's `_publish` and `fsutil.swap_in`, patched here, in the test's own process: production
code has no test hook.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pausing import pause, run_edgekit


def main() -> None:
    stage, flag, *args = sys.argv[1:]

    from edgekit._util import fsutil
    from edgekit.store import cache

    if stage == "bundle":
        swap_in = fsutil.swap_in

        def paused_swap(tmp: Path, final: Path) -> None:
            pause(flag)
            swap_in(tmp, final)

        fsutil.swap_in = paused_swap
    else:
        publish = cache.StageCache._publish

        def paused_publish(tmp: Path, final: Path) -> None:
            if final.parent.name == stage:
                pause(flag)
            publish(tmp, final)

        cache.StageCache._publish = staticmethod(paused_publish)  # type: ignore[method-assign]
    run_edgekit(args)


if __name__ == "__main__":
    main()
