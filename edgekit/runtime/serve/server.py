"""Run the HTTP server: verify the bundle, open the port, load and warm up in the background."""

from __future__ import annotations

import logging
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from edgekit.errors import EdgekitError, EngineError, UsageError
from edgekit.runtime.loader import inspect_bundle
from edgekit.runtime.serve.app import ServeState, create_app, describe_error


def serve(
    bundle: Path,
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    artifact: str | None = None,
    overrides: dict[str, Any] | None = None,
    log_level: str = "info",
    trusted_keys: Sequence[Path] = (),
    colours: bool | None = None,
) -> None:
    """`colours`: uvicorn's coloured log lines (None: when stderr is a terminal; False for NO_COLOR, pipes, CI)."""
    import uvicorn

    # refuses a modified bundle, or one the box's trust policy does not trust
    info = inspect_bundle(bundle, artifact=artifact, overrides=overrides, trusted_keys=trusted_keys)
    _check_port(host, port)
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("edgekit").info(
        "serving %s on http://%s:%d (numa: %s; threads %d/%d; max_concurrent %d)",
        info.model_name,
        host,
        port,
        info.numa.reason,
        info.config.n_threads,
        info.config.n_threads_batch,
        info.config.max_concurrent,
    )
    state = ServeState(info)
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(state),
            host=host,
            port=port,
            log_level=log_level,
            timeout_graceful_shutdown=5,
            use_colors=colours,
        )
    )

    def stop(_exc: BaseException) -> None:
        server.should_exit = True

    state.on_failure = stop
    state.load_in_background()
    try:
        server.run()
    finally:
        state.close()
    if state.error is not None:
        if isinstance(state.error, EdgekitError):
            raise state.error
        raise EngineError(f"loading {info.model_name} failed: {describe_error(state.error)}", "see the log above")


def _check_port(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise UsageError(
                f"cannot listen on {host}:{port}: {exc.strerror}", "choose another --port, or stop what uses it"
            ) from None
