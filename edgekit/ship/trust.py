"""The box's trust policy: whose signature a bundle must carry before anything of it is loaded.

The policy is the public keys in /etc/edgekit/trusted-keys/*.pub (another folder with EDGEKIT_TRUST_DIR),
plus any `--trusted-key` given to a command. When a policy exists, `run`, `serve`, `bench`, `tune`,
`verify`, `run.sh` and the image's entrypoint refuse (exit 4) a bundle that is unsigned, signed by a key
outside the policy, or changed after signing (manifest.json included), before the model is loaded. An
existing trust folder without keys refuses every bundle: a box that was meant to check never stops
checking because its keys went missing. Without a policy, every file is checked against manifest.json
(which proves the bundle is intact, not who made it).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgekit.errors import TrustError, TrustPolicyError
from edgekit.manifest import verify_bundle

TRUST_DIR_ENV = "EDGEKIT_TRUST_DIR"
DEFAULT_TRUST_DIR = Path("/etc/edgekit/trusted-keys")


@dataclass(frozen=True)
class TrustPolicy:
    keys: tuple[Path, ...]
    source: str  # where the keys came from, for messages


@dataclass(frozen=True)
class Checked:
    manifest: dict[str, Any]
    signed_by: Path | None  # the trusted key that verified it; None when the box has no policy (hashes only)


def trust_dir() -> Path:
    return Path(os.environ.get(TRUST_DIR_ENV) or DEFAULT_TRUST_DIR)


def box_policy(extra_keys: Sequence[Path] = ()) -> TrustPolicy | None:
    """This box's policy: the trust folder's *.pub keys and `extra_keys`; None when there is neither."""
    folder = trust_dir()
    keys = [Path(k) for k in extra_keys]
    sources = [f"--trusted-key {', '.join(str(k) for k in keys)}"] if keys else []
    if folder.is_dir():
        try:
            found = sorted(p for p in folder.iterdir() if p.suffix == ".pub")
        except OSError as exc:
            raise TrustPolicyError(
                f"cannot read the trust folder {folder}: {exc.strerror}", "make it readable by this user"
            ) from None
        keys = found + keys
        sources.insert(0, f"{folder}: {len(found)} key{'s' if len(found) != 1 else ''}")
    elif os.environ.get(TRUST_DIR_ENV):
        raise TrustPolicyError(
            f"{TRUST_DIR_ENV}={folder} is not a folder",
            "create it and put the fleet's public keys (*.pub) in it, or unset the variable",
        )
    if not sources:
        return None
    return TrustPolicy(tuple(keys), "; ".join(sources))


def check_bundle(bundle: Path, extra_keys: Sequence[Path] = ()) -> Checked:
    """What run/serve/bench/tune/verify call before loading anything: the box's policy, or the hashes without one."""
    policy = box_policy(extra_keys)
    bundle = Path(bundle).resolve()  # ROOT/current: the slot it names now, checked as one
    if policy is None:
        return Checked(verify_bundle(bundle), None)
    return verify_trusted(bundle, policy)


def verify_trusted(bundle: Path, policy: TrustPolicy) -> Checked:
    """Every file as its manifest lists it, signed by a key of `policy`. The signature hashes each file once:
    a signed manifest then vouches for itself, so the manifest check needs only names and sizes."""
    from edgekit.ship.sign import verify_signature

    bundle = Path(bundle).resolve()
    manifest = verify_bundle(bundle, check_hashes=False)  # names an extra, missing or linked file first
    if not policy.keys:
        raise TrustError(
            f"refused by this box's trust policy ({policy.source}): it holds no keys, so no bundle is trusted",
            f"put the fleet's public key (edgekit.pub) in {trust_dir()}, or pass --trusted-key",
        )
    try:
        key = verify_signature(bundle, policy.keys)
    except TrustError as exc:
        raise exc.reworded(f"refused by this box's trust policy ({policy.source}): {exc.message}") from None
    return Checked(manifest, key)


def require_policy(extra_keys: Sequence[Path] = ()) -> TrustPolicy:
    """The policy `install` and `rollback` need: they never put a bundle in place that no key vouches for."""
    policy = box_policy(extra_keys)
    if policy is None:
        raise TrustPolicyError(
            f"this box has no trust policy ({trust_dir()} does not exist and no --trusted-key was given): "
            "it installs only bundles signed by a key it trusts",
            f"put the fleet's public key in {trust_dir()}/ (e.g. fleet.pub), or pass --trusted-key fleet.pub",
        )
    return policy
