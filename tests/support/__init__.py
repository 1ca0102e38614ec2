"""What the unit, contract and e2e suites share: helpers, tiny models, and the session's one stage cache.

Imported as `tests.support.<module>` everywhere (pytest puts the repository root on `sys.path`; scripts/ put it
there themselves). Scripts a test runs by path (`forkcli.py`, `paused_edgekit.py`, `paused_install.py`, and
`pausing.py`, which the paused ones share) live here too: `SUPPORT / "forkcli.py"`.
"""

from __future__ import annotations

from pathlib import Path

SUPPORT = Path(__file__).resolve().parent
REPO = SUPPORT.parents[1]
