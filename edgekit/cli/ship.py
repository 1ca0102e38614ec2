"""Shipping commands: keygen, sign, verify (build machine and box), pack (build machine), install, status,
rollback (box). Parse, call `edgekit.ship`, render; `--json` prints what the human form shows, as data."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.table import Table

from edgekit.cli.common import bundle_argument, console, emit_json, json_option, mib, progress_reporter
from edgekit.cli.fleet import connection, connection_options

if TYPE_CHECKING:
    from edgekit.ship.pack import Packed
    from edgekit.toolchain.box import BoxRuntime

trusted_key_option = click.option(
    "--trusted-key", "trusted_keys", multiple=True, type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="Also trust this public key (repeatable), besides /etc/edgekit/trusted-keys/*.pub ($EDGEKIT_TRUST_DIR).",
)  # fmt: skip
root_option = click.option(
    "--root", default="/var/lib/edgekit", show_default=True, type=click.Path(file_okay=False, path_type=Path),
    help="The box's install root (slots/, current, state.json).",
)  # fmt: skip


@click.command()
@click.option("--out", "out_dir", default=".", show_default=True, type=click.Path(file_okay=False))
@click.option("--name", default="edgekit", show_default=True, help="Writes NAME.key (private) and NAME.pub.")
def keygen(out_dir: str, name: str) -> None:
    """Make an ECDSA P-256 key pair for `edgekit sign` and the boxes' trust policy."""
    from edgekit.ship.keys import generate_keypair

    private, public = Path(out_dir) / f"{name}.key", Path(out_dir) / f"{name}.pub"
    generate_keypair(private, public)
    console.print(f"private key: {private} (keep it secret; mode 600)")
    console.print(f"public key:  {public} (give it to the boxes: /etc/edgekit/trusted-keys/{name}.pub)")


@click.command()
@bundle_argument
@click.option("--key", "private_key", type=click.Path(dir_okay=False, path_type=Path), help="ECDSA private key.")
@click.option(
    "--sigstore", is_flag=True, help="Sigstore keyless signing instead (network and an OIDC login; untested)."
)
def sign(bundle: str, private_key: Path | None, sigstore: bool) -> None:
    """Sign every file of BUNDLE (OpenSSF model signing, model.sig) after checking them against its manifest."""
    from edgekit.errors import UsageError
    from edgekit.ship import sign as signing

    if sigstore == (private_key is not None):
        raise UsageError(
            "give exactly one of --key PRIVATE_KEY and --sigstore", "e.g. edgekit sign BUNDLE --key edgekit.key"
        )
    path = signing.sign_bundle_keyless(Path(bundle)) if sigstore else signing.sign_bundle(Path(bundle), private_key)  # type: ignore[arg-type]
    console.print(f"signed: {path}  (check with: edgekit verify {bundle} --key PUBLIC_KEY)")


@click.command()
@bundle_argument
@click.option(
    "--key", "public_keys", multiple=True, type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="Check the signature against this public key only (repeatable), not the box's trust policy.",
)  # fmt: skip
@trusted_key_option
@json_option("verify")
def verify(bundle: str, public_keys: tuple[Path, ...], trusted_keys: tuple[Path, ...], as_json: bool) -> None:
    """Check every file of BUNDLE against its manifest and, with --key or a trust policy, its signature."""
    from edgekit.errors import EdgekitError, IntegrityError
    from edgekit.manifest import check_bundle as check_files
    from edgekit.ship.trust import Checked, TrustPolicy, box_policy, verify_trusted

    policy = TrustPolicy(public_keys, "--key " + ", ".join(map(str, public_keys))) if public_keys else None
    policy = policy or box_policy(trusted_keys)
    files = check_files(Path(bundle), check_hashes=policy is None)  # under a policy the signature hashes each file
    checked: Checked | None = None
    failure: EdgekitError | None = IntegrityError(Path(bundle), files.problems) if files.problems else None
    if failure is None and policy is not None:
        try:
            checked = verify_trusted(Path(bundle), policy)
        except EdgekitError as exc:
            failure = exc
    if as_json:
        signature = None if policy is None or files.problems else {
            "key": str(checked.signed_by) if checked else policy.source, "ok": failure is None,
            "problem": failure.message if failure else None}  # fmt: skip
        emit_json("verify", {"bundle": bundle, "ok": failure is None, "files": files.files,
                             "problems": files.problems, "signature": signature})  # fmt: skip
    if failure is not None:
        raise failure
    if not as_json:
        how = f" and its signature by {checked.signed_by}" if checked else " (no trust policy: signature not checked)"
        console.print(f"[green]ok[/]: {len(files.files)} files match {Path(bundle) / 'manifest.json'}{how}",
                      highlight=False)  # fmt: skip


@click.command()
@bundle_argument
@click.option(
    "-o",
    "--out",
    type=click.Path(path_type=Path),
    help="The pack file, or a folder (default: NAME-RELEASE.edgekit here).",
)
@click.option("--zstd", is_flag=True, help="Compress with zstd (deterministic; quantized weights shrink little).")
@click.option("--mender", is_flag=True, help="Also write NAME-RELEASE.mender: the pack as a Mender artifact.")
@click.option("--device-type", "device_types", multiple=True, metavar="TYPE",
              help="With --mender: a device type the artifact is for (repeatable).")  # fmt: skip
@click.option("--box", "box_arch", metavar="ARCH", help="Carry the runtime a box of this CPU architecture installs "
              "edgekit from (aarch64), built once per version: writes NAME-RELEASE.ARCH.edgekit.")  # fmt: skip
@click.option("--march", help="With --box: the -march the box runtime's llama.cpp is compiled for (default: the "
              "architecture's baseline, armv8-a).")  # fmt: skip
@json_option("pack")
def pack(bundle: str, out: Path | None, zstd: bool, mender: bool, device_types: tuple[str, ...],
         box_arch: str | None, march: str | None, as_json: bool) -> None:  # fmt: skip
    """Pack the signed BUNDLE into one deterministic file to copy to the boxes; print its sha256."""
    from edgekit.errors import UsageError
    from edgekit.ship.pack import pack_bundle

    if device_types and not mender:
        raise UsageError("--device-type is for --mender artifacts", "add --mender, or leave --device-type out")
    if march and not box_arch:
        raise UsageError("--march is for --box packs", "add --box ARCH, or leave --march out")
    if mender:
        from edgekit.ship.mender.artifact import check_mender, write_mender

        check_mender(device_types)
    runtime = _box_runtime(Path(bundle), box_arch, march) if box_arch else None
    packed = pack_bundle(Path(bundle), out, zstd=zstd, runtime=runtime)
    menders = write_mender(packed, device_types) if mender else None
    if as_json:
        extra = {"mender": {**menders.__dict__, "path": str(menders.path)}} if menders else {}
        return emit_json("pack", {**packed.as_dict(), **extra})
    console.print(f"{packed.sha256}  {packed.path}", highlight=False)
    if menders:
        console.print(f"{menders.sha256}  {menders.path}  (Mender, for {', '.join(menders.device_types)})",
                      highlight=False)  # fmt: skip
    zstd_note = ", zstd" if packed.zstd else ""
    console.print(
        f"[dim]{packed.name} release {packed.release}: {packed.files} files, {mib(packed.size)}{zstd_note}; "
        f"on the box: {_box_steps(packed)}edgekit install {packed.path.name}[/]",
        highlight=False,
    )


def _box_runtime(bundle: Path, arch: str, march: str | None) -> BoxRuntime:
    """The box runtime for the bundle's backends (their runtime extras), built or taken from the toolchain cache."""
    from edgekit.manifest import load_manifest
    from edgekit.registry import spec
    from edgekit.toolchain.box import box_runtime

    manifest = load_manifest(bundle)  # which backends; `pack_bundle` verifies the bundle
    extras = tuple(sorted({spec(a["backend"]).runtime_extra for a in manifest.get("artifacts", [])}))
    with progress_reporter() as progress:
        return box_runtime(arch, extras, progress, march=march)


def _box_steps(packed: Packed) -> str:
    if not packed.box:
        return ""
    return f"tar -xf {packed.path.name} box-runtime && sh box-runtime/install.sh, then /opt/edgekit/venv/bin/"


@click.command()
@click.argument("pack_file", metavar="PACK|oci://HOST/REPO:TAG", type=click.Path(dir_okay=False, allow_dash=True))
@root_option
@trusted_key_option
@click.option("--allow-downgrade", is_flag=True, help="Install a release not higher than the running one.")
@click.option("--keep", type=click.IntRange(1, 100), default=2, show_default=True, help="Slots kept after a switch.")
@connection_options
@json_option("install")
def install(
    pack_file: str, root: Path, trusted_keys: tuple[Path, ...], allow_downgrade: bool, keep: int,
    ca_file: Path | None, insecure: bool, as_json: bool,
) -> None:  # fmt: skip
    """Install PACK (a file, '-' for stdin, or an OCI reference) on this box: fetch, verify, smoke-test, then
    switch `current` atomically. From a registry, layers a slot here already holds are linked, not pulled."""
    from edgekit.ship.install import install as run_install

    with progress_reporter() as progress:
        result = run_install(pack_file, root, trusted_keys=trusted_keys, allow_downgrade=allow_downgrade, keep=keep,
                             connection=connection(ca_file, insecure), progress=progress)  # fmt: skip
    if as_json:
        return emit_json("install", result)
    if not result["changed"]:
        console.print(
            f"{result['name']} release {result['release']} is already current ({result['slot']}): nothing to do"
        )
        return
    _render_switch("installed", result)
    console.print(f"{_origin(result['source'])}; smoke test: "
                  + ", ".join(f"{k} {v}" for k, v in result["smoke"].items()), highlight=False)  # fmt: skip
    if result["removed"]:
        console.print(f"removed old slots: {', '.join(result['removed'])}")


def _origin(source: dict[str, Any]) -> str:
    if source["kind"] == "pack":
        return f"pack sha256 {source['sha256']}"
    moved = source["transfer"]
    return (f"{source['digest']} from {source['reference']}: {mib(moved['fetched'])} fetched, "
            f"{mib(moved['resumed'])} resumed, {mib(moved['reused'])} reused from this box")  # fmt: skip


def _render_switch(verb: str, result: dict[str, Any]) -> None:
    before = result.get("previous") or {}
    old = f"release {before.get('release')} ({before.get('slot')}, {mib(before.get('size'))})" if before else "nothing"
    new = f"release {result['release']} ({result['slot']}, {mib(result.get('size'))})"
    console.print(f"[green]{verb}[/] {result['name']}: {old} → {new} in {result['seconds']:.1f} s", highlight=False)
    verdicts = ", ".join(f"{k} {v}" for k, v in (result.get("verdicts") or {}).items())
    console.print(f"verdicts: {verdicts}; {result['root']}/current → {result['slot']}", highlight=False)


@click.command()
@root_option
@click.option("--verify", "full", is_flag=True, help="Hash every file and check each slot's signature.")
@trusted_key_option
@json_option("status")
def status(root: Path, full: bool, trusted_keys: tuple[Path, ...], as_json: bool) -> None:
    """Show this box's slots: which is current, their releases, install records and verification state."""
    from edgekit.ship.box import status as box_status

    result = box_status(root, verify=full, trusted_keys=trusted_keys)
    if as_json:
        return emit_json("status", result)
    table = Table(title=result["root"])
    table.add_column("slot", overflow="fold")  # a slot's whole name, on several lines if it must
    table.add_column("", no_wrap=True)  # "← current" stays whole however narrow the terminal
    for name in ("release", "size", "installed", "signed by", "smoke", "verification"):
        table.add_column(name)
    for s in result["slots"]:
        mark = "[bold green]← current[/]" if s["current"] else ("(previous)" if s["previous"] else "")
        record = s.get("install") or {}
        check = s["verification"]
        table.add_row(s["slot"], mark, str(s.get("release", "?")), mib(s.get("size")), record.get("installed", "—"),
                      Path(record["signed_by"]).name if record.get("signed_by") else "—",
                      ", ".join(f"{k} {v}" for k, v in (record.get("smoke") or {}).items()) or "—",
                      "ok" if check["state"] == "ok" else f"[red]{check['problem']}[/]")  # fmt: skip
    console.print(table)
    if result["partial"]:
        console.print(f"[yellow]partial slots (an install running or killed): {', '.join(result['partial'])}[/]")


@click.command()
@root_option
@trusted_key_option
@json_option("rollback")
def rollback(root: Path, trusted_keys: tuple[Path, ...], as_json: bool) -> None:
    """Switch this box back to the previous slot (verified again first); restart the service to run it."""
    from edgekit.ship.box import rollback as run_rollback

    result = run_rollback(root, trusted_keys=trusted_keys)
    if as_json:
        return emit_json("rollback", result)
    _render_switch("rolled back", result)
    console.print("[dim]systemd: systemctl restart edgekit (the running process keeps its slot until then)[/]")


COMMANDS = (keygen, sign, verify, pack, install, status, rollback)
