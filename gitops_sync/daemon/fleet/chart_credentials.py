"""A GitSync's spec.chartCredentials: chart repository and OCI registry credentials, read from Secrets at every pass.

Each entry maps a repository URL prefix (`https://charts.example/team`, `oci://registry.example/charts`) to a
Secret of the GitSync's own namespace holding `username` and `password` (basic auth; an OCI registry's token flow
trades them for a bearer token), or `.dockerconfigjson` (a `kubernetes.io/dockerconfigjson` Secret, the one image
pulls use: the login of the entry whose registry host, port included, is the URL's host), and/or `ca.crt` (the CA
bundle that repository's TLS certificate must verify against). `ChartSecrets` is what
`SourceOptions.chart_credentials` calls once per pass (engine/loading.py): every Secret is read with the source's
own client, so a GitSync with `serviceAccountName` reads it AS that ServiceAccount (the API server decides; a
tenant never borrows a Secret its account may not read), and a rotated Secret is used by the next pass. Nothing
is cached or written; the values reach render/charts.RepositoryAccess (password and CA never in a repr) for one
pass. An entry never allows a repository: the controller's --allow-chart-repository alone decides which ones a
GitSync may fetch from. A Secret that cannot be used raises CredentialsUnavailable naming it and why (the
GitSync's Ready=False reason), never a value.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any
from urllib.parse import urlsplit

from gitops_sync.cluster.client import Client
from gitops_sync.daemon.fleet.credentials import decoded, read_secret
from gitops_sync.errors import CredentialsUnavailable
from gitops_sync.render.charts import RepositoryAccess

# Flux's keys (HelmRepository secretRef and certSecretRef; OCIRepository's basic-auth Secret), and the key of a
# Secret of type kubernetes.io/dockerconfigjson (OCIRepository's and image pulls').
DOCKER_CONFIG = ".dockerconfigjson"
KEYS = ("username", "password", "ca.crt", DOCKER_CONFIG)


class ChartSecrets:
    """`()` -> one RepositoryAccess per (url, Secret) entry, each Secret of `namespace` read as `user`."""

    def __init__(
        self,
        client: Client,
        namespace: str,
        entries: tuple[tuple[str, str], ...],
        user: str,
        *,
        timeout: float = 10.0,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.entries = entries
        self.user = user
        self.timeout = timeout

    def __call__(self) -> tuple[RepositoryAccess, ...]:
        read: dict[str, dict[str, str]] = {}  # a Secret named by several entries is read once per pass
        out = []
        for index, (url, name) in enumerate(self.entries):
            where = f"Secret {self.namespace}/{name} (spec.chartCredentials[{index}])"
            if name not in read:
                data = read_secret(self.client, self.namespace, name, self.user, where, self.timeout)
                read[name] = decoded(data, where, KEYS)
            values = usable(read[name], url, where)
            out.append(
                RepositoryAccess(
                    url=url,
                    username=values.get("username") or None,
                    password=values.get("password") or None,
                    ca_data=values.get("ca.crt") or None,
                    origin=f"Secret {self.namespace}/{name}",
                    allows=False,
                )
            )
        return tuple(out)


def usable(values: dict[str, str], url: str, where: str) -> dict[str, str]:
    """A Secret's values for the entry of `url`: a `.dockerconfigjson`'s login for `url`'s host becomes
    `username`/`password`; a Secret that cannot be used raises CredentialsUnavailable naming `where`."""
    if not any(values.get(k) for k in KEYS):
        raise CredentialsUnavailable(f"{where} holds none of the keys {', '.join(KEYS)}")
    if values.get(DOCKER_CONFIG):
        if values.get("username") or values.get("password"):
            raise CredentialsUnavailable(f"{where} holds both {DOCKER_CONFIG} and username/password")
        user, password = docker_login(values[DOCKER_CONFIG], url, where)
        values = {**values, "username": user, "password": password}
    if bool(values.get("username")) != bool(values.get("password")):
        raise CredentialsUnavailable(f"{where} has one of username and password without the other")
    return values


def registry_host(key: str) -> str:
    """The `host[:port]` a docker config's `auths` key or a chart URL names (`https://r.example/v1/`,
    `r.example:5000`, `oci://r.example/charts` -> `r.example`, `r.example:5000`), lower-cased."""
    text = key.strip()
    netloc = urlsplit(text).netloc if "://" in text else text.split("/", 1)[0]
    return netloc.rpartition("@")[2].lower()


def docker_login(text: str, url: str, where: str) -> tuple[str, str]:
    """(username, password) of the `.dockerconfigjson` entry whose registry host is `url`'s: its `username` and
    `password`, else its `auth` (base64 `username:password`). Refusals name the Secret and the hosts, never a
    value."""
    try:
        auths = json.loads(text).get("auths")
    except (ValueError, AttributeError):
        raise CredentialsUnavailable(f"{where}: {DOCKER_CONFIG} is not a JSON object with `auths`") from None
    if not isinstance(auths, dict):
        raise CredentialsUnavailable(f"{where}: {DOCKER_CONFIG} is not a JSON object with `auths`")
    host = registry_host(url)
    found = [entry for key, entry in auths.items() if registry_host(str(key)) == host]
    if not found:
        known = ", ".join(sorted({registry_host(str(k)) for k in auths})) or "none"
        raise CredentialsUnavailable(f"{where}: {DOCKER_CONFIG} has no entry for {host} (it has: {known})")
    login = _login(found[0])
    if login is None:
        raise CredentialsUnavailable(f"{where}: the {DOCKER_CONFIG} entry for {host} holds no username and password")
    return login


def _login(entry: Any) -> tuple[str, str] | None:
    if not isinstance(entry, dict):
        return None
    user, password = entry.get("username"), entry.get("password")
    if isinstance(user, str) and isinstance(password, str) and user and password:
        return user, password
    try:
        pair = base64.b64decode(str(entry.get("auth") or ""), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, sep, password = pair.partition(":")
    return (user, password) if sep and user and password else None


__all__ = ["KEYS", "ChartSecrets", "docker_login", "registry_host"]
