"""HTTP requests of one chart resolution (index.yaml; an OCI registry's tags and manifest) and the `helm pull`
after it, with the operator's credentials and trust (charts.RepositoryAccess).

Credentials go in an `Authorization` header that is never forwarded on a redirect, in helm's private config
files (mode 0600, in a 0700 directory chart_pull.py removes), never in argv; every error names the chart and
the repository and is scrubbed of the password before it leaves.
"""

from __future__ import annotations

import base64
import json
import os
import re
import ssl
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from gitops_sync.errors import ChartRepositoryNotAllowed, RenderError
from gitops_sync.render import _semver, _tools
from gitops_sync.render._yaml import NodeBudget, load_yaml
from gitops_sync.render.charts import CREDENTIALS_ENV, ChartLimits, ChartSpec, RepositoryAccess

_HELM_CHART_MEDIA = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
_OCI_MANIFEST_MEDIA = "application/vnd.oci.image.manifest.v1+json"
# An `auths` entry of no host (.invalid is reserved): a registry config that has one is "configured", so helm's
# credential store never goes looking for a native docker-credential helper of the controller's user.
_NO_HOST: dict[str, Any] = {"gitops-sync.invalid": {}}


class Client:
    """HTTP requests of one resolution (index, tags, manifest) and the `helm pull` after it."""

    def __init__(self, spec: ChartSpec, access: RepositoryAccess, label: str, limits: ChartLimits) -> None:
        self.spec = spec
        self.access = access
        self.label = label
        self.limits = limits
        self.oci = spec.repo.startswith("oci://")
        scheme = urllib.parse.urlsplit(spec.repo).scheme
        if scheme == "http" and not access.allow_http:
            raise self.error(
                f"plain http:// is refused; allow it for this repository with `allowHTTP: true` in the "
                f"credentials file (${CREDENTIALS_ENV})"
            )
        if not access.allowed:
            raise ChartRepositoryNotAllowed(
                f"chart {spec.chart} from {spec.repo}: chart repository not allowed: the operator allows "
                f"repositories with --allow-chart-repository PREFIX (or an entry in ${CREDENTIALS_ENV}); "
                "nothing was fetched",
                file=label,
            )
        self.ctx = ssl.create_default_context(
            cafile=str(access.ca_file) if access.ca_file else None, cadata=access.ca_data or None
        )
        if access.insecure_skip_tls_verify:
            self.ctx.check_hostname = False
            self.ctx.verify_mode = ssl.CERT_NONE
        self.bearer: str | None = None

    def error(self, problem: str) -> RenderError:
        return RenderError(f"chart {self.spec.chart} from {self.spec.repo}: {problem}", file=self.label)

    # -- HTTP

    def _basic(self) -> str | None:
        a = self.access
        if a.username is None and a.password is None:
            return None
        return "Basic " + base64.b64encode(f"{a.username or ''}:{a.password or ''}".encode()).decode()

    def get(self, url: str, accept: str = "*/*", limit: int | None = None) -> tuple[bytes, dict[str, str]]:
        """GET with the repository's credentials (never forwarded on a redirect) and a bounded body."""
        limit = limit or self.limits.max_index_bytes
        auth = f"Bearer {self.bearer}" if self.bearer else self._basic()
        try:
            return self._get(url, accept, auth, limit)
        except urllib.error.HTTPError as err:
            challenge = err.headers.get("WWW-Authenticate", "") if err.headers else ""
            if err.code == 401 and self.oci and challenge.lower().startswith("bearer") and self.bearer is None:
                self.bearer = self._token(challenge)
                return self.get(url, accept, limit)
            raise self._http_error(err.code) from None
        except (urllib.error.URLError, OSError) as err:
            reason = getattr(err, "reason", None) or err
            if isinstance(reason, ssl.SSLCertVerificationError):
                where = (
                    f"`ca.crt` in {self.access.origin}"
                    if self.access.origin
                    else f"`caFile` in the credentials file (${CREDENTIALS_ENV}), or `insecureSkipTLSVerify: true`; "
                    "a GitSync: `ca.crt` in a Secret of spec.chartCredentials"
                )
                raise self.error(
                    f"TLS verification failed ({reason.verify_message}): give this repository's CA bundle as {where}"
                ) from None
            raise self.error(f"cannot reach the repository ({_reason(reason)})") from None

    def _get(self, url: str, accept: str, auth: str | None, limit: int) -> tuple[bytes, dict[str, str]]:
        request = urllib.request.Request(url, headers={"Accept": accept, "User-Agent": "gitops-sync"})
        if auth:
            request.add_unredirected_header("Authorization", auth)
        opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=self.ctx))
        with opener.open(request, timeout=self.limits.request_timeout) as resp:
            body = resp.read(limit + 1)
            if len(body) > limit:
                raise self.error(f"{urllib.parse.urlsplit(url).path} is larger than the {limit}-byte limit")
            return body, {k.lower(): v for k, v in resp.headers.items()}

    def _http_error(self, code: int) -> RenderError:
        configured = self._basic() is not None
        if code in (401, 403) and not configured:
            return self.error(
                f"the repository requires credentials (HTTP {code}) and none are configured for it: add an entry "
                f"with its URL to the chart credentials file (${CREDENTIALS_ENV}; a GitSync: spec.chartCredentials)"
            )
        if code in (401, 403):
            origin = f" of {self.access.origin}" if self.access.origin else ""
            return self.error(f"the repository refused the configured credentials{origin} (HTTP {code})")
        if code == 404:
            return self.error("not found in the repository (HTTP 404)")
        return self.error(f"the repository answered HTTP {code}")

    def _token(self, challenge: str) -> str:
        """The registry token flow (Docker/OCI distribution): trade our basic credentials for a bearer token."""
        params = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
        realm = params.pop("realm", "")
        if not realm.startswith(("https://", "http://") if self.access.allow_http else "https://"):
            raise self.error("the registry's token realm is not an https:// URL (allowHTTP permits http://)")
        url = realm + "?" + urllib.parse.urlencode(params)
        try:
            body, _ = self._get(url, "application/json", self._basic(), 1 << 20)
        except urllib.error.HTTPError as err:
            raise self._http_error(err.code) from None
        doc = _json(body)
        token = doc.get("token") or doc.get("access_token") if isinstance(doc, dict) else None
        if not isinstance(token, str):
            raise self.error("the registry's token endpoint returned no token")
        return token

    # -- chart repository (index.yaml)

    def resolve_index(self) -> tuple[str, str, int | None]:
        body, _ = self.get(self.spec.repo + "/index.yaml")
        self.index = body
        budget = NodeBudget(per_file=20_000_000, per_render=20_000_000)
        try:
            docs = load_yaml(body, "index.yaml", budget)
        except RenderError as err:
            raise self.error(f"its index.yaml cannot be read ({err})") from None
        doc = docs[0][1] if docs else None
        entries = doc.get("entries") if isinstance(doc, dict) else None
        versions = entries.get(self.spec.chart) if isinstance(entries, dict) else None
        if not isinstance(versions, list) or not versions:
            raise self.error("the repository's index.yaml has no such chart")
        by_version = {str(v.get("version")): v for v in versions if isinstance(v, dict) and v.get("version")}
        version = self._pick(list(by_version))
        digest = by_version[version].get("digest")
        if not isinstance(digest, str) or not re.fullmatch(r"(sha256:)?[0-9a-f]{64}", digest):
            raise self.error(f"the index gives no sha256 digest for {version}: cannot pin it")
        return version, digest if digest.startswith("sha256:") else "sha256:" + digest, None

    def _pick(self, candidates: list[str]) -> str:
        spec = self.spec.version
        if _semver.is_exact(spec):
            wanted = _semver.Version.parse(spec)
            found = [c for c in candidates if _semver.Version.parse(c) == wanted]
            if not found:
                raise self.error(f"version {spec} is not in the repository")
            return found[0]
        best = _semver.Range.parse(spec).best(candidates)
        if best is None:
            raise self.error(f"no version matches {spec!r} (the repository has {len(candidates)} versions)")
        return best

    # -- OCI registry (tags, manifest)

    def _oci_parts(self) -> tuple[str, str]:
        parsed = urllib.parse.urlsplit(self.spec.repo)
        host = parsed.netloc
        name = (parsed.path.strip("/") + "/" + self.spec.chart).strip("/")
        return host, name

    def _oci_base(self) -> str:
        host, name = self._oci_parts()
        return f"{'http' if self.access.allow_http else 'https'}://{host}/v2/{name}"

    def resolve_oci(self) -> tuple[str, str, int | None]:
        if _semver.is_exact(self.spec.version):
            version = self.spec.version
        else:
            tags = self._tags()
            version = self._pick([t.replace("_", "+") for t in tags])
        body, _ = self.get(f"{self._oci_base()}/manifests/{version.replace('+', '_')}", _OCI_MANIFEST_MEDIA, 4 << 20)
        manifest = _json(body)
        layers = manifest.get("layers") if isinstance(manifest, dict) else None
        chart = [la for la in layers or [] if isinstance(la, dict) and la.get("mediaType") == _HELM_CHART_MEDIA]
        if len(chart) != 1 or not isinstance(chart[0].get("digest"), str):
            raise self.error(f"{version} is not a Helm chart in the registry (no chart layer in its manifest)")
        digest = chart[0]["digest"]
        if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
            raise self.error(f"the chart layer of {version} has no sha256 digest")
        size = chart[0].get("size")
        return version, digest, size if isinstance(size, int) else None

    def _tags(self) -> list[str]:
        tags: list[str] = []
        url: str | None = f"{self._oci_base()}/tags/list?n=1000"
        pages = 0
        while url and pages < 100:
            body, headers = self.get(url, "application/json", 16 << 20)
            doc = _json(body)
            tags += [t for t in (doc.get("tags") or []) if isinstance(t, str)] if isinstance(doc, dict) else []
            link = re.match(r"<([^>]+)>", headers.get("link", ""))
            url = urllib.parse.urljoin(url, link.group(1)) if link else None
            pages += 1
        return tags

    # -- helm pull

    def helm_pull(self, version: str, work: Path, helm: str, limits: ChartLimits) -> Path:
        """`helm pull` of exactly `version` into `work/out`, credentials in config files under `work`."""
        out = work / "out"
        out.mkdir()
        ca_file = self.access.ca_file
        if self.access.ca_data:  # a tenant's Secret `ca.crt`: helm wants a file
            ca_file = work / "ca.crt"
            _write_private(ca_file, self.access.ca_data)
        args = ["pull", *(self._oci_args(work, version) if self.oci else self._repo_args(work, version, ca_file))]
        if ca_file is not None:
            args += ["--ca-file", str(ca_file)]
        if self.access.insecure_skip_tls_verify:
            args.append("--insecure-skip-tls-verify")
        args += ["--destination", str(out)]
        try:
            _tools.helm(helm, args, self.label, _tools.Limits(limits.pull_timeout, 1 << 20), _pull_env(work))
        except RenderError as err:
            message = str(err).split(": ", 1)[-1]
            for secret in (self.access.password, self._basic()):
                if secret:
                    message = message.replace(secret, "***")
            raise self.error(message) from None
        found = sorted(out.glob("*.tgz"))
        if len(found) != 1:
            raise self.error("`helm pull` wrote no single chart archive")
        return found[0]

    def _oci_args(self, work: Path, version: str) -> list[str]:
        host, name = self._oci_parts()
        config = work / "registry.json"
        auths: dict[str, Any] = dict(_NO_HOST)
        basic = self._basic()
        if basic is not None:
            auths[host] = {"auth": basic[len("Basic ") :]}
        _write_private(config, json.dumps({"auths": auths}))
        args = [f"oci://{host}/{name}", "--version", version, "--registry-config", str(config)]
        return [*args, "--plain-http"] if self.access.allow_http else args

    def _repo_args(self, work: Path, version: str, ca_file: Path | None) -> list[str]:
        repos = work / "repositories.yaml"
        cache = work / "repository-cache"
        cache.mkdir()
        entry: dict[str, Any] = {"name": "source", "url": self.spec.repo}
        if self.access.username is not None:
            entry["username"] = self.access.username
        if self.access.password is not None:
            entry["password"] = self.access.password
        if ca_file is not None:
            entry["caFile"] = str(ca_file)
        if self.access.insecure_skip_tls_verify:
            entry["insecure_skip_tls_verify"] = True
        _write_private(repos, json.dumps({"apiVersion": "", "repositories": [entry]}))
        (cache / "source-index.yaml").write_bytes(self.index)  # the index we resolved against, not a refetch
        args = [f"source/{self.spec.chart}", "--version", version]
        return [*args, "--repository-config", str(repos), "--repository-cache", str(cache)]


def _pull_env(work: Path) -> dict[str, str]:
    """helm's environment for a pull: private homes under `work`, none of the caller's HELM_* settings.
    helm's registry client falls back to Docker's config, and, with no `auths` entry, to the platform's
    docker-credential helper: a private config whose one entry names no host, so no login of the controller's
    user reaches a pull (a tenant's above all)."""
    (work / "docker").mkdir()
    _write_private(work / "docker" / "config.json", json.dumps({"auths": dict(_NO_HOST)}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("HELM_")}
    env.update(
        HELM_CONFIG_HOME=str(work / "config"),
        HELM_CACHE_HOME=str(work / "cache"),
        HELM_DATA_HOME=str(work / "data"),
        DOCKER_CONFIG=str(work / "docker"),
    )
    return env


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def _json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return None


def _reason(reason: object) -> str:
    text = str(reason)
    return text[:200] if text else type(reason).__name__
