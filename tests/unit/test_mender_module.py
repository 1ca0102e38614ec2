"""The update module's answers and refusals that need no Mender and no install (the whole flow, with Debian's
mender-client: tests/e2e/test_mender.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgekit.errors import UsageError
from edgekit.ship.mender.artifact import check_mender, install_module
from edgekit.ship.mender.module import main


@pytest.mark.parametrize(("state", "answer"), [("NeedsArtifactReboot", "No"), ("SupportsRollback", "Yes")])
def test_the_module_answers_mender_s_queries(
    state: str, answer: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--root", str(tmp_path / "root"), state, str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip() == answer


def test_a_payload_without_exactly_one_pack_fails_the_install_state(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "files").mkdir()
    for name in ("a.edgekit", "b.edgekit"):
        (tmp_path / "files" / name).write_bytes(b"")
    assert main(["--root", str(tmp_path / "root"), "ArtifactInstall", str(tmp_path)]) == 1
    assert "holds 2 .edgekit packs, not one" in capsys.readouterr().err
    assert main(["--root", str(tmp_path / "root"), "NoSuchState", str(tmp_path)]) == 1


def test_a_rollback_before_any_install_and_the_other_states_do_nothing(tmp_path: Path) -> None:
    for state in ("ArtifactRollback", "Download", "ArtifactFailure", "Cleanup"):
        assert main(["--root", str(tmp_path / "root"), state, str(tmp_path)]) == 0
    assert not (tmp_path / "root").exists()


def test_the_installed_module_runs_this_python_for_one_root(tmp_path: Path) -> None:
    module = install_module(tmp_path / "root", tmp_path / "modules", tmp_path)
    script = module.read_text()
    assert module.stat().st_mode & 0o755 == 0o755 and script.startswith("#!/bin/sh\n")
    assert f"EDGEKIT_TRUST_DIR={tmp_path} exec " in script and f"--root {tmp_path / 'root'} " in script


@pytest.mark.parametrize("device_types", [(), ("bad type",)])
def test_device_types_mender_would_not_take_are_refused_before_anything_is_written(
    device_types: tuple[str, ...],
) -> None:
    with pytest.raises(UsageError):
        check_mender(device_types)
