"""A GitSync's spec.chartCredentials: chart repository and OCI registry credentials, read from Secrets at every pass.

Each entry maps a repository URL prefix (`https://charts.example/team`, `oci://registry.example/charts`) to a
Secret of the GitSync's own namespace holding `username` and `password` (basic auth; an OCI registry's token flow
trades them for a bearer token) and/or `ca.crt` (the CA bundle that repository's TLS certificate must verify
against). `ChartSecrets` is what `SourceOptions.chart_credentials` calls once per pass (engine/loading.py): every
Secret is read with the source's own client, so a GitSync with `serviceAccountName` reads it AS that
ServiceAccount (the API server decides; a tenant never borrows a Secret its account may not read), and a rotated
Secret is used by the next pass. Nothing is cached or written; the values reach render/charts.RepositoryAccess
(password and CA never in a repr) for one pass. An entry never allows a repository: the controller's
--allow-chart-repository alone decides which ones a GitSync may fetch from. A Secret that cannot be used raises
CredentialsUnavailable naming it and why (the GitSync's Ready=False reason), never a value.
"""

from __future__ import annotations

from gitops_sync.cluster.client import Client
from gitops_sync.daemon.fleet.credentials import decoded, read_secret
from gitops_sync.errors import CredentialsUnavailable
from gitops_sync.render.charts import RepositoryAccess

# Flux's keys (HelmRepository secretRef and certSecretRef; OCIRepository's basic-auth Secret).
KEYS = ("username", "password", "ca.crt")


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
            values = read[name]
            if not any(values.get(k) for k in KEYS):
                raise CredentialsUnavailable(f"{where} holds none of the keys {', '.join(KEYS)}")
            if bool(values.get("username")) != bool(values.get("password")):
                raise CredentialsUnavailable(f"{where} has one of username and password without the other")
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


__all__ = ["KEYS", "ChartSecrets"]
