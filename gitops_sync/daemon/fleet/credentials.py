"""A GitSync's spec.secretRef: its Git credentials, read from the API server at every fetch.

`SecretCredentials` is what `SourceOptions.credentials` calls (engine/loading.py) before each fetch: it GETs
the Secret with the source's own client, so a GitSync with `serviceAccountName` reads it AS that
ServiceAccount (Impersonate-User: the API server decides, a tenant never borrows a Secret its account may
not read), and a rotated Secret is used by the next fetch without a restart. Nothing is cached or written:
the values go to source/credentials.py for one fetch. A Secret that cannot be used raises
CredentialsUnavailable naming the Secret and why (the GitSync's Ready=False reason), never a value.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from gitops_sync.cluster.client import Client
from gitops_sync.errors import ClusterError, CredentialsUnavailable, ForbiddenError, NotFoundError
from gitops_sync.source.credentials import GitCredentials

# The keys Flux's GitRepository reads from its secretRef (and only those are looked at).
KEYS = ("username", "password", "bearerToken", "identity", "known_hosts", "ca.crt")


class SecretCredentials:
    """`()` -> the GitCredentials in Secret `namespace/name`, read as `user` ("" = the controller itself)."""

    def __init__(self, client: Client, namespace: str, name: str, user: str, *, timeout: float = 10.0) -> None:
        self.client = client
        self.namespace = namespace
        self.name = name
        self.user = user
        self.timeout = timeout

    @property
    def where(self) -> str:
        return f"Secret {self.namespace}/{self.name} (spec.secretRef)"

    def __call__(self) -> GitCredentials:
        data = read_secret(self.client, self.namespace, self.name, self.user, self.where, self.timeout)
        values = decoded(data, self.where, KEYS)
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
        )
        try:
            creds.check()
        except Exception as exc:  # a key missing: the Secret's fault, said with its name
            raise CredentialsUnavailable(str(exc)) from None
        return creds


def read_secret(client: Client, namespace: str, name: str, user: str, where: str, timeout: float) -> dict[str, Any]:
    """The `data` of Secret namespace/name, read with `client` (as `user`, "" = the controller); a Secret that
    cannot be read raises CredentialsUnavailable naming `where` and why."""
    try:
        doc = client.request("GET", f"/api/v1/namespaces/{namespace}/secrets/{name}", timeout=timeout)
    except NotFoundError:
        raise CredentialsUnavailable(f"{where} not found") from None
    except ForbiddenError:
        who = user.removeprefix("system:serviceaccount:").replace(":", "/", 1)
        who = f"ServiceAccount {who}" if user else "the controller"
        raise CredentialsUnavailable(f"{where}: {who} may not get it (403 Forbidden)") from None
    except ClusterError as exc:
        raise CredentialsUnavailable(f"cannot read {where}: {exc}") from None
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


__all__ = ["KEYS", "SecretCredentials", "decoded", "read_secret"]
