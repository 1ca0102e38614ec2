"""Other libraries' output during a build goes to the running stage's log file, never to the terminal.

While `capture(path)` is open in a thread, everything that is not edgekit's own progress lands in
`path`: Python warnings (`logging.captureWarnings`), the records of every library's logger (transformers
through its own `transformers.utils.logging` switches; any other logger's terminal handler is set
aside while the capture lasts), and text written to `sys.stdout`/`sys.stderr` (tqdm bars, prints,
llama.cpp's log lines as llama-cpp-python prints them when not silenced). Child processes write into
log files of their own beside it (`edgekit.backends.child`), which are scanned the same way; they
are where llama.cpp's C-level output (converter, quantizer) and exporters' output land.

Each capture keeps the one-line notices (`edgekit.observe.notices`) its output called for; the executor shows
them when the stage ends. Output from a thread with no capture of its own (a library's helper thread,
planning) goes to the outermost open capture: the build's log. `echo(stream)` (the CLI's `--verbose`)
copies everything to the terminal as well.

Routing is process-wide while any capture is open and undone when the last one closes; the CLI's
own consoles write to the streams they were given before, so they are never routed.
"""

from __future__ import annotations

import contextlib
import io
import logging
import shutil
import sys
import tempfile
import threading
import warnings
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import Any, TextIO

from edgekit.errors import EdgekitError
from edgekit.observe.notices import notable


class Capture:
    """One open log file, written from any thread; and the notices its output called for."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.notices: list[str] = []
        if path is None:  # a file with no name: nothing is left behind, even by a killed process
            self._file: TextIO = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(path, "a", encoding="utf-8", errors="replace")  # noqa: SIM115 (closed by close())
        self._lock = threading.Lock()

    def text(self) -> str:
        """Everything written so far."""
        with self._lock:
            if self.path is not None:
                return self.path.read_text(encoding="utf-8", errors="replace")
            self._file.seek(0)
            found = self._file.read()
            self._file.seek(0, io.SEEK_END)
            return found

    def write(self, text: str) -> None:
        with self._lock:
            if not self._file.closed:
                self._file.write(text)
                self._file.flush()
            self.notice(text)
        if _routing.echo is not None:
            _routing.echo.write(text)
            _routing.echo.flush()

    def notice(self, text: str) -> None:
        for line in notable(text):
            if line not in self.notices:
                self.notices.append(line)

    def close(self) -> None:
        with self._lock:
            self._file.close()


_current: ContextVar[Capture | None] = ContextVar("edgekit_stage_log", default=None)


class _RoutingStream(io.TextIOBase):
    """Stands in for sys.stdout/sys.stderr: text goes to this thread's capture (or the build's), else through."""

    def __init__(self, original: TextIO) -> None:
        self.original = original

    def write(self, text: str) -> int:
        target = _target()
        if target is None:
            return self.original.write(text)
        target.write(text)
        return len(text)

    def flush(self) -> None:
        with contextlib.suppress(Exception):
            self.original.flush()

    def isatty(self) -> bool:
        return False  # a log file: progress bars draw their plain form

    def fileno(self) -> int:
        return self.original.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.original, "encoding", None) or "utf-8"


class _RoutingHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.NOTSET)
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = self.format(record) + "\n"
        except Exception:  # a library's bad format string must not stop the build
            self.handleError(record)
            return
        target = _target()
        if target is not None:
            target.write(text)
        elif _routing.saved_streams:
            _routing.saved_streams[1].write(text)


class _Routing:
    """What is routed while any capture is open, and what to put back when the last one closes."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.open: list[Capture] = []
        self.echo: TextIO | None = None
        self.handler = _RoutingHandler()
        self.saved_streams: tuple[Any, Any] | None = None
        self.set_aside: list[tuple[logging.Logger, logging.Handler, bool]] = []
        self.undo: list[Any] = []

    def install(self) -> None:
        self.saved_streams = (sys.stdout, sys.stderr)
        sys.stdout, sys.stderr = _RoutingStream(sys.stdout), _RoutingStream(sys.stderr)
        logging.getLogger().addHandler(self.handler)
        showwarning = warnings.showwarning
        logging.captureWarnings(True)

        def restore_warnings() -> None:
            logging.captureWarnings(False)
            warnings.showwarning = showwarning

        self.undo = [restore_warnings]
        self.undo += _quiet_transformers()

    def set_aside_terminal_handlers(self) -> None:
        """Loggers that print to the terminal themselves (huggingface_hub, nncf…) log through ours meanwhile;
        one that prints into the routed streams and also propagates to ours would log twice."""
        terminals = {id(s) for s in (*(self.saved_streams or ()), sys.__stdout__, sys.__stderr__)}
        for logger in [logging.getLogger(), *_loggers()]:
            for handler in list(logger.handlers):
                stream = getattr(handler, "stream", None)
                routed = isinstance(stream, _RoutingStream) and logger.propagate
                if isinstance(handler, logging.StreamHandler) and (id(stream) in terminals or routed):
                    logger.removeHandler(handler)
                    self.set_aside.append((logger, handler, logger.propagate))
                    logger.propagate = True

    def uninstall(self) -> None:
        for logger, handler, propagate in reversed(self.set_aside):
            logger.addHandler(handler)
            logger.propagate = propagate
        self.set_aside.clear()
        for undo in reversed(self.undo):
            undo()
        logging.getLogger().removeHandler(self.handler)
        if self.saved_streams is not None:
            sys.stdout, sys.stderr = self.saved_streams
            self.saved_streams = None


_routing = _Routing()


def _target() -> Capture | None:
    return _current.get() or (_routing.open[0] if _routing.open else None)


def _loggers() -> list[logging.Logger]:
    known = logging.Logger.manager.loggerDict.copy()  # one C-level copy: other threads may be adding loggers
    return [lg for lg in known.values() if isinstance(lg, logging.Logger)]


def _quiet_transformers() -> list[Any]:
    """transformers' records through the root logger (so into the log) instead of its own stderr handler."""
    if "transformers" not in sys.modules:
        return []
    from transformers.utils import logging as tf_logging

    propagated = logging.getLogger("transformers").propagate
    tf_logging.disable_default_handler()
    tf_logging.enable_propagation()
    return [tf_logging.enable_default_handler, tf_logging.enable_propagation if propagated else
            tf_logging.disable_propagation]  # fmt: skip


def echo(stream: TextIO | None) -> None:
    """Copy everything captured to `stream` too (the CLI's --verbose), or stop with None."""
    _routing.echo = stream


def echoing() -> TextIO | None:
    """Where captured output is copied to as well (--verbose), if anywhere."""
    return _routing.echo


@contextlib.contextmanager
def capture(path: Path | None = None) -> Iterator[Capture]:
    """Route other libraries' output in this thread (and threads with none of their own) into `path` (None: a
    nameless temp file, read back with `Capture.text()`)."""
    log = Capture(Path(path) if path is not None else None)
    with _routing.lock:
        if not _routing.open:
            _routing.install()
        _routing.open.append(log)
        _routing.set_aside_terminal_handlers()
    token = _current.set(log)
    try:
        yield log
    finally:
        _current.reset(token)
        with _routing.lock:
            _routing.open.remove(log)
            if not _routing.open:
                _routing.uninstall()
        log.close()


def keep(exc: BaseException, kept: Path, logs: dict[str, Path | str], was: Path | None = None) -> None:
    """After a failure, keep `logs` (name → file about to be removed with folder `was`, or text) in `kept`, and say
    where in the error."""
    logs = {name: log for name, log in logs.items() if isinstance(log, str) or log.is_file()}
    if not logs:
        return
    try:  # best effort: a full or read-only disk must not hide the error being reported
        shutil.rmtree(kept, ignore_errors=True)
        kept.mkdir(parents=True, exist_ok=True)
        for name, log in logs.items():
            if isinstance(log, str):
                (kept / name).write_text(log, encoding="utf-8")
            else:
                shutil.copyfile(log, kept / name)
    except OSError:
        return
    if isinstance(exc, EdgekitError):
        if exc.hint and was is not None and str(was) in exc.hint:  # it names a log file of the folder removed
            exc.hint = exc.hint.replace(str(was), str(kept))
        else:
            exc.logs = kept


def scan(text: str) -> None:
    """Note what a child process's log calls for in the current capture (its text is in its own file)."""
    if (log := _target()) is not None:
        log.notice(text)
