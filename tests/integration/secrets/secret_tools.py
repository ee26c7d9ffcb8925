"""The real tools behind encrypted secrets and signed commits, for tests: `sops` and `age-keygen` built by
`cluster.py build --with sops` (on demand, cached like the control plane), gpg with a private GNUPGHOME,
ssh-keygen for SSH signing keys, and git. Nothing is mocked; every helper runs the real binary.

Test modules import `secret_tools_fixture` (the fixture `secret_tools`) rather than a conftest.py here: a
second module named `conftest` outside a package would shadow tests/conftest.py for modules collected later."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import git
import pytest

LAUNCHER = Path(__file__).resolve().parents[3] / "deploy" / "local-cluster" / "cluster.py"
# For every test using `secret_tools`: whichever runs first may build sops from a clean cache inside its setup
# (353 s measured on 2 busy cores), past pytest's default 300 s per test.
MARKS = [pytest.mark.cluster, pytest.mark.timeout(1200)]


@dataclass(frozen=True)
class SecretTools:
    bin_dir: Path  # holds sops and age-keygen (and the control plane's binaries)
    work: Path  # a directory for keys and GNUPGHOMEs of this session

    @property
    def path(self) -> str:
        return f"{self.bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"

    def run(self, *argv: str, env: dict[str, str] | None = None, input: bytes | None = None) -> bytes:
        full = {**os.environ, "PATH": self.path, **(env or {})}
        done = subprocess.run(list(argv), env=full, input=input, capture_output=True, timeout=120, check=False)
        assert done.returncode == 0, f"{argv[:3]} failed ({done.returncode}): {done.stderr.decode(errors='replace')}"
        return done.stdout

    def age_key(self, name: str) -> tuple[Path, str]:
        """A new age identity file and its recipient (public key)."""
        key = self.work / f"{name}-{uuid.uuid4().hex[:8]}.agekey"  # a name may come back in the session
        self.run("age-keygen", "-o", str(key))
        recipient = next(ln.split(": ", 1)[1] for ln in key.read_text().splitlines() if "public key:" in ln)
        return key, recipient.strip()

    def pgp_key(self, name: str) -> PgpKey:
        """A new OpenPGP key (no passphrase) in its own GNUPGHOME, exported armored."""
        home = Path(tempfile.mkdtemp(prefix="gnupg-", dir=self.work))
        home.chmod(0o700)
        env = {"GNUPGHOME": str(home)}
        uid = f"{name} <{name}@example.com>"
        self.run("gpg", "--batch", "--passphrase", "", "--quick-gen-key", uid, "ed25519", "sign", "never", env=env)
        fpr = self._fingerprint(uid, env)
        self.run("gpg", "--batch", "--passphrase", "", "--quick-add-key", fpr, "cv25519", "encr", "never", env=env)
        private = home / "private.asc"
        private.write_bytes(self.run("gpg", "--batch", "--armor", "--export-secret-keys", fpr, env=env))
        public = home / "public.asc"
        public.write_bytes(self.run("gpg", "--batch", "--armor", "--export", fpr, env=env))
        return PgpKey(home, fpr, uid, private, public)

    def _fingerprint(self, uid: str, env: dict[str, str]) -> str:
        out = self.run("gpg", "--batch", "--with-colons", "--list-keys", uid, env=env).decode()
        return next(ln.split(":")[9] for ln in out.splitlines() if ln.startswith("fpr:"))

    def ssh_key(self, name: str) -> tuple[Path, str]:
        """A new ed25519 SSH key (no passphrase) and its public line."""
        key = self.work / f"{name}-{uuid.uuid4().hex[:8]}.ssh"
        self.run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(key))
        return key, Path(f"{key}.pub").read_text().strip()

    def signer(self, name: str) -> tuple[Path, Path]:
        """A new SSH signing key and an allowed-signers file trusting it as `<name>@example.com`."""
        key, public = self.ssh_key(name)
        signers = Path(f"{key}.allowed_signers")
        signers.write_text(f"{name}@example.com {public}\n")
        return key, signers

    def encrypt(self, plain: Path, out: Path, *, age: str = "", pgp: PgpKey | None = None) -> None:
        """`sops encrypt` of a manifest, only its data/stringData values (as users do), to `out`."""
        args = ["sops", "encrypt", "--encrypted-regex", "^(data|stringData)$"]
        env: dict[str, str] = {}
        if age:
            args += ["--age", age]
        if pgp is not None:
            args += ["--pgp", pgp.fingerprint]
            env["GNUPGHOME"] = str(pgp.home)
        out.write_bytes(self.run(*args, str(plain), env=env))

    def stop_agents(self) -> None:
        for home in self.work.glob("gnupg-*"):
            subprocess.run(["gpgconf", "--kill", "all"], env={**os.environ, "GNUPGHOME": str(home)}, check=False)


@dataclass(frozen=True)
class PgpKey:
    home: Path  # its own GNUPGHOME (the test's keyring, not the one gitops-sync makes)
    fingerprint: str
    uid: str
    private: Path  # armored secret key
    public: Path  # armored public key


@pytest.fixture(scope="session", name="secret_tools")
def secret_tools_fixture() -> Iterator[SecretTools]:
    """`cluster.py build --with sops` (a no-op once built; LOCAL_CLUSTER_CACHE picks the cache)."""
    done = subprocess.run(
        [sys.executable, str(LAUNCHER), "build", "--with", "sops"], stdout=subprocess.PIPE, text=True, check=False
    )
    if done.returncode != 0:  # the launcher's stderr (passed through) names the failure and the log tail
        pytest.fail(f"cluster.py build --with sops failed with exit status {done.returncode}", pytrace=False)
    bin_dir = Path(done.stdout.strip().splitlines()[-1])
    work = Path(tempfile.mkdtemp(prefix="secret-tools-"))
    tools = SecretTools(bin_dir, work)
    try:
        yield tools
    finally:
        tools.stop_agents()
        shutil.rmtree(work, ignore_errors=True)


class Repo:
    """A work tree whose commits are signed (or not) with real keys (test_signed_commits, test_fleet_verify)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.git = git.Repo.init(root, initial_branch="main")
        self.git.config_writer().set_value("user", "name", "t").set_value("user", "email", "t@t").release()

    def commit(
        self, files: dict[str, str | None], signing: list[str] | None = None, env: dict[str, str] | None = None
    ) -> str:
        """Write (None: remove) files and commit them, signed when `signing` holds the `-c` settings."""
        for name, text in files.items():
            if text is None:
                (self.root / name).unlink()
            else:
                (self.root / name).write_text(text)
        self.git.git.add("-A")
        config = [arg for setting in signing or [] for arg in ("-c", setting)]
        subprocess.run(
            ["git", *config, "commit", "-q", "-m", "change", *(["-S"] if signing else [])],
            cwd=self.root,
            env={**os.environ, **(env or {})},
            check=True,
            capture_output=True,
        )
        return self.git.head.commit.hexsha


def ssh_signing(key: Path) -> list[str]:
    return ["gpg.format=ssh", f"user.signingkey={key}"]


def pgp_signing(key: PgpKey) -> tuple[list[str], dict[str, str]]:
    return ["gpg.format=openpgp", f"user.signingkey={key.fingerprint}"], {"GNUPGHOME": str(key.home)}
