"""Used by Dockerfile.edge: cut a copied bundle down to exactly what its manifest lists, then verify it.

The image is built with the bundle folder as its context, which may hold more than the bundle
(a wheel to install, trusted public keys, a box's runtime.local.toml). What goes into the image is
the manifest's files, plus manifest.json and its signature; a modified bundle fails the image build,
and so does one the image's trust policy refuses (when keys were put in /etc/edgekit/trusted-keys).

    python -m edgekit.runtime.image /stage/bundle
"""

from __future__ import annotations

import sys
from pathlib import Path

from edgekit.errors import EdgekitError
from edgekit.manifest import MANIFEST, SIGNATURE, load_manifest
from edgekit.ship.trust import check_bundle

KEEP = frozenset({MANIFEST, SIGNATURE})


def prune_to_manifest(bundle: Path) -> list[str]:
    """Delete every file the manifest does not list (runtime.local.toml included); return their paths."""
    listed = {str(f["path"]) for f in load_manifest(bundle).get("files", [])} | KEEP
    removed = []
    for path in sorted(bundle.rglob("*"), reverse=True):  # children before their folders
        rel = path.relative_to(bundle).as_posix()
        if path.is_symlink() or path.is_file():
            if rel not in listed:
                path.unlink()
                removed.append(rel)
        elif path.is_dir() and not any(path.iterdir()):
            path.rmdir()
    check_bundle(bundle)
    return sorted(removed)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m edgekit.runtime.image BUNDLE_DIR", file=sys.stderr)
        return 2
    try:
        removed = prune_to_manifest(Path(args[0]))
    except EdgekitError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    for rel in removed:
        print(f"not in the manifest, left out of the image: {rel}")
    print(f"bundle verified: {args[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
