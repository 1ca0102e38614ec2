"""Typed errors. Each one says what went wrong and what to do about it.

The CLI turns any `EdgekitError` into one message and the exit code the class declares;
anything else is a bug and is shown as such (with the traceback under `--debug`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


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

    def __init__(self, path: Path, needed: int, free: int) -> None:
        self.path, self.needed, self.free = path, needed, free
        super().__init__(
            f"not enough disk space in {path}: need {needed / 2**20:,.0f} MiB, {free / 2**20:,.0f} MiB free",
            "free some space or point EDGEKIT_CACHE / the output directory at a larger disk; nothing was written",
        )


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
