"""`edgekit pull oci://…`: fetch an artifact without installing it, as an .edgekit pack to carry by hand
to a box with no route to the registry (`edgekit install PACK` there checks it like any pack).

The layers download into a folder beside the pack (`.edgekit-pull-*`), kept when the pull fails or is
killed so that the next one resumes, and removed once the pack is written.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from typing import Any

from edgekit._util.fsutil import ensure_free_space
from edgekit.observe.progress import Progress
from edgekit.ship.oci.client import Connection, Registry
from edgekit.ship.oci.pull import fetch_artifact
from edgekit.ship.oci.reference import parse_reference
from edgekit.ship.pack import pack_bundle
from edgekit.ship.unpack import Head


def pull_pack(reference: str, connection: Connection, out: Path | None, progress: Progress) -> dict[str, Any]:
    ref = parse_reference(reference)
    out_dir = Path.cwd() if out is None else (Path(out) if Path(out).is_dir() else Path(out).parent)
    work = out_dir / f".edgekit-pull-{hashlib.sha256(str(ref).encode()).hexdigest()[:12]}"
    bundle = work / "bundle"
    shutil.rmtree(bundle, ignore_errors=True)

    def prepare(head: Head, needed: int) -> Path:
        ensure_free_space(out_dir, needed + head.total_bytes)  # the layers, then the pack written from them
        bundle.mkdir(parents=True)
        return bundle

    fetched = fetch_artifact(Registry(ref, connection), work / "downloads", {}, prepare, progress)
    packed = pack_bundle(bundle, out)
    shutil.rmtree(work)
    return {**packed.as_dict(), "reference": str(ref), "digest": fetched.digest,
            "transfer": fetched.transfer.as_dict()}  # fmt: skip
