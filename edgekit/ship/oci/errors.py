"""What can go wrong between a box and an OCI registry (the exit codes: `edgekit.errors.ExitCode`)."""

from __future__ import annotations

from edgekit.errors import EdgekitError, ExitCode


class RegistryError(EdgekitError):
    """An OCI registry that cannot be reached, or that stopped answering and did not come back within the retries."""

    exit_code = ExitCode.ENVIRONMENT


class RegistryAuthError(RegistryError):
    """The registry refused the credentials, or asked for some and none were given."""

    exit_code = ExitCode.INTEGRITY


class RegistryNotFound(RegistryError):
    """The reference names a repository, tag or digest the registry does not hold."""

    exit_code = ExitCode.BAD_INPUT


class ArtifactError(EdgekitError):
    """What a registry served is not the edgekit artifact its manifest describes (a changed byte, a missing layer)."""

    exit_code = ExitCode.INTEGRITY

    def __init__(self, reference: str, problem: str) -> None:
        self.reference, self.problem = reference, problem
        super().__init__(f"{reference}: {problem}; nothing was installed", "push the bundle again (edgekit push), "
                         "or check what sits between box and registry (a proxy that rewrites bytes)")  # fmt: skip
