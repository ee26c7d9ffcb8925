"""A GitSync's spec.secretRef (its Git credentials) and spec.verify.secretRef (the keys it trusts), read from
the API server at every fetch.

`SecretCredentials` is what `SourceOptions.credentials` calls (engine/loading.py) before each fetch: it GETs
the Secret with the source's own client, so a GitSync with `serviceAccountName` reads it AS that
ServiceAccount (Impersonate-User: the API server decides, a tenant never borrows a Secret its account may
not read), and a rotated Secret is used by the next fetch without a restart. Nothing is cached or written:
the values go to source/credentials.py for one fetch (`SigningKeys`: to source/verify.py for one check;
keys.py: spec.decryption's SOPS keys, to render/sops.py for one render). A
Secret that cannot be used raises
CredentialsUnavailable naming the Secret and why (the GitSync's Ready=False reason), never a value.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from gitops_sync.cluster.client import Client
from gitops_sync.errors import ClusterError, CredentialsUnavailable, ForbiddenError, NotFoundError
from gitops_sync.source.credentials import GitCredentials
from gitops_sync.source.verify import TrustedKeys, from_secret

# The keys Flux's GitRepository reads from its secretRef (and only those are looked at).
KEYS = ("username", "password", "bearerToken", "identity", "known_hosts", "ca.crt")


class SecretReader:
    """GETs Secret `namespace/name` as `user` ("" = the controller itself) at every use; `field` names the spec
    field that points at it in every message; `data` raises `error` naming the Secret and why, never a value
    (keys.py reads spec.decryption's with DecryptionFailed)."""

    field = "spec.secretRef"

    def __init__(self, client: Client, namespace: str, name: str, user: str, *, timeout: float = 10.0) -> None:
        self.client = client
        self.namespace = namespace
        self.name = name
        self.user = user
        self.timeout = timeout
        self.scope = cache_scope(namespace, user, name)

    @property
    def where(self) -> str:
        return f"Secret {self.namespace}/{self.name} ({self.field})"

    def data(self, error: type[Exception] = CredentialsUnavailable) -> dict[str, Any]:
        """The Secret's `data` (base64 values), or `error` naming it and why."""
        return read_secret(self.client, self.namespace, self.name, self.user, self.where, self.timeout, error)


class SecretCredentials(SecretReader):
    """`()` -> the GitCredentials in the Secret of spec.secretRef."""

    def __call__(self) -> GitCredentials:
        values = decoded(self.data(), self.where, KEYS)
        if not any(values.get(k) for k in KEYS[:5]):
            raise CredentialsUnavailable(f"{self.where} holds none of the keys {', '.join(KEYS[:5])}")
        creds = GitCredentials(
            origin=self.where,
            username=values.get("username", ""),
            password=values.get("password", ""),
            bearer_token=values.get("bearerToken", ""),
            identity=values.get("identity", ""),
            known_hosts=values.get("known_hosts", ""),
            ca_cert=values.get("ca.crt", ""),
            isolated=True,
            cache_scope=self.scope,
        )
        try:
            creds.check()
        except Exception as exc:  # a key missing: the Secret's fault, said with its name
            raise CredentialsUnavailable(str(exc)) from None
        return creds


class SigningKeys(SecretReader):
    """`()` -> the TrustedKeys of spec.verify's Secret: its `*.asc` (armored OpenPGP public keys) and
    `allowed_signers` (SSH); `commits`/`tags`: what spec.verify.mode wants signed."""

    field = "spec.verify.secretRef"

    def __init__(self, *args: Any, commits: bool, tags: bool, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commits, self.tags = commits, tags

    def __call__(self) -> TrustedKeys:
        data: dict[str, bytes] = {}
        for key, raw in self.data().items():
            try:
                data[str(key)] = base64.b64decode(str(raw), validate=True)
            except binascii.Error:
                raise CredentialsUnavailable(f"{self.where}: key {key} is not base64") from None
        keys = from_secret(data, commits=self.commits, tags=self.tags)
        if not keys:
            raise CredentialsUnavailable(
                f"{self.where} holds no trusted key: give *.asc (OpenPGP public keys) and/or allowed_signers (SSH)"
            )
        return keys


def cache_scope(namespace: str, user: str, secret: str) -> str:
    """Whose clone cache a GitSync's fetch uses: one per (namespace, ServiceAccount, Secret), so a tenant never
    reads a clone fetched with the controller's or another tenant's credentials (names only)."""
    return f"{namespace}|{user}|{secret}"


def tenant_without_secret(namespace: str, user: str) -> GitCredentials:
    """A tenant GitSync without spec.secretRef: no credentials at all, fetched hermetically (never with the
    controller's ssh keys, agent, credential helpers, ~/.netrc or global git configuration)."""
    return GitCredentials(isolated=True, cache_scope=cache_scope(namespace, user, ""))


def read_secret(
    client: Client,
    namespace: str,
    name: str,
    user: str,
    where: str,
    timeout: float,
    error: type[Exception] = CredentialsUnavailable,
) -> dict[str, Any]:
    """The `data` of Secret namespace/name, read with `client` (as `user`, "" = the controller); a Secret that
    cannot be read raises `error` naming `where` and why, never a value."""
    try:
        doc = client.request("GET", f"/api/v1/namespaces/{namespace}/secrets/{name}", timeout=timeout)
    except NotFoundError:
        raise error(f"{where} not found") from None
    except ForbiddenError:
        who = user.removeprefix("system:serviceaccount:").replace(":", "/", 1)
        who = f"ServiceAccount {who}" if user else "the controller"
        raise error(f"{where}: {who} may not get it (403 Forbidden)") from None
    except ClusterError as exc:
        raise error(f"cannot read {where}: {exc}") from None
    data = (doc if isinstance(doc, dict) else {}).get("data")
    return data if isinstance(data, dict) else {}


def decoded(data: dict[str, Any], where: str, keys: tuple[str, ...]) -> dict[str, str]:
    """The Secret's values of `keys` as text (stripped: a stray newline from `echo` breaks a password)."""
    out: dict[str, str] = {}
    for key in keys:
        raw = data.get(key)
        if not raw:
            continue
        try:
            text = base64.b64decode(str(raw), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            raise CredentialsUnavailable(f"{where}: key {key} is not UTF-8 text") from None
        out[key] = text if key in ("identity", "known_hosts", "ca.crt") else text.strip()
    return out


__all__ = [
    "KEYS",
    "SecretCredentials",
    "SecretReader",
    "SigningKeys",
    "cache_scope",
    "decoded",
    "read_secret",
    "tenant_without_secret",
]
