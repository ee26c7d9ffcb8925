"""TLS for the daemon's HTTP port: a server certificate from files, reloaded when they change (a Secret
volume's rotation, cert-manager's renewal), TLS 1.2 or newer. http.py wraps each accepted connection with
`Certificates.context()`, so a rotated certificate serves the next connection without a restart.

The standard library's `ssl` (OpenSSL) over waitress's sockets: waitress has no TLS of its own, and a server
of another library would drop the limits and timeouts `http.Limits` holds (issue 9).
"""

from __future__ import annotations

import os
import ssl
import threading
import time
from pathlib import Path

from gitops_sync.errors import GitOpsError
from gitops_sync.log import get_logger

log = get_logger(__name__)

CHECK_EVERY = 1.0  # seconds between looks at the files' identity (stat only)


class TlsError(GitOpsError):
    """The certificate or key cannot be read, or they do not match."""


def _identity(path: Path) -> tuple[int, int, int]:
    """What changes when a file is replaced or rewritten (a Secret volume swaps a symlink: the inode)."""
    st = os.stat(path)
    return st.st_ino, st.st_mtime_ns, st.st_size


class Certificates:
    """The server's TLS context from `cert_file` and `key_file`; a new one when either file changes.

    A file caught half-written (or a key that no longer matches) keeps the previous context and logs a
    warning; the next change is tried again. The first load must succeed: `run` fails at start instead."""

    def __init__(self, cert_file: Path, key_file: Path) -> None:
        self.cert_file, self.key_file = cert_file, key_file
        self._lock = threading.Lock()
        self._next_check = 0.0
        try:
            self._seen = self._identities()
            self._context = self._load()
        except (OSError, ssl.SSLError) as exc:
            raise TlsError(f"cannot load the TLS certificate {cert_file} and key {key_file}: {exc}") from exc
        self.loads = 1  # contexts built so far (a figure for logs and tests)

    def _identities(self) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        return _identity(self.cert_file), _identity(self.key_file)

    def _load(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.cert_file, self.key_file)
        return context

    def context(self) -> ssl.SSLContext:
        """The current context; at most every CHECK_EVERY seconds the files are looked at again."""
        with self._lock:
            now = time.monotonic()
            if now >= self._next_check:
                self._next_check = now + CHECK_EVERY
                self._reload_if_changed()
            return self._context

    def _reload_if_changed(self) -> None:
        try:
            seen = self._identities()
        except OSError:  # mid-rotation (a file briefly absent): look again at the next check
            return
        if seen == self._seen:
            return
        self._seen = seen  # a failed load is tried again when a file changes again (the write completes)
        try:
            self._context = self._load()
        except (OSError, ssl.SSLError) as exc:
            log.warning("tls: the changed certificate cannot be loaded; serving the previous one", error=str(exc))
            return
        self.loads += 1
        log.info("tls: certificate reloaded", cert_file=str(self.cert_file))
