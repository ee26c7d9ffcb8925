"""What a repository spelling says: remote or local, which host, and its credentials kept out of sight.

A URL's `user:password@` never reaches a log, a report or git's command line (`ps` shows that to every
user): `mask_url` hides it in text and `Remote` hands it to git through the environment. The clone cache
(clonecache.py) and the error messages (giterrors.py) take what is split here.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

_REMOTE_SCHEMES = ("https://", "http://", "ssh://", "git://", "file://", "git+ssh://", "ssh+git://")
_SCP_LIKE = re.compile(r"^[\w.-]+@[\w.-]+:(?!//)")  # git@github.com:org/repo.git
# Userinfo runs to the LAST `@` of the URL's token: `https://user:p@ss@host` must hide all of `p@ss`.
# (An `@` in a path makes this hide more than needed, never less.)
_USERINFO = re.compile(r"(?<=://)[^\s'\"<>]*@")
# Never prompt: a sync in CI must fail on bad credentials rather than hang on a password prompt.
# Never a lazy fetch: a `file://` remote's upload-pack runs in a repository someone else may write, and git
# strips GIT_CONFIG_* on its local transport (safegit's configuration never reaches it); if that repository is
# a partial clone, the lazy `git fetch` it would start runs its promisor remote's `uploadpack`,
# `core.sshCommand`, ... as us. upload-pack (git >= 2.39.4) sets GIT_NO_LAZY_FETCH=1 itself only when the
# environment does not say otherwise; the variable crosses the local transport, so ours wins. Our caches
# are never partial clones: nothing here needs a lazy fetch.
GIT_ENV = {"GIT_TERMINAL_PROMPT": "0", "GCM_INTERACTIVE": "never", "GIT_ASKPASS": "true", "GIT_NO_LAZY_FETCH": "1"}
# Credentials from a URL reach git through the environment only, never its command line (`ps` shows that
# to every user): a credential helper, configured by GIT_CONFIG_* variables, prints these two variables.
_USER_VAR, PASSWORD_VAR = "GITOPS_SYNC_CREDENTIAL_USERNAME", "GITOPS_SYNC_CREDENTIAL_PASSWORD"
_HELPER = f'!f() {{ test "$1" = get || exit 0; echo "username=${_USER_VAR}"; echo "password=${PASSWORD_VAR}"; }}; f'
# What of the controller's environment a tenant's (hermetic) git still sees: where programs are, temporary files,
# proxies and the CA bundles it trusts. No credential: not HOME (~/.gitconfig, ~/.git-credentials, ~/.netrc), no
# GIT_CONFIG_*, GIT_SSH*, GIT_ASKPASS/SSH_ASKPASS, SSH_AUTH_SOCK, GIT_SSL_CERT/KEY, nothing of gitops-sync's own.
_HERMETIC_PASSED = (
    "PATH",
    "TMPDIR",
    *(f"{p}_proxy" for p in ("http", "https", "no", "all")),
    *(f"{p}_PROXY" for p in ("HTTP", "HTTPS", "NO", "ALL")),
    "GIT_SSL_CAINFO",
    "GIT_SSL_CAPATH",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
)
# ssh of a hermetic fetch without a key of its own: no config, agent, default identity or known host of the
# controller's (ssh finds ~/.ssh through the password database, not HOME: each is switched off by name).
HERMETIC_SSH = (
    "ssh -F /dev/null -o BatchMode=yes -o IdentityAgent=none -o IdentitiesOnly=yes -o IdentityFile=none "
    "-o GlobalKnownHostsFile=/dev/null -o UserKnownHostsFile=/dev/null -o StrictHostKeyChecking=yes"
)


def mask_url(text: str) -> str:
    """Hide `user:password@` in URLs: tokens embedded in a repo URL must never reach logs or reports."""
    return _USERINFO.sub("***@", text)


def is_remote(repo: str) -> bool:
    """URLs and scp-like `user@host:path` are remote; anything else is a local path."""
    return repo.startswith(_REMOTE_SCHEMES) or bool(_SCP_LIKE.match(repo))


def host_of(url: str) -> str:
    """The host to name in errors (the path for file:// and local repositories)."""
    if url.startswith("file://"):
        return urlsplit(url).path or url
    if "://" in url:
        return urlsplit(url).hostname or mask_url(url)
    match = _SCP_LIKE.match(url)
    return match.group(0).split("@", 1)[1].rstrip(":") if match else url


def is_ssh(url: str) -> bool:
    """An ssh URL (`ssh://`, `git+ssh://`, scp-like `git@host:path`): its credentials are a key, not a password."""
    return url.lower().startswith(("ssh://", "git+ssh://", "ssh+git://")) or bool(_SCP_LIKE.match(url))


def git_config_env(
    pairs: list[tuple[str, str]] | tuple[tuple[str, str], ...], *, inherit: bool = True
) -> dict[str, str]:
    """`git -c key=value` through the environment (GIT_CONFIG_*), after whatever the caller configured
    (`inherit`; a hermetic fetch inherits none): a value here never shows on a command line."""
    count = int(os.environ.get("GIT_CONFIG_COUNT", "0") or 0) if inherit else 0  # keep what the caller configured
    env = {"GIT_CONFIG_COUNT": str(count + len(pairs))}
    for i, (key, value) in enumerate(pairs, start=count):
        env[f"GIT_CONFIG_KEY_{i}"], env[f"GIT_CONFIG_VALUE_{i}"] = key, value
    return env


@dataclass(frozen=True)
class Remote:
    """A remote URL split for git: what goes on the command line and what goes in the environment."""

    url: str  # without a password (and, for http(s), without any userinfo)
    env: dict[str, str]  # variables for git besides its configuration (GIT_SSH_COMMAND, GIT_SSL_CAINFO, …)
    secrets: tuple[str, ...] = field(default=(), repr=False)  # values to mask out of anything git prints
    config: tuple[tuple[str, str], ...] = ()  # `git -c` pairs, handed over as GIT_CONFIG_* (never argv)
    # A tenant's fetch: git runs in a hermetic environment with this (private, empty) HOME, reading no
    # configuration, credential, ssh key or agent of the controller's (`environment`). None: the controller's.
    home: Path | None = None

    @classmethod
    def of(cls, url: str) -> Remote:
        scheme, sep, rest = url.partition("://")
        authority, slash, path = rest.partition("/")
        userinfo, at, host = authority.rpartition("@")
        if not sep or not at:
            return cls(url, {})
        user, _, password = userinfo.partition(":")
        if scheme.lower() not in ("http", "https"):
            # ssh and the others: a user name is no secret and ssh needs it; a password cannot work anyway.
            return cls(f"{scheme}://{user + '@' if user else ''}{host}{slash}{path}", {})
        return cls.with_login(f"{scheme}://{host}{slash}{path}", unquote(user), unquote(password))

    @classmethod
    def with_login(cls, url: str, user: str, password: str) -> Remote:
        """`url` (no userinfo) fetched as `user`/`password`, handed to git by a credential helper."""
        # an empty helper first clears the list: these credentials win over any stored ones
        config = (("credential.helper", ""), ("credential.helper", _HELPER))
        return cls(url, {_USER_VAR: user, PASSWORD_VAR: password}, (password,) if password else (), config)

    @property
    def login_user(self) -> str:
        """The user name the URL gave for http(s) ("" when none)."""
        return self.env.get(_USER_VAR, "")

    def environment(self) -> dict[str, str]:
        """git's whole environment for this remote: the controller's own plus ours, or (`home` set) a
        hermetic one: no system or global configuration, only the variables of _HERMETIC_PASSED, and ssh
        without config, agent or default keys unless GIT_SSH_COMMAND (a Secret's key) says otherwise."""
        if self.home is None:
            env = {**os.environ, **GIT_ENV, **self.env, **git_config_env(self.config)}
            if not env.get("GIT_SSH_COMMAND") and not env.get("GIT_SSH"):
                env["GIT_SSH_COMMAND"] = "ssh -o BatchMode=yes"
        else:
            env = {k: os.environ[k] for k in _HERMETIC_PASSED if k in os.environ}
            env.update(
                HOME=str(self.home),
                XDG_CONFIG_HOME=str(self.home / ".config"),
                GIT_CONFIG_NOSYSTEM="1",
                GIT_CONFIG_GLOBAL="/dev/null",
                SSH_ASKPASS_REQUIRE="never",
                GIT_SSH_COMMAND=HERMETIC_SSH,
            )
            env.update({**GIT_ENV, **self.env, **git_config_env(self.config, inherit=False)})
        env.update(LC_ALL="C", LANGUAGE="C")  # git's messages in English: giterrors.explain reads them
        return env
