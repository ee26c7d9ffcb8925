"""structlog set-up: human-readable on a terminal, JSON lines otherwise (containers, CI).

Modules take their logger from `get_logger` here, never from structlog directly: structlog imports rich
(~0.1 s) for pretty tracebacks whenever rich is installed, and a one-shot `render` or `diff -o json`
must not pay for that (our log lines never print a traceback through rich). Log lines go to stderr.
"""

from __future__ import annotations

import logging
import sys
import threading
from types import ModuleType
from typing import Any


def structlog_module() -> ModuleType:
    """structlog, imported the first time with rich hidden (its console renderer then formats tracebacks
    as plain text). A process that imported rich already (a table report, the daemon) keeps it."""
    if "structlog" not in sys.modules and "rich" not in sys.modules:
        sys.modules["rich"] = None  # type: ignore[assignment]  # makes `import rich` raise ImportError
        try:
            import structlog
        finally:
            del sys.modules["rich"]
    import structlog

    return structlog


# Level methods of structlog's bound loggers and their levels, for dropping a call below the configured
# level without importing structlog (`exception` logs at error level).
_LEVELS: dict[str, int] = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "msg": logging.INFO,
    "warning": logging.WARNING,
    "warn": logging.WARNING,
    "error": logging.ERROR,
    "exception": logging.ERROR,
    "critical": logging.CRITICAL,
    "fatal": logging.CRITICAL,
}
# `configure`'s choice while structlog is not imported yet: applied by the first line that is logged.
_pending: tuple[str, str] | None = None
# Held while structlog is imported and configured: a thread that logs its first line meanwhile (the apply
# pool's workers fail together) waits for the configuration instead of finding structlog's default, whose
# console lines go to stdout, ahead of a `-o json` report.
_lock = threading.Lock()


def _drop(*_args: Any, **_kw: Any) -> None:
    """A log call below the configured level, before anything was logged: nothing to do."""


def _structlog() -> ModuleType:
    """structlog, with the configuration `configure` left pending applied first.

    `_pending` is cleared only once the configuration is in place, and under the lock: no thread can see
    "nothing pending" while structlog still has its default configuration."""
    global _pending
    with _lock:
        structlog = structlog_module()
        if _pending is not None:
            _apply(structlog, *_pending)
            _pending = None
    return structlog


class _LazyLogger:
    """A structlog logger created on first use: importing a module costs nothing until it logs, and a
    one-shot command that logs nothing at its level (warning: `sync`, `diff`) never imports structlog
    (~20 ms of start-up)."""

    __slots__ = ("_logger", "_name")

    def __init__(self, name: str | None) -> None:
        self._name = name
        self._logger: Any = None

    def __getattr__(self, attr: str) -> Any:
        if self._logger is None:
            pending = _pending
            if pending is not None and _LEVELS.get(attr, logging.CRITICAL + 1) < _LEVELS[pending[1]]:
                return _drop  # structlog's filtering logger would drop it too: same outcome, no import
            self._logger = _structlog().get_logger(self._name)
        return getattr(self._logger, attr)


def get_logger(name: str | None = None) -> Any:
    """The logger of a module (`log = get_logger(__name__)`), bound to the configuration of the moment."""
    return _LazyLogger(name)


def configure(fmt: str = "auto", level: str = "info") -> None:
    """`fmt` is auto|json|console; logs always go to stderr so stdout stays the report. Until the first
    line is logged this only records the choice (structlog is imported then)."""
    global _pending
    level = level.lower()
    if level not in _LEVELS:
        raise ValueError(f"unknown log level {level!r}")
    with _lock:
        if "structlog" in sys.modules:
            _apply(sys.modules["structlog"], fmt, level)
            _pending = None
        else:
            _pending = (fmt, level)


def _json_line(event: Any, **kw: Any) -> str:
    """One JSON log line through orjson (jsoncodec): a daemon's cold apply of 20,000 objects logs a line for each,
    and stdlib json.dumps was ~0.5 s of that pass (py-spy). `default` is structlog's fallback (repr)."""
    from gitops_sync import jsoncodec

    return jsoncodec.dumps(event, default=kw.get("default")).decode()


def _apply(structlog: ModuleType, fmt: str, level: str) -> None:
    as_json = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    renderer = (
        structlog.processors.JSONRenderer(serializer=_json_line)
        if as_json
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
