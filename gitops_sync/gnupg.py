"""A private HOME and GNUPGHOME for one run of sops or git: keys go in, nothing of the user's is read.

Used by render/sops.py (OpenPGP private keys for `sops decrypt`) and source/verify.py (trusted public keys for
`git verify-commit`): a 0700 directory made for the run, its environment (only `PATH` of ours), keys imported
with gpg, and on the way out the gpg-agent stopped and the directory removed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class PrivateHome:
    path: Path  # HOME of the run; GNUPGHOME is its `gnupg` sub-directory
    env: dict[str, str]  # the whole environment of the tools run in it

    def import_keys(self, armored: bytes, what: str, error: type[Exception], timeout: float) -> list[str]:
        """Import armored keys; returns their fingerprints (primary keys and sub-keys). `what` names the flag
        the keys came from in the error (`error`: the caller's own, a RenderError or SourceError); the keys themselves
        are never quoted."""
        try:
            done = subprocess.run(
                ["gpg", "--batch", "--quiet", "--import", "--import-options", "import-show", "--with-colons"],
                input=armored,
                env=self.env,
                capture_output=True,
                timeout=timeout,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            raise error(f"cannot run gpg for {what} (install gnupg): {type(err).__name__}") from None
        if done.returncode != 0:
            raise error(f"cannot import an OpenPGP key given by {what} (gpg --import refused it)")
        listing = done.stdout.decode(errors="replace").splitlines()
        return [ln.split(":")[9] for ln in listing if ln.startswith("fpr:")]


# gpg-agent's sockets live in GNUPGHOME, and a Unix socket path holds at most 107 bytes: past this length of
# the temporary directory (a long $TMPDIR), /tmp is used instead, or gpg cannot import a private key.
_MAX_BASE = 48


def _short_base() -> str | None:
    base = tempfile.gettempdir()
    if len(base) <= _MAX_BASE or not os.access("/tmp", os.W_OK | os.X_OK):
        return None
    return "/tmp"


@contextlib.contextmanager
def private_home(prefix: str) -> Iterator[PrivateHome]:
    home = Path(tempfile.mkdtemp(prefix=prefix, dir=_short_base()))  # mode 0700
    gnupg = home / "gnupg"
    gnupg.mkdir(mode=0o700)
    env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(home), "GNUPGHOME": str(gnupg)}
    try:
        yield PrivateHome(home, env)
    finally:
        with contextlib.suppress(OSError, subprocess.SubprocessError):  # the agent gpg (or sops's gpg) started
            subprocess.run(["gpgconf", "--kill", "all"], env=env, capture_output=True, timeout=10, check=False)
        shutil.rmtree(home, ignore_errors=True)
