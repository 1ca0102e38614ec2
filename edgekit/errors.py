"""Typed errors. Each one says what went wrong and what to do about it, and carries the data it names.

A leaf: nothing here imports the rest of edgekit. A hint that names a command (`edgekit reference --export`,
`edgekit toolchain --tools`) is the command line's to write: its error table (`edgekit.cli.errors`) turns each
error into one message, that hint and the exit code the class declares; anything else is a bug and is shown
as such (with the traceback under `--debug`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from typing import Self


class ExitCode(IntEnum):
    OK = 0
    GATE_FAILED = 1  # the build finished, but a required artifact failed its accuracy gate
    BAD_INPUT = 2  # recipe, arguments or source model are wrong; nothing was written
    ENVIRONMENT = 3  # a package, tool or resource (disk, memory) is missing
    INTEGRITY = 4  # a bundle or cache entry does not match its manifest
    RUNTIME = 5  # a stage failed while doing its work
    INTERRUPTED = 130


class EdgekitError(Exception):
    """Base class. `message` says what happened, `hint` says what to do (in words: see the module's docstring)."""

    exit_code: ExitCode = ExitCode.RUNTIME
    logs: Path | None = None  # where the logs of the stage that failed are kept (`edgekit.observe.stagelog.keep`)

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        hint = "; ".join(h for h in (self.hint, f"logs: {self.logs}" if self.logs else None) if h)
        return f"{self.message}\n  → {hint}" if hint else self.message

    def reworded(self, message: str) -> Self:
        """The same error (its class, its data, its hint) saying `message`: for a caller that can say better
        what failed (the pack, not the temp folder it was unpacked into)."""
        new = type(self).__new__(type(self))  # not through __init__: each class takes its own data
        new.__dict__.update(self.__dict__)
        new.message, new.args = message, (message,)
        return new


@dataclass(frozen=True)
class RecipeProblem:
    key: str  # dotted path such as "targets[1].scheme"
    problem: str  # what is wrong, including what was expected
    suggestion: str | None = None  # "did you mean" candidate


class RecipeError(EdgekitError):
    """The recipe is not valid. Raised before any work starts."""

    exit_code = ExitCode.BAD_INPUT

    def __init__(self, path: Path | str, problems: list[RecipeProblem]) -> None:
        self.path, self.problems = str(path), problems
        lines = [f"{self.path}: invalid recipe ({len(problems)} problem{'s' if len(problems) != 1 else ''})"]
        for p in problems:
            line = f"  {p.key}: {p.problem}" if p.key else f"  {p.problem}"
            if p.suggestion:
                line += f" (did you mean {p.suggestion!r}?)"
            lines.append(line)
        super().__init__("\n".join(lines), "fix the recipe and run again; nothing was built")


class UsageError(EdgekitError):
    exit_code = ExitCode.BAD_INPUT  # a bad argument


class SourceError(EdgekitError):
    """The model source cannot be resolved, is unsafe, or does not match recorded hashes."""

    exit_code = ExitCode.BAD_INPUT


class ReferenceMismatchError(UsageError):
    """An imported reference was computed from other inputs than the recipe plans (`build --reference DIR`)."""

    def __init__(self, source: Path, differences: list[tuple[str, str, str]]) -> None:
        self.source, self.differences = source, differences
        names = ", ".join(name for name, _, _ in differences)
        detail = "; ".join(f"{name}: imported {old}, this recipe {new}" for name, old, new in differences)
        super().__init__(f"the reference in {source} was computed from other inputs than this recipe's: {names} "
                         f"differ{'s' if len(differences) == 1 else ''} ({detail})", "export it again from this "
                         "recipe where it can run, or make the recipe match the one it was computed for; nothing was "
                         "built")  # fmt: skip


class ReferenceExportError(UsageError):
    """A folder given as an exported reference (`build --reference DIR`) that is not one, or is damaged."""

    def __init__(self, source: Path, problem: str) -> None:
        self.source, self.problem = source, problem
        super().__init__(f"{source}: {problem}", "copy it again, or export it again where it was computed")


class NoCudaDevice(UsageError):
    """`reference_device = "cuda"` on a machine without a CUDA device."""

    def __init__(self) -> None:
        super().__init__("[validation] reference_device = 'cuda' but no CUDA device is available", "use 'auto' to "
                         "fall back to the CPU, or compute the reference on a GPU box and copy it")  # fmt: skip


class MissingDependencyError(EdgekitError):
    exit_code = ExitCode.ENVIRONMENT

    def __init__(self, what: str, extra: str) -> None:
        self.extra = extra
        super().__init__(f"{what} is not installed", f"pip install 'edgekit[{extra}]'")


class ToolchainError(EdgekitError):
    exit_code = ExitCode.ENVIRONMENT


class ToolsNotBuilt(ToolchainError):
    """A llama.cpp tool (llama-bench, llama-imatrix…) that edgekit compiles once is not built for this version."""

    def __init__(self, tool: str, version: str, folder: Path, flag: str) -> None:
        self.tool, self.version, self.folder, self.flag = tool, version, folder, flag  # flag: of `edgekit toolchain`
        super().__init__(f"llama.cpp's {tool} is not built for llama-cpp-python {version} (looked in {folder})",
                         "compile llama.cpp's tools once from the source package of the installed version")  # fmt: skip


class DiskSpaceError(EdgekitError):
    exit_code = ExitCode.ENVIRONMENT

    def __init__(self, path: Path, needed: int, free: int, hint: str | None = None) -> None:
        self.path, self.needed, self.free = path, needed, free
        super().__init__(f"not enough disk space in {path}: need {needed / 2**20:,.0f} MiB, {free / 2**20:,.0f} MiB "
                         "free", hint or "free some space or point EDGEKIT_CACHE / the output directory at a larger "
                         "disk; nothing was written")  # fmt: skip


class ReferenceMemoryError(EdgekitError):
    """The reference would need more memory than this process may allocate: stopped before it starts.

    `mode` is the one chosen ("full": the whole model, "stream": one layer at a time); the sizes are bytes."""

    exit_code = ExitCode.ENVIRONMENT

    def __init__(self, mode: str, full: int, stream: int, available: int, limited_by: str, *,
                 reason: str | None = None, can_stream: bool = True) -> None:  # fmt: skip
        self.mode, self.full, self.stream, self.available, self.limited_by = mode, full, stream, available, limited_by
        gib = 2**30
        needs = (full if mode == "full" else stream) / gib
        how = "the whole model" if mode == "full" else "one layer at a time"
        message = reason or (
            f"not enough memory for the reference ({how}): it needs about {needs:.1f} GiB, and "
            f"{available / gib:.1f} GiB can be allocated ({limited_by}); "
            f"whole model {full / gib:.1f} GiB, streamed {stream / gib:.1f} GiB"
        )
        # streaming would fit where the whole model does not
        self.stream_fits = can_stream and mode == "full" and stream <= available and reason is None
        super().__init__(message, self.ways("compute it where memory or a GPU is, and import it here"))

    def ways(self, elsewhere: str) -> str:
        """What to do, with `elsewhere` saying how to compute the reference on another machine."""
        stream = 'set [validation] reference_memory = "stream" (one decoder layer at a time, same figures)'
        return "; ".join([stream] * self.stream_fits + [elsewhere, "or free memory / raise the limit"])


class StageError(EdgekitError):
    """A pipeline stage failed while doing its work (converter crashed, export failed...)."""

    exit_code = ExitCode.RUNTIME

    def __init__(self, stage: str, message: str, hint: str | None = None) -> None:
        self.stage = stage
        super().__init__(f"[{stage}] {message}", hint)


class TokenizerMismatchError(StageError):
    def __init__(self, backend: str, position: int, expected: list[int], got: list[int]) -> None:
        self.position = position
        super().__init__("validate", f"{backend} tokenizes the eval text differently from the reference tokenizer: "
                         f"first difference at token {position} (reference {expected}, {backend} {got})",
                         "the artifact's tokenizer does not match the source model; a comparison would be "
                         "meaningless. Check the converter version and the tokenizer files of the source")  # fmt: skip


class GateFailure(EdgekitError):
    """Build finished; at least one required artifact failed its accuracy gates."""

    exit_code = ExitCode.GATE_FAILED

    def __init__(self, failed: list[str], bundle: Path | None, notes: list[str] | None = None) -> None:
        self.failed = failed
        where = f" (bundle with the report: {bundle})" if bundle else ""
        super().__init__(f"accuracy gate failed for {', '.join(failed)}{where}" + "".join(f"\n  {n}" for n in notes or
                         []), "read report.md for the failing metrics; choose a higher-precision scheme, relax "
                         "[validation.gates] with reason, or set [bundle] exclude_failed = true")  # fmt: skip


class IntegrityError(EdgekitError):
    exit_code = ExitCode.INTEGRITY

    def __init__(self, bundle: Path, problems: list[str]) -> None:
        self.bundle, self.problems = bundle, problems
        shown = "\n".join(f"  {p}" for p in problems[:20])
        more = f"\n  … and {len(problems) - 20} more" if len(problems) > 20 else ""
        super().__init__(f"bundle {bundle} does not match its manifest:\n{shown}{more}", "the bundle was modified "
                         "or damaged; rebuild it or copy it again from a trusted source")  # fmt: skip


@dataclass(frozen=True)
class DamagedFile:
    """A file of a cached artifact whose bytes are not the ones its entry recorded."""

    artifact: str  # the artifact's name in the bundle
    key: str  # its cache entry
    file: str  # relative to the entry folder's parent: "<key>/model.gguf"
    recorded_sha256: str
    found_sha256: str


class CorruptCacheEntry(EdgekitError):
    """Files of cached artifacts differ from the sha256 recorded when their entries were made."""

    exit_code = ExitCode.INTEGRITY

    def __init__(self, damaged: list[DamagedFile]) -> None:
        self.damaged = damaged
        listed = "; ".join(f"{d.artifact}: {d.file}" for d in damaged[:10])
        super().__init__(f"cached artifacts differ from the sha256 recorded when they were made ({listed}), again "
                         "after rebuilding them", "the disk under EDGEKIT_CACHE is corrupting files: check it (SMART, "
                         "dmesg), or move the cache elsewhere")  # fmt: skip


class NotABundleError(UsageError):
    """The path given as a bundle is not one (nothing there, not a folder, no manifest.json): a bad argument."""

    def __init__(self, path: Path, why: str = "no manifest.json") -> None:
        self.path, self.why = path, why
        super().__init__(f"no edgekit bundle at {path} ({why})", "give the folder a build wrote, the one holding "
                         "manifest.json (dist/<name>/ by default)")  # fmt: skip


class SignatureError(EdgekitError):
    exit_code = ExitCode.INTEGRITY


class RuntimeConfigError(EdgekitError):
    exit_code = ExitCode.BAD_INPUT


class EngineError(EdgekitError):
    """A runtime engine failed to load a model or to run it (llama_decode error, context full...)."""

    exit_code = ExitCode.RUNTIME


class BenchError(EdgekitError):
    """A benchmark measurement failed (its worker process crashed, timed out or printed no result)."""

    exit_code = ExitCode.RUNTIME


class TrustError(SignatureError):
    """A bundle the box's trust policy refuses: unsigned, signed by a key it does not trust, or not what was signed."""


class UnsignedBundle(TrustError):
    """A bundle without a signature: a box installs only bundles signed by a key it trusts."""

    def __init__(self, bundle: Path, why: str) -> None:
        self.bundle = bundle
        super().__init__(f"{bundle} is not signed ({why})", "sign it on the build machine")


class NotASignature(TrustError):
    """A signature file that is not a readable OpenSSF model signature (or one of edgekit 0.1's)."""

    def __init__(self, signature: Path, why: str) -> None:
        self.signature, self.why = signature, why
        super().__init__(f"{signature} is not a readable OpenSSF model signature ({why})",
                         "sign the bundle again (signatures of edgekit 0.1, manifest.sig, are not read)")  # fmt: skip


class NotAKey(UsageError):
    """A key file that is not an ECDSA key in PEM format, of the kind (private, public) asked for."""

    def __init__(self, path: Path, kind: str, why: str) -> None:
        self.path, self.kind, self.why = path, kind, why
        super().__init__(f"{path} is not an ECDSA (P-256, P-384 or P-521) {kind} key in PEM format ({why})", "make a "
                         "key pair (the private key stays on the build machine, the public one goes to the boxes); "
                         "keys of edgekit 0.1 (Ed25519) are not supported by OpenSSF model signing")  # fmt: skip


class TrustPolicyError(EdgekitError):
    """The box's trust policy itself cannot be read (a missing folder named by EDGEKIT_TRUST_DIR, a bad key file)."""

    exit_code = ExitCode.ENVIRONMENT


class PackError(EdgekitError):
    """An .edgekit pack that is damaged or forged: refused while it is unpacked, before anything is switched."""

    exit_code = ExitCode.INTEGRITY

    def __init__(self, pack: str, problem: str) -> None:
        self.pack, self.problem = pack, problem
        super().__init__(f"pack {pack}: {problem}; nothing was installed", "copy the pack again from the build "
                         "machine (compare its sha256 with the one printed when it was packed)")  # fmt: skip


class DiskFullError(EdgekitError):
    """A write failed for want of space although the check before it passed (something else filled the disk)."""

    exit_code = ExitCode.ENVIRONMENT


class DowngradeError(EdgekitError):
    """A pack whose release is not higher than the one the box runs (older, or the same with other content)."""

    exit_code = ExitCode.BAD_INPUT

    def __init__(self, name: str, release: int, running: int, running_name: str) -> None:
        self.name, self.release, self.running, self.running_name = name, release, running, running_name
        older = f"{name} release {release} is older than release {running}, which this box runs: a downgrade"
        same = f"release {release} is already installed here with other content ({running_name}): a new build needs"
        super().__init__(older if release < running else f"{same} a higher release", "install it anyway only if you "
                         "mean to (allow the downgrade)")  # fmt: skip


class SmokeTestError(EdgekitError):
    """The box decodes the build's smoke-test prompts to other tokens than the build machine did."""

    exit_code = ExitCode.RUNTIME


class InstallError(EdgekitError):
    """An install root that cannot take an install or a rollback now (busy, nothing to roll back to)."""

    exit_code = ExitCode.BAD_INPUT


class NotAnInstallRoot(InstallError):
    def __init__(self, root: Path) -> None:
        self.root = root
        super().__init__(f"{root} is not an edgekit install root (it has no slots/)", "install a pack there first")


class NothingToRollBack(InstallError):
    def __init__(self, root: Path) -> None:
        self.root = root
        super().__init__(f"nothing to roll back to on {root}: no previous slot is kept",
                         "install the release you want (allowing a downgrade for an older one)")  # fmt: skip


class BoxMismatch(InstallError):
    """A pack that carries the runtime for boxes of another CPU architecture than this one."""

    def __init__(self, pack: str, arch: str, machine: str) -> None:
        self.pack, self.arch, self.machine = pack, arch, machine
        super().__init__(f"pack {pack} carries the runtime for {arch} boxes; this box is {machine}; nothing was "
                         "installed", "pack the bundle for this box's architecture")  # fmt: skip


class PackUnsigned(UsageError):
    """`pack` of a bundle that is not signed yet: the boxes would refuse it."""

    def __init__(self, bundle: Path) -> None:
        self.bundle = bundle
        super().__init__(f"{bundle} is not signed: a box installs only bundles signed by a key it trusts",
                         "sign it first")  # fmt: skip


class BoxesMissing(UsageError):
    """A recipe (or --boxes) names a box to benchmark on that no node of the cluster offers."""

    def __init__(self, missing: list[str], offered: list[str]) -> None:
        self.missing, self.offered = missing, offered
        have = ", ".join(offered) if offered else "none"
        super().__init__(f"no node offers the box{'es' if len(missing) > 1 else ''} {', '.join(missing)} (boxes "
                         f"offered: {have})", "start an agent on that box that joins the cluster, or choose other "
                         "boxes (local: the build machine)")  # fmt: skip


class ClusterError(EdgekitError):
    """The cluster cannot be used: Ray is not installed, or the head cannot be reached."""

    exit_code = ExitCode.ENVIRONMENT
