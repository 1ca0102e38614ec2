"""The OCI parts that need no registry: references, credentials, the artifact's layout. (Push, pull and
install over a real registry: tests/e2e/test_registry.py.)"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from edgekit._util.hashing import file_records
from edgekit.errors import UsageError
from edgekit.ship.oci.credentials import credentials_for
from edgekit.ship.oci.errors import ArtifactError
from edgekit.ship.oci.layout import (
    ARTIFACT_TYPE,
    SMALL_FILES,
    WEIGHT,
    image_manifest,
    layers_of,
    model_config,
    parse_manifest,
)
from edgekit.ship.oci.reference import parse_reference


@pytest.mark.parametrize(
    ("text", "host", "repository", "target"),
    [
        ("oci://registry.example.com/fleet/smollm2:stable", "registry.example.com", "fleet/smollm2", "stable"),
        ("oci://127.0.0.1:5000/smollm2", "127.0.0.1:5000", "smollm2", "latest"),
        ("oci://[::1]:5000/a/b@sha256:" + "a" * 64, "[::1]:5000", "a/b", "sha256:" + "a" * 64),
    ],
)
def test_references_name_host_repository_and_tag_or_digest(text: str, host: str, repository: str, target: str) -> None:
    ref = parse_reference(text)
    assert (ref.host, ref.repository, ref.target) == (host, repository, target)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("registry.example.com/a:b", "does not start with oci://"),
        ("oci://host", "names no HOST"),
        ("oci://host/Fleet:x", "is not a repository name"),
        ("oci://host/a:-x", "is not a tag"),
        ("oci://host/a@sha256:abc", "is not a sha256"),
    ],
)
def test_a_malformed_reference_is_refused_with_an_example(text: str, why: str) -> None:
    with pytest.raises(UsageError, match=why) as caught:
        parse_reference(text)
    assert "e.g. oci://" in str(caught.value)


@pytest.mark.parametrize(("host", "loopback"), [("127.0.0.1:5000", True), ("localhost", True), ("[::1]:80", True),
                                                ("10.0.0.2:5000", False), ("registry.example.com", False)])  # fmt: skip
def test_only_loopback_hosts_count_as_loopback(host: str, loopback: bool) -> None:
    assert parse_reference(f"oci://{host}/a:b").is_loopback() is loopback


def test_credentials_come_from_the_environment_first_then_the_docker_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    auth = base64.b64encode(b"box:from-file").decode()
    (tmp_path / "config.json").write_text(json.dumps({"auths": {"https://reg.example:5000": {"auth": auth}}}))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    monkeypatch.delenv("EDGEKIT_REGISTRY_USER", raising=False)
    monkeypatch.delenv("EDGEKIT_REGISTRY_PASSWORD", raising=False)
    found = credentials_for("reg.example:5000")
    assert found is not None and (found.user, found.password) == ("box", "from-file")
    assert "from-file" not in repr(found)
    assert credentials_for("other.example") is None
    monkeypatch.setenv("EDGEKIT_REGISTRY_USER", "ci")
    with pytest.raises(UsageError, match="set both"):
        credentials_for("reg.example:5000")
    monkeypatch.setenv("EDGEKIT_REGISTRY_PASSWORD", "from-env")
    found = credentials_for("reg.example:5000")
    assert found is not None and (found.user, found.password) == ("ci", "from-env")
    assert found.source == "$EDGEKIT_REGISTRY_USER"


def test_a_docker_config_auth_that_is_not_user_colon_password_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"auths": {"reg": {"auth": "bm90LWEtcGFpcg=="}}}))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    monkeypatch.delenv("EDGEKIT_REGISTRY_USER", raising=False)
    monkeypatch.delenv("EDGEKIT_REGISTRY_PASSWORD", raising=False)
    with pytest.raises(UsageError, match="not base64 of USER:PASSWORD"):
        credentials_for("reg")


def _bundle(folder: Path) -> Path:
    (folder / "models").mkdir(parents=True)
    (folder / "models" / "m.gguf").write_bytes(b"\1" * (2**20 + 5))
    (folder / "runtime.toml").write_text("[server]\n")
    manifest = {"schema_version": 1, "name": "tiny", "release": 3, "artifacts": [], "files": file_records(folder)}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    (folder / "model.sig").write_text("{}")
    return folder


def test_the_same_bundle_always_makes_the_same_layers_and_manifest(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path / "b")
    manifest = json.loads((bundle / "manifest.json").read_text())

    def made() -> bytes:
        layers = layers_of(bundle, manifest)
        return image_manifest(manifest, model_config(manifest, layers), layers)

    first = made()
    (bundle / "runtime.toml").touch()  # a new mtime: the tar does not record it
    assert made() == first
    parsed = parse_manifest(first, "test")
    assert [layer.path for layer in parsed.raw_layers] == ["models/m.gguf"]
    assert parsed.raw_layers[0].media_type == WEIGHT and parsed.tar_layer.path == SMALL_FILES
    config = json.loads(model_config(manifest, layers_of(bundle, manifest)).data or b"")
    assert config["descriptor"]["version"] == "3" and len(config["modelfs"]["diffIds"]) == 4


def test_a_manifest_that_is_not_an_edgekit_model_artifact_is_refused(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path / "b")
    manifest = json.loads((bundle / "manifest.json").read_text())
    layers = layers_of(bundle, manifest)
    config = model_config(manifest, layers)
    body = json.loads(image_manifest(manifest, config, layers))
    with pytest.raises(ArtifactError, match="not a model artifact"):
        parse_manifest(json.dumps({**body, "artifactType": "application/vnd.example"}).encode(), "ref")
    without_signature = {**body, "layers": [d for d in body["layers"] if "model.sig" not in json.dumps(d)]}
    with pytest.raises(ArtifactError, match=r"no layer for model\.sig"):
        parse_manifest(json.dumps(without_signature).encode(), "ref")
    assert body["artifactType"] == ARTIFACT_TYPE
