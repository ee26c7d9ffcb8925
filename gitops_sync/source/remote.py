"""What a repository spelling says: remote or local, which host, and its credentials kept out of sight.

A URL's `user:password@` never reaches a log, a report or git's command line (`ps` shows that to every
user): `mask_url` hides it in text and `Remote` hands it to git through the environment. The clone cache
(clonecache.py) and the error messages (giterrors.py) take what is split here.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

_REMOTE_SCHEMES = ("https://", "http://", "ssh://", "git://", "file://", "git+ssh://", "ssh+git://")
_SCP_LIKE = re.compile(r"^[\w.-]+@[\w.-]+:(?!//)")  # git@github.com:org/repo.git
# Userinfo runs to the LAST `@` of the URL's token: `https://user:p@ss@host` must hide all of `p@ss`.
# (An `@` in a path makes this hide more than needed, never less.)
_USERINFO = re.compile(r"(?<=://)[^\s'\"<>]*@")
# Never prompt: a sync in CI must fail on bad credentials rather than hang on a password prompt.
GIT_ENV = {"GIT_TERMINAL_PROMPT": "0", "GCM_INTERACTIVE": "never", "GIT_ASKPASS": "true"}
# Credentials from a URL reach git through the environment only, never its command line (`ps` shows that
# to every user): a credential helper, configured by GIT_CONFIG_* variables, prints these two variables.
_USER_VAR, PASSWORD_VAR = "GITOPS_SYNC_CREDENTIAL_USERNAME", "GITOPS_SYNC_CREDENTIAL_PASSWORD"
_HELPER = f'!f() {{ test "$1" = get || exit 0; echo "username=${_USER_VAR}"; echo "password=${PASSWORD_VAR}"; }}; f'


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


def git_config_env(pairs: list[tuple[str, str]]) -> dict[str, str]:
    """`git -c key=value` through the environment (GIT_CONFIG_*), after whatever the caller configured:
    a value here never shows on a command line."""
    count = int(os.environ.get("GIT_CONFIG_COUNT", "0") or 0)  # keep whatever the caller configured
    env = {"GIT_CONFIG_COUNT": str(count + len(pairs))}
    for i, (key, value) in enumerate(pairs, start=count):
        env[f"GIT_CONFIG_KEY_{i}"], env[f"GIT_CONFIG_VALUE_{i}"] = key, value
    return env


@dataclass(frozen=True)
class Remote:
    """A remote URL split for git: what goes on the command line and what goes in the environment."""

    url: str  # without a password (and, for http(s), without any userinfo)
    env: dict[str, str]
    secrets: tuple[str, ...] = field(default=(), repr=False)  # values to mask out of anything git prints

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
        env = git_config_env([("credential.helper", ""), ("credential.helper", _HELPER)])
        env.update({_USER_VAR: user, PASSWORD_VAR: password})
        return cls(url, env, (password,) if password else ())

    @property
    def login_user(self) -> str:
        """The user name the URL gave for http(s) ("" when none)."""
        return self.env.get(_USER_VAR, "")
