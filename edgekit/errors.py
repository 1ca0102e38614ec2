"""Typed errors. Each one says what went wrong and what to do about it.

The CLI turns any `EdgekitError` into one message and the exit code the class declares;
anything else is a bug and is shown as such (with the traceback under `--debug`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from edgekit.reference.memory import MemoryPlan


class ExitCode:
    OK = 0
    GATE_FAILED = 1  # the build finished, but a required artifact failed its accuracy gate
    BAD_INPUT = 2  # recipe, arguments or source model are wrong; nothing was written
    ENVIRONMENT = 3  # a package, tool or resource (disk, memory) is missing
    INTEGRITY = 4  # a bundle or cache entry does not match its manifest
    RUNTIME = 5  # a stage failed while doing its work
    INTERRUPTED = 130


class EdgekitError(Exception):
    """Base class. `message` says what happened, `hint` says what to do."""

    exit_code: int = ExitCode.RUNTIME

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  → {self.hint}"


@dataclass(frozen=True)
class RecipeProblem:
    key: str  # dotted path such as "targets[1].scheme"
    problem: str  # what is wrong, including what was expected
    suggestion: str | None = None  # "did you mean" candidate


class RecipeError(EdgekitError):
    """The recipe is not valid. Raised before any work starts."""

    exit_code = ExitCode.BAD_INPUT

    def __init__(self, path: Path | str, problems: list[RecipeProblem]) -> None:
        self.path = str(path)
        self.problems = problems
        lines = [f"{self.path}: invalid recipe ({len(problems)} problem{'s' if len(problems) != 1 else ''})"]
        for p in problems:
            line = f"  {p.key}: {p.problem}" if p.key else f"  {p.problem}"
            if p.suggestion:
                line += f" (did you mean {p.suggestion!r}?)"
            lines.append(line)
        super().__init__("\n".join(lines), "fix the recipe and run again; nothing was built")


class UsageError(EdgekitError):
    exit_code = ExitCode.BAD_INPUT


class SourceError(EdgekitError):
    """The model source cannot be resolved, is unsafe, or does not match recorded hashes."""

    exit_code = ExitCode.BAD_INPUT


class SourceTokenizerError(SourceError):
    """The Hugging Face tokenizer of a GGUF source cuts text differently from the GGUF's own (llama.cpp's)."""

    def __init__(
        self, source: str, tokenizer: str | None, position: int, expected: list[int], got: list[int], compared: int
    ) -> None:
        self.position = position
        which = f"the tokenizer from {tokenizer}" if tokenizer else "the tokenizer rebuilt from its metadata"
        super().__init__(
            f"{source}: {which} tokenizes the eval text differently from llama.cpp's reading of the GGUF: first "
            f"difference at token {position} of {compared} (llama.cpp {expected}, Hugging Face {got}); the "
            "reference and the OpenVINO/ONNX exports would score other tokens than the GGUF artifacts",
            'give the model\'s original tokenizer in [model]: tokenizer = "hf://ORG/NAME" with tokenizer_revision, '
            'or tokenizer = "path/to/folder" holding its tokenizer files; nothing was built',
        )


class ReferenceMismatchError(UsageError):
    """An imported reference was computed from other inputs than the recipe plans (`build --reference DIR`)."""

    def __init__(self, source: Path, differences: list[tuple[str, str, str]]) -> None:
        self.source = source
        self.differences = differences
        names = ", ".join(name for name, _, _ in differences)
        detail = "; ".join(f"{name}: imported {old}, this recipe {new}" for name, old, new in differences)
        super().__init__(
            f"the reference in {source} was computed from other inputs than this recipe's: {names} "
            f"differ{'s' if len(differences) == 1 else ''} ({detail})",
            "export it again from this recipe (`edgekit reference RECIPE --export DIR` where it can run), or make "
            "the recipe match the one it was computed for; nothing was built",
        )


class MissingDependencyError(EdgekitError):
    exit_code = ExitCode.ENVIRONMENT

    def __init__(self, what: str, extra: str) -> None:
        self.extra = extra
        super().__init__(
            f"{what} is not installed",
            f"pip install 'edgekit[{extra}]'",
        )


class ToolchainError(EdgekitError):
    exit_code = ExitCode.ENVIRONMENT


class DiskSpaceError(EdgekitError):
    exit_code = ExitCode.ENVIRONMENT

    def __init__(self, path: Path, needed: int, free: int, hint: str | None = None) -> None:
        self.path, self.needed, self.free = path, needed, free
        super().__init__(
            f"not enough disk space in {path}: need {needed / 2**20:,.0f} MiB, {free / 2**20:,.0f} MiB free",
            hint
            or "free some space or point EDGEKIT_CACHE / the output directory at a larger disk; nothing was written",
        )


class ReferenceMemoryError(EdgekitError):
    """The reference would need more memory than this process may allocate: stopped before it starts."""

    exit_code = ExitCode.ENVIRONMENT

    def __init__(self, plan: MemoryPlan, reason: str | None = None, can_stream: bool = True) -> None:
        self.plan = plan
        gib = 2**30
        whole, stream = plan.full_bytes / gib, plan.stream_bytes / gib
        needs = whole if plan.mode == "full" else stream
        how = "the whole model" if plan.mode == "full" else "one layer at a time"
        message = reason or (
            f"not enough memory for the reference ({how}): it needs about {needs:.1f} GiB, and "
            f"{plan.available.bytes / gib:.1f} GiB can be allocated ({plan.available.limited_by}); "
            f"whole model {whole:.1f} GiB, streamed {stream:.1f} GiB"
        )
        ways = []
        if can_stream and plan.mode == "full" and plan.stream_bytes <= plan.available.bytes and reason is None:
            ways.append('set [validation] reference_memory = "stream" (one decoder layer at a time, same figures)')
        ways += [
            "compute it where memory or a GPU is: `edgekit reference RECIPE --export DIR` there (reference_device = "
            '"cuda" on a GPU box), then `edgekit build RECIPE --reference DIR` here',
            "or free memory / raise the limit",
        ]
        super().__init__(message, "; ".join(ways))


class StageError(EdgekitError):
    """A pipeline stage failed while doing its work (converter crashed, export failed...)."""

    exit_code = ExitCode.RUNTIME

    def __init__(self, stage: str, message: str, hint: str | None = None) -> None:
        self.stage = stage
        super().__init__(f"[{stage}] {message}", hint)


class TokenizerMismatchError(StageError):
    def __init__(self, backend: str, position: int, expected: list[int], got: list[int]) -> None:
        self.position = position
        super().__init__(
            "validate",
            f"{backend} tokenizes the eval text differently from the reference tokenizer: first difference at "
            f"token {position} (reference {expected}, {backend} {got})",
            "the artifact's tokenizer does not match the source model; a comparison would be meaningless. "
            "Check the converter version and the tokenizer files of the source",
        )


class GateFailure(EdgekitError):
    """Build finished; at least one required artifact failed its accuracy gates."""

    exit_code = ExitCode.GATE_FAILED

    def __init__(self, failed: list[str], bundle: Path | None, notes: list[str] | None = None) -> None:
        self.failed = failed
        where = f" (bundle with the report: {bundle})" if bundle else ""
        super().__init__(
            f"accuracy gate failed for {', '.join(failed)}{where}" + "".join(f"\n  {n}" for n in notes or []),
            "read report.md for the failing metrics; choose a higher-precision scheme, relax "
            "[validation.gates] with reason, or set [bundle] exclude_failed = true",
        )


class IntegrityError(EdgekitError):
    exit_code = ExitCode.INTEGRITY

    def __init__(self, bundle: Path, problems: list[str]) -> None:
        self.bundle, self.problems = bundle, problems
        shown = "\n".join(f"  {p}" for p in problems[:20])
        more = f"\n  … and {len(problems) - 20} more" if len(problems) > 20 else ""
        super().__init__(
            f"bundle {bundle} does not match its manifest:\n{shown}{more}",
            "the bundle was modified or damaged; rebuild it or copy it again from a trusted source",
        )


class CorruptCacheEntry(EdgekitError):
    """Files of cached artifacts differ from the sha256 recorded when their entries were made."""

    exit_code = ExitCode.INTEGRITY

    def __init__(self, damaged: list[dict[str, str]]) -> None:
        self.damaged = damaged  # {artifact, key, file, recorded_sha256, found_sha256}
        listed = "; ".join(f"{d['artifact']}: {d['file']}" for d in damaged[:10])
        super().__init__(
            f"cached artifacts differ from the sha256 recorded when they were made ({listed}), again after "
            "rebuilding them",
            "the disk under EDGEKIT_CACHE is corrupting files: check it (SMART, dmesg), or move the cache elsewhere",
        )


class NotABundleError(UsageError):
    """The path given as a bundle is not one (nothing there, not a folder, no manifest.json): a bad argument."""

    def __init__(self, path: Path, why: str = "no manifest.json") -> None:
        self.path = path
        super().__init__(
            f"no edgekit bundle at {path} ({why})",
            "give the folder `edgekit build` wrote (dist/<name>/ by default), the one holding manifest.json",
        )


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


class TrustPolicyError(EdgekitError):
    """The box's trust policy itself cannot be read (a missing folder named by EDGEKIT_TRUST_DIR, a bad key file)."""

    exit_code = ExitCode.ENVIRONMENT


class PackError(EdgekitError):
    """An .edgekit pack that is damaged or forged: refused while it is unpacked, before anything is switched."""

    exit_code = ExitCode.INTEGRITY

    def __init__(self, pack: str, problem: str) -> None:
        self.pack, self.problem = pack, problem
        super().__init__(
            f"pack {pack}: {problem}; nothing was installed",
            "copy the pack again from the build machine (compare its sha256 with what `edgekit pack` printed)",
        )


class DiskFullError(EdgekitError):
    """A write failed for want of space although the check before it passed (something else filled the disk)."""

    exit_code = ExitCode.ENVIRONMENT


class DowngradeError(EdgekitError):
    exit_code = ExitCode.BAD_INPUT


class SmokeTestError(EdgekitError):
    """The box decodes the build's smoke-test prompts to other tokens than the build machine did."""

    exit_code = ExitCode.RUNTIME


class InstallError(EdgekitError):
    """An install root that cannot take an install or a rollback now (busy, nothing to roll back to)."""

    exit_code = ExitCode.BAD_INPUT


class BoxesMissing(UsageError):
    """A recipe (or --boxes) names a box to benchmark on that no node of the cluster offers."""

    def __init__(self, missing: list[str], offered: list[str]) -> None:
        self.missing, self.offered = missing, offered
        have = ", ".join(offered) if offered else "none"
        super().__init__(
            f"no node offers the box{'es' if len(missing) > 1 else ''} {', '.join(missing)} (boxes offered: {have})",
            "start `edgekit agent --box NAME --address HEAD` on that box, or choose others with --boxes "
            "(--boxes local benchmarks on the build machine)",
        )


class ClusterError(EdgekitError):
    """The cluster cannot be used: Ray is not installed, or the head cannot be reached."""

    exit_code = ExitCode.ENVIRONMENT
