"""Charts from Helm repositories and OCI registries, declared in Git by a `helm-chart.yaml` file.

A directory holding `helm-chart.yaml` (Kluctl's file name and shape, see docs/charts.md) names a repository
(`https://` chart repository or `oci://` registry), a chart, a version or semver range, a release name and
namespace, values files beside it and inline values. Per pass: the range is resolved against the repository's
index (or the registry's tags) to one version, whose archive digest the index or manifest announces; an
archive already in the cache under that digest is used as is, else `helm pull` fetches it (credentials in
private config files, never in argv). The archive is checked (size, file count, unpacked size, no `..`,
absolute paths, links or devices) and unpacked by us before helm ever reads it, then rendered with
`helm template` (_tools.py). The walker (_render.py) turns the output into objects whose origin names chart,
version and digest, which reach every report.

Credentials and trust are the operator's, never the repository's: a file (path in $GITOPS_SYNC_CHART_CREDENTIALS
or RenderOptions.chart_credentials) lists repositories by URL prefix with user, password (inline, from a file
or an environment variable), CA bundle and the two explicit opt-outs (`allowHTTP`, `insecureSkipTLSVerify`).
No password appears in argv, logs, errors, the render cache key or the objects' origins.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import re
import shutil
import ssl
import tarfile
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gitops_sync.errors import RenderError
from gitops_sync.log import get_logger
from gitops_sync.render import _semver, _tools
from gitops_sync.render._yaml import NodeBudget, load_config, load_yaml

log = get_logger(__name__)

CHART_SOURCE_FILE = "helm-chart.yaml"
DEFAULT_VALUES_FILE = "helm-values.yaml"  # used when `valuesFiles` is not given and it exists (Kluctl's rule)
CREDENTIALS_ENV = "GITOPS_SYNC_CHART_CREDENTIALS"
_HELM_CHART_MEDIA = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
_OCI_MANIFEST_MEDIA = "application/vnd.oci.image.manifest.v1+json"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")
_RELEASE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,51}[a-z0-9])?$")
_SPEC_KEYS = {"repo", "chartName", "chartVersion", "releaseName", "namespace", "valuesFiles", "values"}


@dataclass(frozen=True)
class ChartLimits:
    """Bounds on what a repository sends, checked before helm reads any of it."""

    max_archive_bytes: int = 20 * 1024 * 1024
    max_files: int = 5_000
    max_unpacked_bytes: int = 100 * 1024 * 1024  # Helm's own limit for a loaded chart
    max_index_bytes: int = 64 * 1024 * 1024  # index.yaml of a large public repository is tens of MB
    request_timeout: float = 30.0  # one index, tags or manifest request
    pull_timeout: float = 120.0  # one `helm pull`


@dataclass(frozen=True)
class ChartSpec:
    """What `helm-chart.yaml` declares (validated)."""

    repo: str
    chart: str
    version: str
    release: str
    namespace: str | None
    values_files: tuple[str, ...]
    values: dict[str, Any]


@dataclass(frozen=True)
class RepositoryAccess:
    """The operator's settings for repositories whose URL starts with `url`."""

    url: str
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ca_file: Path | None = None
    insecure_skip_tls_verify: bool = False
    allow_http: bool = False

    def matches(self, repo: str) -> bool:
        prefix = self.url.rstrip("/")
        return repo.rstrip("/") == prefix or repo.startswith(prefix + "/")


@dataclass(frozen=True)
class PulledChart:
    """A resolved, verified and unpacked chart: where it is and what it is (for reports)."""

    directory: Path
    repo: str
    chart: str
    version: str
    digest: str  # sha256:<hex> of the chart archive (index.yaml's digest, the OCI chart layer's digest)

    def describe(self) -> str:
        return f"chart {self.chart} {self.version} from {self.repo}, {self.digest[:19]}"

    def report(self) -> dict[str, str]:
        return {"repository": self.repo, "chart": self.chart, "version": self.version, "digest": self.digest}


def load_spec(path: Path, rel: str) -> ChartSpec:
    """Read and validate a `helm-chart.yaml`; errors name the file and the field, never a value."""
    doc = load_config(path, rel, CHART_SOURCE_FILE) or {}
    unknown = sorted(set(doc) - {"helmChart"})
    body = doc.get("helmChart")
    if unknown or not isinstance(body, dict):
        raise RenderError(
            "expected one mapping `helmChart:` (repo, chartName, chartVersion, releaseName, namespace, "
            "valuesFiles, values)" + (f"; unknown top-level keys: {', '.join(map(str, unknown))}" if unknown else ""),
            file=rel,
        )
    extra = sorted(str(k) for k in set(body) - _SPEC_KEYS)
    if extra:
        raise RenderError(f"unknown field(s) helmChart.{', helmChart.'.join(extra)}", file=rel)
    problems = []
    for key in ("repo", "chartName", "chartVersion"):
        if not isinstance(body.get(key), str) or not body[key].strip():
            hint = ' (quote a version such as "1.0" so YAML reads it as text)' if key == "chartVersion" else ""
            problems.append(f"helmChart.{key} must be a non-empty string{hint}")
    if problems:
        raise RenderError("; ".join(problems), file=rel)
    repo, chart, version = body["repo"].strip(), body["chartName"].strip(), body["chartVersion"].strip()
    parsed = urllib.parse.urlsplit(repo)
    if parsed.scheme not in ("https", "http", "oci") or not parsed.hostname:
        raise RenderError(
            "helmChart.repo must be an https:// (or http://) chart repository or an oci:// registry", file=rel
        )
    if parsed.username or parsed.password:
        raise RenderError(
            f"helmChart.repo must not carry credentials: give them in the credentials file (${CREDENTIALS_ENV})",
            file=rel,
        )
    if parsed.query or parsed.fragment:
        raise RenderError("helmChart.repo must not have a query or fragment", file=rel)
    if not _NAME.match(chart):
        raise RenderError("helmChart.chartName must be a chart name (letters, digits, `.`, `_`, `-`)", file=rel)
    try:
        _semver.Range.parse(version)
    except _semver.RangeError as err:
        raise RenderError(f"helmChart.chartVersion: {err}", file=rel) from None
    release = body.get("releaseName", chart)
    if not isinstance(release, str) or not _RELEASE.match(release):
        raise RenderError("helmChart.releaseName must be a DNS label of at most 53 characters", file=rel)
    namespace = body.get("namespace")
    if namespace is not None and (not isinstance(namespace, str) or not _RELEASE.match(namespace)):
        raise RenderError("helmChart.namespace must be a namespace name", file=rel)
    files = body.get("valuesFiles")
    if files is None:
        files = [DEFAULT_VALUES_FILE] if (path.parent / DEFAULT_VALUES_FILE).is_file() else []
    if not isinstance(files, list) or not all(isinstance(f, str) and f for f in files):
        raise RenderError("helmChart.valuesFiles must be a list of paths", file=rel)
    values = body.get("values") or {}
    if not isinstance(values, dict):
        raise RenderError("helmChart.values must be a mapping", file=rel)
    return ChartSpec(repo.rstrip("/"), chart, version, release, namespace, tuple(files), values)


def load_access(path: Path | None, *, env: bool = True) -> list[RepositoryAccess]:
    """The operator's credentials file (YAML or JSON, `repositories:` list): `path`, else (when `env`) the one
    $GITOPS_SYNC_CHART_CREDENTIALS names, else none. Its errors name the file and the entry, never a value."""
    if path is None and env:
        named = os.environ.get(CREDENTIALS_ENV)
        path = Path(named) if named else None
    if path is None:
        return []
    where = f"chart credentials file {path}"
    if not path.is_file():
        raise RenderError(f"{where} does not exist")
    doc = load_config(path, str(path), "the chart credentials file") or {}
    entries = doc.get("repositories")
    if not isinstance(entries, list):
        raise RenderError(f"{where}: expected `repositories:` with a list of entries")
    out = []
    for index, entry in enumerate(entries):
        at = f"{where}, repositories[{index}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("url"), str):
            raise RenderError(f"{at}: each entry needs a `url`")
        password = entry.get("password")
        if entry.get("passwordFile"):
            try:
                password = Path(str(entry["passwordFile"])).expanduser().read_text().rstrip("\r\n")
            except OSError as err:
                raise RenderError(f"{at}: cannot read passwordFile: {err.strerror}") from None
        elif entry.get("passwordEnv"):
            password = os.environ.get(str(entry["passwordEnv"]))
            if password is None:
                raise RenderError(f"{at}: environment variable {entry['passwordEnv']} is not set")
        ca = entry.get("caFile")
        if ca is not None and not Path(str(ca)).expanduser().is_file():
            raise RenderError(f"{at}: caFile {ca} does not exist")
        out.append(
            RepositoryAccess(
                url=entry["url"],
                username=str(entry["username"]) if entry.get("username") is not None else None,
                password=str(password) if password is not None else None,
                ca_file=Path(str(ca)).expanduser() if ca is not None else None,
                insecure_skip_tls_verify=entry.get("insecureSkipTLSVerify") is True,
                allow_http=entry.get("allowHTTP") is True,
            )
        )
    return out


def access_for(repo: str, entries: list[RepositoryAccess]) -> RepositoryAccess:
    """The most specific entry for `repo` (longest URL prefix), or no credentials and default trust."""
    found = [e for e in entries if e.matches(repo)]
    return max(found, key=lambda e: len(e.url)) if found else RepositoryAccess(url=repo)


# ---------------------------------------------------------------------------------------------- resolve + pull


def pull(
    spec: ChartSpec,
    label: str,
    access: RepositoryAccess,
    cache: Path,
    helm: str,
    limits: ChartLimits | None = None,
) -> PulledChart:
    """Resolve `spec` to one version and digest, and return its unpacked chart from the cache (pulling it
    when missing). `label` (the helm-chart.yaml file) starts every error."""
    limits = limits or ChartLimits()
    client = _Client(spec, access, label, limits)
    if spec.repo.startswith("oci://"):
        version, digest, size = client.resolve_oci()
    else:
        version, digest, size = client.resolve_index()
    if size is not None and size > limits.max_archive_bytes:
        raise client.error(f"the chart archive is {size} bytes, over the {limits.max_archive_bytes}-byte limit")
    _check_repushed(client, cache, version, digest)
    entry = cache / "charts" / digest.replace(":", "-")
    chart_dir = _cached(entry)
    if chart_dir is None:
        chart_dir = _fetch(client, version, digest, entry, helm, limits)
        log.info("chart pulled", chart=spec.chart, version=version, digest=digest, repository=spec.repo)
    else:
        log.info("chart served from cache", chart=spec.chart, version=version, digest=digest)
    return PulledChart(chart_dir, spec.repo, spec.chart, version, digest)


_TEMPLATE_FORMAT = 1  # bump when the `helm template` command line (_tools.helm_template) changes


def memo_template(
    cache: Path | None,
    pulled: PulledChart,
    release: str,
    namespace: str,
    values: list[Path],
    helm: str,
    run: Callable[[], str],
) -> str:
    """`run()` (helm template of a pulled chart), kept under <cache>/charts/renders/ by everything that decides
    its output: the archive's digest, release, namespace, the bytes of every values file and the helm binary
    (path, size, mtime). A re-sync of an unchanged chart source then costs the index/tag check only.
    No cache (a direct render() without one): run every time."""
    found = shutil.which(helm)
    if cache is None or found is None:
        return run()
    binary = os.path.realpath(found)
    stat = os.stat(binary)
    h = hashlib.sha256(
        json.dumps(
            [_TEMPLATE_FORMAT, pulled.digest, release, namespace, binary, stat.st_size, stat.st_mtime_ns]
        ).encode()
    )
    for path in values:
        h.update(hashlib.sha256(path.read_bytes()).digest())
    memo = cache / "charts" / "renders" / f"{h.hexdigest()[:40]}.yaml"
    with contextlib.suppress(OSError):
        return memo.read_text()
    output = run()
    with contextlib.suppress(OSError):
        memo.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=memo.parent, prefix=".render-")
        with os.fdopen(fd, "w") as f:
            f.write(output)
        os.replace(tmp, memo)
    return output


def _check_repushed(client: _Client, cache: Path, version: str, digest: str) -> None:
    """The first digest seen for (repository, chart, version) is recorded in the cache; a different one later
    (a re-pushed version or tag) is an error, never used silently. Deleting the record accepts the new one."""
    spec = client.spec
    key = hashlib.sha256(f"{spec.repo}\0{spec.chart}\0{version}".encode()).hexdigest()[:40]
    record = cache / "charts" / "versions" / f"{key}.json"
    with contextlib.suppress(OSError, ValueError):
        seen = json.loads(record.read_text()).get("digest")
        if seen and seen != digest:
            raise client.error(
                f"version {version} now has digest {digest}, not the {seen} it had when first pulled here "
                f"(re-pushed): refusing it; to accept the new content delete {record}"
            )
        if seen == digest:
            return
    record.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=record.parent, prefix=".version-")
    with os.fdopen(fd, "w") as f:
        json.dump({"repository": spec.repo, "chart": spec.chart, "version": version, "digest": digest}, f)
    os.replace(tmp, record)


def _cached(entry: Path) -> Path | None:
    """The unpacked chart of a complete cache entry (written once, renamed into place whole)."""
    marker = entry / "chart-dir"
    with contextlib.suppress(OSError):
        name = marker.read_text().strip()
        if name and (entry / "unpacked" / name / "Chart.yaml").is_file():
            return entry / "unpacked" / name
    return None


def _fetch(client: _Client, version: str, digest: str, entry: Path, helm: str, limits: ChartLimits) -> Path:
    entry.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".pull-", dir=entry.parent))
    try:
        os.chmod(work, 0o700)  # holds the helm config files with credentials while helm runs
        archive = client.helm_pull(version, work, helm, limits)
        actual = "sha256:" + _sha256(archive)
        if actual != digest:
            raise client.error(
                f"the pulled archive of {version} has digest {actual[:19]}…, not the {digest[:19]}… the "
                "repository announced: refusing it"
            )
        staged = work / "entry"
        unpacked = staged / "unpacked"
        unpacked.mkdir(parents=True)
        name = unpack(archive, unpacked, limits, client.error)
        shutil.move(str(archive), staged / "chart.tgz")
        (staged / "chart-dir").write_text(name + "\n")
        try:
            os.rename(staged, entry)
        except OSError:
            if _cached(entry) is None:  # not a concurrent pull of the same digest: a real failure
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    found = _cached(entry)
    if found is None:
        raise client.error("the chart cache entry is incomplete after the pull")
    return found


def unpack(archive: Path, dest: Path, limits: ChartLimits, error: Any = RenderError, _depth: int = 0) -> str:
    """Unpack a chart archive into `dest` after checking it: size, members, unpacked bytes, one top-level
    directory, only regular files and directories (no links, devices), no absolute or `..` path. Returns the
    top-level directory's name. Members are written with O_EXCL|O_NOFOLLOW, so nothing lands outside."""
    size = archive.stat().st_size
    if size > limits.max_archive_bytes:
        raise error(f"the chart archive is {size} bytes, over the {limits.max_archive_bytes}-byte limit")
    top: str | None = None
    count = 0
    total = 0
    try:
        with tarfile.open(archive, mode="r:gz") as tar:
            for member in tar:
                count += 1
                if count > limits.max_files:
                    raise error(f"the chart archive has more than {limits.max_files} entries")
                name = member.name
                parts = [p for p in name.split("/") if p not in ("", ".")]
                if name.startswith("/") or "\\" in name or "\0" in name or not parts:
                    raise error(f"the chart archive holds an absolute or malformed path ({_shown(name)})")
                if ".." in parts:
                    raise error(f"the chart archive holds a path leaving its directory ({_shown(name)})")
                if not (member.isfile() or member.isdir()):
                    kind = "a link" if member.issym() or member.islnk() else "a special file"
                    raise error(f"the chart archive holds {kind} ({_shown(name)}): refused")
                if top is None:
                    top = parts[0]
                elif parts[0] != top:
                    raise error("the chart archive has more than one top-level directory")
                total += member.size
                if total > limits.max_unpacked_bytes:
                    raise error(f"the chart archive unpacks to more than {limits.max_unpacked_bytes} bytes")
                target = dest.joinpath(*parts)
                if member.isdir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                source = tar.extractfile(member)
                assert source is not None  # a regular file
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
                with os.fdopen(fd, "wb") as out:
                    written = 0
                    while chunk := source.read(1 << 16):
                        written += len(chunk)
                        if written > member.size:
                            raise error("the chart archive's entry is longer than its header says")
                        out.write(chunk)
    except (tarfile.TarError, EOFError, OSError, ValueError) as err:
        if isinstance(err, FileExistsError):
            raise error("the chart archive holds one path twice") from None
        raise error(f"the chart archive cannot be read ({type(err).__name__})") from None
    if top is None or not (dest / top / "Chart.yaml").is_file():
        raise error("the chart archive has no <chart>/Chart.yaml")
    check_subchart_archives(dest / top, limits, error, _depth)
    return top


def check_subchart_archives(chart: Path, limits: ChartLimits, error: Any = RenderError, _depth: int = 0) -> None:
    """helm also loads the archives in `charts/` (sub-charts, vendored or from `helm dependency build`): each
    gets the same checks, unpacked into a scratch directory that is then removed, down to 10 levels."""
    archives = sorted((chart / "charts").glob("*.tgz")) if (chart / "charts").is_dir() else []
    if archives and _depth >= 10:
        raise error("sub-chart archives are nested more than 10 levels deep")
    for nested in archives:
        inner = f"charts/{nested.name}"

        def nested_error(problem: str, inner: str = inner) -> Exception:
            return error(f"sub-chart archive {inner}: {problem}")  # type: ignore[no-any-return]

        with tempfile.TemporaryDirectory(prefix="gitops-sync-subchart-") as scratch:
            unpack(nested, Path(scratch), limits, nested_error, _depth + 1)


def _shown(name: str) -> str:
    return json.dumps(name[:120])


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


class _Client:
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
        self.ctx = ssl.create_default_context(cafile=str(access.ca_file) if access.ca_file else None)
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
                raise self.error(
                    f"TLS verification failed ({reason.verify_message}): give this repository's CA bundle as "
                    f"`caFile` in the credentials file (${CREDENTIALS_ENV}), or `insecureSkipTLSVerify: true`"
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
                f"with its URL to the chart credentials file (${CREDENTIALS_ENV})"
            )
        if code in (401, 403):
            return self.error(f"the repository refused the configured credentials (HTTP {code})")
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
        env = {k: v for k, v in os.environ.items() if not k.startswith("HELM_")}
        env.update(
            HELM_CONFIG_HOME=str(work / "config"),
            HELM_CACHE_HOME=str(work / "cache"),
            HELM_DATA_HOME=str(work / "data"),
        )
        args = ["pull"]
        if self.oci:
            host, name = self._oci_parts()
            config = work / "registry.json"
            auths = {}
            if self._basic() is not None:
                auths[host] = {"auth": self._basic()[len("Basic ") :]}  # type: ignore[index]
            _write_private(config, json.dumps({"auths": auths}))
            args += [f"oci://{host}/{name}", "--version", version, "--registry-config", str(config)]
            if self.access.allow_http:
                args.append("--plain-http")
        else:
            repos = work / "repositories.yaml"
            cache = work / "repository-cache"
            cache.mkdir()
            entry: dict[str, Any] = {"name": "source", "url": self.spec.repo}
            if self.access.username is not None:
                entry["username"] = self.access.username
            if self.access.password is not None:
                entry["password"] = self.access.password
            if self.access.ca_file is not None:
                entry["caFile"] = str(self.access.ca_file)
            if self.access.insecure_skip_tls_verify:
                entry["insecure_skip_tls_verify"] = True
            _write_private(repos, json.dumps({"apiVersion": "", "repositories": [entry]}))
            (cache / "source-index.yaml").write_bytes(self.index)  # the index we resolved against, not a refetch
            args += [f"source/{self.spec.chart}", "--version", version]
            args += ["--repository-config", str(repos), "--repository-cache", str(cache)]
        if self.access.ca_file is not None:
            args += ["--ca-file", str(self.access.ca_file)]
        if self.access.insecure_skip_tls_verify:
            args.append("--insecure-skip-tls-verify")
        args += ["--destination", str(out)]
        try:
            _tools.helm(helm, args, self.label, _tools.Limits(limits.pull_timeout, 1 << 20), env)
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
