"""Bundle signatures in the OpenSSF Model Signing format, through its library (`model-signing`, pinned).

`model.sig` beside manifest.json is a Sigstore bundle holding a DSSE-signed in-toto statement that lists
every file of the bundle with its sha256 — manifest.json, runtime.toml, the report, run.sh and every
model file — except `model.sig` itself and `runtime.local.toml` (a box's own tuning, validated against
the runtime schema instead). Air-gapped fleets sign with an ECDSA key (`edgekit keygen`); Sigstore's
keyless signing (an OIDC identity and the public transparency log) goes through the same library and is
not tested here: it needs the network and an identity provider.

The library's own CLI reads these signatures too:
    model_signing verify key BUNDLE --signature BUNDLE/model.sig --public_key edgekit.pub
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from edgekit.errors import MissingDependencyError, NotASignature, TrustError, UnsignedBundle
from edgekit.manifest import LOCAL_RUNTIME, SIGNATURE, verify_bundle
from edgekit.ship.keys import check_private_key, check_public_key

OUTSIDE_SIGNATURE = (SIGNATURE, LOCAL_RUNTIME)


def _library() -> Any:
    try:
        import model_signing.hashing
        import model_signing.signing
        import model_signing.verifying
    except ImportError as exc:
        raise MissingDependencyError(f"OpenSSF model signing ({exc.name})", "runtime") from None
    return model_signing


def _hashing(ms: Any) -> Any:
    """Every file but the two outside the signature; git files are not exempt (a bundle has none)."""
    config = ms.hashing.Config().use_file_serialization(hashing_algorithm="sha256")
    return config.set_ignored_paths(paths=list(OUTSIDE_SIGNATURE), ignore_git_paths=False)


def sign_bundle(bundle: Path, private_key: Path) -> Path:
    """Sign every file of `bundle` (checked against its manifest first) with an EC key. Returns model.sig's path."""
    bundle = Path(bundle).resolve()  # a link such as ROOT/current: check and use the slot it names now
    verify_bundle(bundle)  # never sign a bundle that does not match its own manifest
    check_private_key(private_key)
    ms = _library()
    config = ms.signing.Config().use_elliptic_key_signer(private_key=private_key).set_hashing_config(_hashing(ms))
    return _write_signature(bundle, lambda path: config.sign(bundle, path))


def sign_bundle_keyless(bundle: Path) -> Path:  # pragma: no cover - untested here: needs the network and an OIDC login
    """Sigstore keyless signing: a short-lived certificate for your OIDC identity, logged in Rekor."""
    bundle = Path(bundle).resolve()  # a link such as ROOT/current: check and use the slot it names now
    verify_bundle(bundle)
    ms = _library()
    config = ms.signing.Config().use_sigstore_signer().set_hashing_config(_hashing(ms))
    return _write_signature(bundle, lambda path: config.sign(bundle, path))


def _write_signature(bundle: Path, sign: Callable[[Path], None]) -> Path:
    # Written beside the bundle and renamed in: a kill leaves no stray file inside it.
    fd, tmp = tempfile.mkstemp(dir=bundle.parent, prefix=f".{bundle.name}.{SIGNATURE}.", suffix=".tmp")
    os.close(fd)
    try:
        sign(Path(tmp))
        os.chmod(tmp, 0o644)
        os.replace(tmp, bundle / SIGNATURE)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return bundle / SIGNATURE


def verify_signature(bundle: Path, public_keys: Sequence[Path]) -> Path:
    """The key of `public_keys` whose signature covers exactly the bundle's files; TrustError naming why if none."""
    bundle = Path(bundle).resolve()  # a link such as ROOT/current: check and use the slot it names now
    signature = _signature_file(bundle)
    ms = _library()
    for key in public_keys:
        check_public_key(key)
        config = ms.verifying.Config().use_elliptic_key_verifier(public_key=key).set_hashing_config(_hashing(ms))
        if _verified_by(config, bundle, signature, key):
            return key
    names = ", ".join(str(k) for k in public_keys) or "none"
    raise TrustError(
        f"{signature} was made with a key that is not trusted here (trusted keys: {names})",
        "install the fleet's public key in the trust folder (or pass --trusted-key), or get a bundle signed by it",
    )


def _signature_file(bundle: Path) -> Path:
    signature = bundle / SIGNATURE
    if signature.is_symlink() or not signature.is_file():
        raise UnsignedBundle(bundle, f"no {SIGNATURE}")
    return signature


def _verified_by(config: Any, bundle: Path, signature: Path, key: Path) -> bool:
    """True when `key` made `signature` and the files match it; False when another key made it; else TrustError."""
    from cryptography.exceptions import InvalidSignature

    try:
        config.verify(bundle, signature)
    except InvalidSignature:
        raise TrustError(
            f"{signature} does not verify with {key}, the key it names: damaged or forged",
            "do not use this bundle; get it again from a trusted source",
        ) from None
    except ValueError as exc:
        text = str(exc)
        if text.startswith("Key mismatch"):
            return False
        if text.startswith("Signature mismatch"):
            raise TrustError(
                f"{bundle} is not what was signed: {_differences(text)}",
                "the bundle was changed after signing (or damaged); get it again from a trusted source",
            ) from None
        raise NotASignature(signature, text.splitlines()[0][:200]) from None
    except (KeyError, TypeError, AttributeError, IndexError) as exc:
        raise NotASignature(signature, f"{type(exc).__name__}: {exc}".splitlines()[0][:200]) from None
    return True


def _differences(text: str) -> str:
    """The files the library's mismatch message names, readably (its digests are bytes reprs)."""
    found = [f"{name} differs" for name in re.findall(r"Hash mismatch for \\*'([^'\\]+)\\*'", text)]
    for kind, names in re.findall(r"(Extra|Missing) files[^:]*: ([^\"'\]]+)", text):
        found += [f"{name.strip()} {'was added' if kind == 'Extra' else 'is missing'}" for name in names.split(",")]
    return "; ".join(found) or text.removeprefix("Signature mismatch: ")
