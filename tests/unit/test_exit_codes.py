"""The exit-code table holds for every command that takes a bundle: a path that is not a bundle is a bad argument
(exit 2, "no edgekit bundle at PATH"), a bundle that does not match its manifest is exit 4 naming the file; and
with --json the failure is also an `edgekit.error` document on stdout."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from edgekit.cli.common import load_schema
from edgekit.errors import ExitCode
from edgekit.ship.keys import generate_keypair
from tests.support.cli_in_process import edgekit
from tests.support.fake_bundle import make_runnable_bundle

COMMANDS = {
    "verify": [],
    "inspect": [],
    "sign": ["--key", "{key}"],
    "run": ["--prompt", "hi"],
    "serve": ["--port", "0"],
    "bench": [],
    "tune": [],
    "numa": [],
}
JSON_COMMANDS = ("verify", "inspect", "bench", "tune", "numa")


def _paths(tmp_path: Path) -> dict[str, Path]:
    (tmp_path / "empty").mkdir()
    (tmp_path / "a-file").write_text("not a bundle\n")
    tampered = make_runnable_bundle(tmp_path / "tampered")
    (tampered / "models" / "m.gguf").write_bytes(b"GGUF" + b"\0" * 1028)  # same size, other bytes
    return {"missing": tmp_path / "nothing-here", "empty": tmp_path / "empty", "file": tmp_path / "a-file",
            "tampered": tampered}  # fmt: skip


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("exit-codes")
    generate_keypair(root / "k.key", root / "k.pub")
    return {**_paths(root), "key": root / "k.key"}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("what", ["missing", "empty", "file"])
def test_a_path_that_is_not_a_bundle_is_exit_2(command: str, what: str, cases: dict[str, Path]) -> None:
    path = cases[what]
    extra = [a.format(key=cases["key"]) for a in COMMANDS[command]]
    code, out, err = edgekit(command, str(path), *extra)
    assert code == ExitCode.BAD_INPUT, err
    assert f"error: no edgekit bundle at {path} (" in err and "Traceback" not in err, err
    assert err.count("error:") == 1 and out == "", (out, err)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_bundle_that_does_not_match_its_manifest_is_exit_4_naming_the_file(
    command: str, cases: dict[str, Path]
) -> None:
    extra = [a.format(key=cases["key"]) for a in COMMANDS[command]]
    code, _, err = edgekit(command, str(cases["tampered"]), *extra)
    assert code == ExitCode.INTEGRITY, err
    assert "models/m.gguf: sha256 differs" in err and "Traceback" not in err, err


@pytest.mark.parametrize("command", JSON_COMMANDS)
def test_with_json_the_failure_is_an_error_document(command: str, cases: dict[str, Path]) -> None:
    code, out, _ = edgekit(command, str(cases["missing"]), "--json")
    assert code == ExitCode.BAD_INPUT
    document = json.loads(out)
    jsonschema.validate(document, load_schema("error"))
    assert document["command"] == command and document["error"]["exit_code"] == 2
    assert document["error"]["type"] == "NotABundleError"


def test_verify_json_lists_every_files_state_then_exits_4(cases: dict[str, Path]) -> None:
    code, out, err = edgekit("verify", str(cases["tampered"]), "--json")
    assert code == ExitCode.INTEGRITY and "models/m.gguf" in err
    document = json.loads(out)
    jsonschema.validate(document, load_schema("verify"))
    states = {f["path"]: f["state"] for f in document["files"]}
    assert states["models/m.gguf"] == "modified" and states["runtime.toml"] == "ok" and not document["ok"]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["build", "no-such-recipe.toml"], ExitCode.BAD_INPUT),
        (["plan", "no-such-recipe.toml"], ExitCode.BAD_INPUT),
        (["reference", "no-such-recipe.toml"], ExitCode.BAD_INPUT),
        (["schema", "no-such-schema"], ExitCode.BAD_INPUT),
        (["verify"], ExitCode.BAD_INPUT),
        (["no-such-command"], ExitCode.BAD_INPUT),
    ],
)
def test_bad_arguments_to_any_command_are_exit_2(args: list[str], expected: int, tmp_path: Path) -> None:
    code, _, err = edgekit(*args, cwd=tmp_path)
    assert code == expected and "Traceback" not in err, err
