"""The bundle manifest: provenance, every file's sha256, artifacts and verdicts; and its verification.

Used on the edge box too (verify before load), so it imports nothing heavy.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgekit._util.hashing import sha256_file
from edgekit.errors import IntegrityError, NotABundleError

MANIFEST = "manifest.json"
SIGNATURE = "model.sig"  # the OpenSSF model signature of every file (edgekit.ship.sign)
LOCAL_RUNTIME = "runtime.local.toml"  # a box's own tuning (`edgekit tune`): outside the manifest and the signature
SCHEMA_VERSION = 1
# Files that may exist beside the manifest without being listed in it: the manifest itself, the
# signature, and the box-local runtime override written by `edgekit tune`.
UNLISTED = frozenset({MANIFEST, SIGNATURE, LOCAL_RUNTIME})
# The detached Ed25519 signature of edgekit 0.1: no longer read, and named as such when found.
OLD_SIGNATURE = "manifest.sig"


def load_manifest(bundle: Path) -> dict[str, Any]:
    """The bundle's manifest. A path that is not a bundle at all is a bad argument (exit 2); a bundle whose
    manifest is a link, unreadable or of another schema does not match it (exit 4)."""
    bundle = Path(bundle)
    if not bundle.exists():
        raise NotABundleError(bundle, "no manifest.json: the path does not exist")
    if not bundle.is_dir():
        raise NotABundleError(bundle, "a file, not a folder")
    path = bundle / MANIFEST
    if path.is_symlink():
        raise IntegrityError(bundle, [f"{MANIFEST} is a link; bundles hold plain files only"])
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise NotABundleError(bundle) from None
    except IsADirectoryError:
        raise IntegrityError(bundle, [f"{MANIFEST} is a folder, not a file"]) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise IntegrityError(bundle, [f"{MANIFEST} is not valid JSON ({exc})"]) from None
    if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION:
        raise IntegrityError(
            bundle, [f"{MANIFEST} has schema_version {data.get('schema_version')!r}, expected {SCHEMA_VERSION}"]
        )
    return data


def verify_bundle(bundle: Path, *, check_hashes: bool = True) -> dict[str, Any]:
    """Check that the bundle holds exactly the files its manifest lists, with their sizes and hashes.

    Returns the manifest; raises IntegrityError naming every file that differs.
    """
    check = check_bundle(bundle, check_hashes=check_hashes)
    if check.problems:
        raise IntegrityError(Path(bundle), check.problems)
    return check.manifest


@dataclass
class BundleCheck:
    """Every file's state against the manifest (`edgekit verify --json`), and the problems in words."""

    manifest: dict[str, Any]
    files: list[dict[str, Any]] = field(default_factory=list)  # {path, size, state}
    problems: list[str] = field(default_factory=list)

    def add(self, rel: str, size: int | None, state: str, problem: str | None = None) -> None:
        self.files.append({"path": rel, "size": size, "state": state})
        if problem:
            self.problems.append(problem)


def check_bundle(bundle: Path, *, check_hashes: bool = True) -> BundleCheck:
    """The state of every file: ok, modified, size, missing, link or extra (a manifest that cannot be read raises)."""
    bundle = Path(bundle)
    check = BundleCheck(load_manifest(bundle))
    if not isinstance(check.manifest.get("files"), list):
        raise IntegrityError(bundle, [f"{MANIFEST} has no list of files"])
    listed = listed_files(check.manifest, check.problems)
    root = bundle.resolve()
    for rel, record in sorted(listed.items()):
        path = bundle / rel
        if path.is_symlink() or not path.resolve().is_relative_to(root):
            check.add(rel, record["size"], "link", f"{rel}: is a link; bundles hold plain files only")
        elif not path.is_file():
            check.add(rel, record["size"], "missing", f"{rel}: missing")
        elif (size := path.stat().st_size) != record["size"]:
            check.add(rel, size, "size", f"{rel}: size {size} differs from the manifest's {record['size']}")
        elif check_hashes and sha256_file(path) != record["sha256"]:
            check.add(rel, size, "modified", f"{rel}: sha256 differs from the manifest (modified)")
        else:
            check.add(rel, size, "ok" if check_hashes else "size ok")
    for path in sorted(bundle.rglob("*")):
        rel = path.relative_to(bundle).as_posix()
        if path.is_dir() and not path.is_symlink():
            continue
        if rel in UNLISTED and rel != MANIFEST and (path.is_symlink() or not path.is_file()):
            check.add(rel, None, "link", f"{rel}: is a link or not a regular file; bundles hold plain files only")
        elif rel == OLD_SIGNATURE and rel not in listed:
            check.add(rel, path.lstat().st_size, "extra",
                      f"{rel}: an Ed25519 signature of edgekit 0.1, no longer read: delete it and sign the bundle "
                      "again with `edgekit sign` (OpenSSF model signing, model.sig)")  # fmt: skip
        elif rel not in listed and rel not in UNLISTED:
            size = path.lstat().st_size
            check.add(rel, size, "extra", f"{rel}: not in the manifest (extra file)")
    return check


def listed_files(manifest: dict[str, Any], problems: list[str]) -> dict[str, dict[str, Any]]:
    """The manifest's file records by path; what is wrong with any record is appended to `problems`."""
    listed: dict[str, dict[str, Any]] = {}
    records = manifest.get("files")
    if not isinstance(records, list):
        problems.append(f"{MANIFEST} has no list of files")
        return listed
    for i, record in enumerate(records):
        if not (
            isinstance(record, dict)
            and isinstance(record.get("path"), str)
            and isinstance(record.get("size"), int)
            and isinstance(record.get("sha256"), str)
        ):
            problems.append(f"files[{i}]: not a {{path, size, sha256}} record in {MANIFEST}")
            continue
        rel = record["path"]
        if not plain_relative(rel):
            problems.append(f"{rel!r}: manifest lists a path outside the bundle (or not a plain relative path)")
        elif rel in listed or rel in UNLISTED:
            problems.append(f"{rel}: listed twice in {MANIFEST}" if rel in listed else f"{rel}: may not be listed")
        else:
            listed[rel] = record
    return listed


def plain_relative(rel: str) -> bool:
    """'models/a.gguf' yes; '', '/etc/x', '../x', 'a/../b', './a', 'a//b', 'a\\b', 'C:x', NUL bytes no."""
    if not rel or "\0" in rel or "\\" in rel or rel.startswith("/") or ":" in rel.split("/")[0]:
        return False
    parts = rel.split("/")
    return all(part not in ("", ".", "..") for part in parts)


def artifact_record(manifest: dict[str, Any], name: str | None) -> dict[str, Any]:
    artifacts = manifest.get("artifacts", [])
    if not artifacts:
        raise IntegrityError(Path("."), ["manifest lists no artifacts"])
    if name is None:
        name = manifest.get("default_artifact") or artifacts[0]["name"]
    for record in artifacts:
        if record["name"] == name:
            return record
    from edgekit.errors import UsageError

    raise UsageError(
        f"no artifact named {name!r} in this bundle",
        f"choose one of: {', '.join(a['name'] for a in artifacts)}",
    )
