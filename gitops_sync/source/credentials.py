"""Git credentials given apart from the URL: the CLI's flags and variables, a GitSync's Secret.

`authenticated(url, credentials)` turns them into what one fetch hands git: the URL for its command line
(never a secret) and variables for its environment (a credential helper printing a password, an
`Authorization` header, a `GIT_SSH_COMMAND` naming a private 0600 key file and known_hosts). The key file
lives only while the fetch runs, in a 0700 directory removed afterwards. checkout.fetch runs the fetch
with what is yielded; a secret never reaches argv, the clone-cache key (the URL without credentials), a
log or an error (`Remote.secrets` are masked out of git's stderr).
"""

from __future__ import annotations

import os
import shlex
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from gitops_sync.errors import CredentialsUnavailable, SourceError
from gitops_sync.source.remote import Remote, is_ssh

# An empty `credential.helper` clears git's list: a tenant's fetch never uses what the controller stored.
_NO_HELPERS = ("credential.helper", "")


@dataclass(frozen=True)
class GitCredentials:
    """Credentials for one source. Text values are held in memory only; `*_file` are the CLI's paths."""

    origin: str = ""  # where they come from, for messages: "Secret ns/name", "the command line"
    username: str = ""
    password: str = field(default="", repr=False)
    bearer_token: str = field(default="", repr=False)
    identity: str = field(default="", repr=False)  # an SSH private key (OpenSSH/PEM), no passphrase
    identity_file: Path | None = None
    known_hosts: str = ""
    known_hosts_file: Path | None = None
    ca_cert: str = ""  # PEM of the CA an https server's certificate is checked against (a Secret's ca.crt)
    # A tenant's credentials (its GitSync's Secret, or none at all): git runs hermetically (a private empty
    # HOME, no system or global configuration, credential helper, askpass, ssh config, agent or key of the
    # controller's; ssh trusts only the given known_hosts): Remote.environment.
    isolated: bool = False
    # Whose clone cache the fetch uses ("" = the controller's): objects fetched with other credentials are
    # never read (checkout.fetch keys the cache by URL and scope). Names only, never a credential.
    cache_scope: str = ""

    @property
    def has_http(self) -> bool:
        return bool(self.password or self.bearer_token)

    @property
    def has_ssh(self) -> bool:
        return bool(self.identity or self.identity_file or self.known_hosts or self.known_hosts_file)

    def check(self) -> None:
        """Refuse what cannot work, naming `origin` (never a value)."""
        where = self.origin or "the credentials"
        if self.password and self.bearer_token:
            raise SourceError(f"{where}: give a password or a bearer token, not both")
        if self.password and not self.username:
            raise SourceError(f"{where}: a password needs a username")
        if self.isolated and self.identity and not self.known_hosts:
            raise SourceError(f"{where}: an SSH identity needs known_hosts (host keys are always verified)")


def credentials_from_environment(
    *,
    username: str | None,
    password_file: Path | None,
    bearer_token_file: Path | None,
    ssh_key_file: Path | None,
    known_hosts: Path | None,
    environ: dict[str, str] | None = None,
) -> GitCredentials | None:
    """The CLI's credentials: files named by flags, or the values in GITOPS_SYNC_GIT_PASSWORD /
    GITOPS_SYNC_GIT_BEARER_TOKEN (a value is never a flag: argv is visible to every user). None: none given."""
    env = os.environ if environ is None else environ
    password = _read(password_file, "--git-password-file") if password_file else env.get(PASSWORD_ENV, "")
    token = _read(bearer_token_file, "--git-bearer-token-file") if bearer_token_file else env.get(TOKEN_ENV, "")
    for path, flag in ((ssh_key_file, "--ssh-key-file"), (known_hosts, "--known-hosts")):
        if path is not None and not path.expanduser().is_file():
            raise SourceError(f"{flag} {path}: no such file")
    creds = GitCredentials(
        origin="the command line",
        username=username or "",
        password=password,
        bearer_token=token,
        identity_file=ssh_key_file.expanduser().resolve() if ssh_key_file else None,
        known_hosts_file=known_hosts.expanduser().resolve() if known_hosts else None,
    )
    if creds == GitCredentials(origin=creds.origin):
        return None
    creds.check()
    return creds


PASSWORD_ENV = "GITOPS_SYNC_GIT_PASSWORD"
TOKEN_ENV = "GITOPS_SYNC_GIT_BEARER_TOKEN"


def _read(path: Path, flag: str) -> str:
    try:
        text = path.expanduser().read_text().strip()
    except OSError as exc:
        raise SourceError(f"{flag} {path}: cannot read it: {exc.strerror or exc}") from None
    if not text:
        raise SourceError(f"{flag} {path}: the file is empty")
    return text


@contextmanager
def authenticated(url: str, credentials: GitCredentials | None) -> Iterator[Remote]:
    """The `Remote` to fetch `url` with: the URL's own userinfo as today, the given credentials on top
    (they win). SSH files are written for the duration of the block only. `isolated` credentials (a
    tenant's, possibly empty) fetch hermetically: git and ssh in a private empty HOME, nothing of the
    controller's (Remote.environment)."""
    remote = Remote.of(url)
    if credentials is None:
        yield remote
        return
    credentials.check()
    ssh = is_ssh(remote.url)
    if credentials.isolated:
        _refuse_unusable(remote.url, credentials, ssh)
    elif not (credentials.has_ssh if ssh else credentials.ca_cert):
        yield remote if ssh else _http(remote, credentials, None)
        return
    workdir = Path(tempfile.mkdtemp(prefix="gitops-sync-git-"))  # 0700, removed when the fetch is done
    try:
        if ssh and credentials.has_ssh:
            remote = replace(remote, env={**remote.env, "GIT_SSH_COMMAND": _ssh_command(credentials, workdir)})
        elif not ssh:
            ca = _private_file(workdir / "ca.crt", credentials.ca_cert) if credentials.ca_cert else None
            remote = _http(remote, credentials, ca)
        if credentials.isolated:
            (workdir / "home").mkdir(mode=0o700)
            remote = replace(remote, home=workdir / "home")
        yield remote
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _refuse_unusable(url: str, credentials: GitCredentials, ssh: bool) -> None:
    """A tenant's credentials that do not fit the URL: said before git runs (a tenant's SSH fetch without a
    key of its own could only fail, as ssh is never given the controller's)."""
    where = credentials.origin or "the credentials"
    if ssh and credentials.has_http:
        raise CredentialsUnavailable(f"{where} holds a password or token, but {url} is an SSH URL (give identity)")
    if ssh and not credentials.identity:
        given = credentials.has_ssh or credentials.ca_cert or credentials.origin
        have = f"{where} holds no SSH identity" if given else "it has no spec.secretRef"
        raise CredentialsUnavailable(
            f"authentication failed for {url}: {have} (a tenant GitSync fetches an SSH URL with the identity and "
            "known_hosts of its spec.secretRef only, never with the controller's keys)"
        )
    if not ssh and credentials.identity:
        raise CredentialsUnavailable(f"{where} holds an SSH identity, but {url} is not an SSH URL")


def _http(remote: Remote, creds: GitCredentials, ca_file: Path | None) -> Remote:
    """Basic auth through the credential helper, a bearer token as an `Authorization` header (git 2.39 has
    no bearer credential type); both in the environment only. `ca_file`: the CA to check the server by
    (GIT_SSL_CAINFO: git lets that variable, when the controller's environment sets it, beat `http.sslCAInfo`)."""
    ca = {"GIT_SSL_CAINFO": str(ca_file)} if ca_file is not None else {}
    if creds.bearer_token:
        header = ("http.extraHeader", f"Authorization: Bearer {creds.bearer_token}")
        return Remote(remote.url, ca, (creds.bearer_token,), (_NO_HELPERS, header))  # the URL's login dropped
    if creds.password:
        login = Remote.with_login(remote.url, creds.username or remote.login_user, creds.password)
    elif remote.config:  # the URL's own login
        login = remote
    else:
        login = replace(remote, config=(_NO_HELPERS,)) if creds.isolated else remote  # none of ours
    return replace(login, env={**login.env, **ca})


def _ssh_command(creds: GitCredentials, workdir: Path) -> str:
    """ssh in batch mode, host keys checked strictly; the key and known_hosts as files in `workdir`."""
    opts = ["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-o", "UpdateHostKeys=no"]
    if creds.isolated:
        # Nothing of the controller's own: no ~/.ssh/config, agent, default keys or system known_hosts.
        opts += ["-F", "/dev/null", "-o", "IdentityAgent=none", "-o", "GlobalKnownHostsFile=/dev/null"]
    key = creds.identity_file
    if creds.identity:
        key = _private_file(workdir / "identity", creds.identity)
    if key is not None:
        opts += ["-o", "IdentitiesOnly=yes", "-i", str(key)]
    known = creds.known_hosts_file
    if creds.known_hosts:
        known = _private_file(workdir / "known_hosts", creds.known_hosts)
    if known is not None:
        opts += ["-o", f"UserKnownHostsFile={known}"]
    elif creds.isolated:
        opts += ["-o", "UserKnownHostsFile=/dev/null"]  # nothing known: every host refused
    return shlex.join(["ssh", *opts])


def _private_file(path: Path, text: str) -> Path:
    """A 0600 file created for this fetch only (ssh refuses a key others may read; it needs the newline)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text if text.endswith("\n") else text + "\n")
    return path


__all__ = ["PASSWORD_ENV", "TOKEN_ENV", "GitCredentials", "authenticated", "credentials_from_environment"]
