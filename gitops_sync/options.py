"""Command-line options shared by `sync`, `diff`, `render` and `run`, gathered into typed objects.

Each group of flags is declared once; the decorated command receives a `SourceOptions` (`source`) and
a `ClusterArgs` (`cluster`) instead of a dozen loose keyword arguments.
"""

from __future__ import annotations

import functools
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar

import click

from gitops_sync import log as logsetup
from gitops_sync.conventions import FIELD_MANAGER

if TYPE_CHECKING:
    from gitops_sync.plan.ignore import IgnoreRule
    from gitops_sync.source.credentials import GitCredentials

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class ClusterArgs:
    kubeconfig: Path | None
    context: str | None
    field_manager: str
    concurrency: int
    name: str | None  # ApplySet (inventory) name
    inventory_namespace: str | None
    ignore: tuple[IgnoreRule, ...] = ()  # --ignore rules (the repository's .gitops-sync.yaml adds its own)
    # `sync`/`diff`: every --context given, in order (several: one pass per cluster); `context` is the first
    contexts: tuple[str, ...] = ()


def _apply(fn: Callable[..., Any], options: list[Callable[[Any], Any]]) -> Any:
    for o in reversed(options):
        fn = o(fn)
    return fn


def source_options(fn: F) -> F:
    """--repo --revision --path --cache-dir --helm-values --helm-release --kustomize-allow-external
    --allow-chart-repository -n -> `source=`, `namespace=`."""
    return _source_options(fn, repo_required=True)


def daemon_source_options(fn: F) -> F:
    """As `source_options`, but --repo may be left out: `run` then reconciles GitSync objects (repo "")."""
    return _source_options(fn, repo_required=False)


def _source_options(fn: F, *, repo_required: bool) -> F:

    @functools.wraps(fn)
    def wrapper(*args: Any, **kw: Any) -> Any:
        from gitops_sync.engine import SourceOptions  # the pipeline: only once a command runs
        from gitops_sync.render import RenderOptions

        repo = kw.pop("repo") or ""
        kw["source"] = SourceOptions(
            repo=repo,
            revision=kw.pop("revision"),
            path=kw.pop("subpath"),
            cache_dir=kw.pop("cache_dir"),
            render=RenderOptions(
                helm_values=tuple(kw.pop("helm_values")),
                helm_release=kw.pop("helm_release"),
                namespace=kw["namespace"],
                kustomize_allow_external=kw.pop("kustomize_allow_external"),
                # `run` without --repo serves GitSyncs of many tenants: none may use the operator's chart credentials
                chart_credentials_env=bool(repo),
                chart_repositories=tuple(kw.pop("allow_chart_repository", ())),
            ),
            credentials=_git_credentials(  # a caller passing the flags by hand may leave these out
                username=kw.pop("git_username", None),
                password_file=kw.pop("git_password_file", None),
                bearer_token_file=kw.pop("git_bearer_token_file", None),
                ssh_key_file=kw.pop("ssh_key_file", None),
                known_hosts=kw.pop("known_hosts", None),
            ),
        )
        _take_secret_options(kw)
        return fn(*args, **kw)

    return _apply(wrapper, _source_flags(repo_required))  # type: ignore[no-any-return]


def _git_credentials(**given: Any) -> Callable[[], GitCredentials | None] | None:
    """What fetches ask for the CLI's Git credentials (None: no flag and no variable gives any). The files
    are read at every fetch, so `run --repo` follows a rotated token file without a restart."""
    from gitops_sync.source.credentials import PASSWORD_ENV, TOKEN_ENV, credentials_from_environment

    if not any(given.values()) and not os.environ.get(PASSWORD_ENV) and not os.environ.get(TOKEN_ENV):
        return None
    return functools.partial(credentials_from_environment, **given)


def _source_flags(repo_required: bool) -> list[Callable[[Any], Any]]:
    """The flags that say where the source is and how it renders; `_source_options` makes a SourceOptions."""
    return [
        click.option(
            "--repo",
            required=repo_required,
            envvar="GITOPS_SYNC_REPO",
            help="Git URL or local path (work tree or plain directory).",
        ),
        click.option(
            "--revision",
            envvar="GITOPS_SYNC_REVISION",
            default=None,
            help="Branch, tag or commit SHA (default: remote HEAD / the work tree as is).",
        ),
        click.option(
            "--path",
            "subpath",
            envvar="GITOPS_SYNC_PATH",
            default=None,
            help="Sub-directory of the repository to render.",
        ),
        click.option("--cache-dir", type=click.Path(path_type=Path), default=None, help="Where clones are kept."),
        *_credential_flags(),
        click.option(
            "--helm-values",
            multiple=True,
            type=click.Path(path_type=Path),
            help="Values file for every Helm chart (repeatable); relative: from the current directory, "
            "else from the repository.",
        ),
        click.option(
            "--helm-release", default=None, help="Release name for Helm charts (default: the chart directory name)."
        ),
        click.option(
            "--kustomize-allow-external",
            is_flag=True,
            help="Let kustomizations use remote bases (URLs, git refs) and paths outside the repository.",
        ),
        *secret_options,
        click.option(
            "--allow-chart-repository",
            multiple=True,
            envvar="GITOPS_SYNC_ALLOW_CHART_REPOSITORY",
            metavar="PREFIX",
            help="Chart repository (https://… or oci://…) that helm-chart.yaml files and Chart.yaml dependencies may "
            "fetch from, by URL prefix on a path boundary (repeatable; env: space-separated). Entries of the chart "
            "credentials file are allowed too; any other repository is refused (ChartRepositoryNotAllowed).",
        ),
        click.option(
            "-n",
            "--namespace",
            envvar="GITOPS_SYNC_NAMESPACE",
            default="default",
            show_default=True,
            help="Namespace for namespaced objects that name none.",
        ),
    ]


def _credential_flags() -> list[Callable[[Any], Any]]:
    """Git credentials besides a URL's own (docs/private-repositories.md). A secret is never a flag's value:
    a file's path, or the variables GITOPS_SYNC_GIT_PASSWORD / GITOPS_SYNC_GIT_BEARER_TOKEN."""
    path = click.Path(path_type=Path, dir_okay=False)
    return [
        click.option(
            "--git-username", envvar="GITOPS_SYNC_GIT_USERNAME", default=None, help="User for HTTPS basic auth."
        ),
        click.option(
            "--git-password-file",
            envvar="GITOPS_SYNC_GIT_PASSWORD_FILE",
            type=path,
            default=None,
            help="File holding the HTTPS password or token (or the variable GITOPS_SYNC_GIT_PASSWORD).",
        ),
        click.option(
            "--git-bearer-token-file",
            envvar="GITOPS_SYNC_GIT_BEARER_TOKEN_FILE",
            type=path,
            default=None,
            help="File holding a token sent as `Authorization: Bearer` (or the variable GITOPS_SYNC_GIT_BEARER_TOKEN).",
        ),
        click.option(
            "--ssh-key-file",
            envvar="GITOPS_SYNC_SSH_KEY_FILE",
            type=path,
            default=None,
            help="SSH private key (no passphrase) for ssh:// and git@host: URLs; only this key is offered.",
        ),
        click.option(
            "--known-hosts",
            envvar="GITOPS_SYNC_KNOWN_HOSTS",
            type=path,
            default=None,
            help="known_hosts file the SSH server's host key must be in (default ~/.ssh/known_hosts); "
            "a host not listed or with another key is refused.",
        ),
    ]


def _files(flag: str, help: str) -> Callable[[F], F]:
    """A repeatable flag naming files."""
    return click.option(flag, multiple=True, type=click.Path(path_type=Path), help=help)


# Keys for SOPS-encrypted manifests (gitops_sync/render/sops.py) and for commit signatures (source/verify.py).
secret_options = [
    _files(
        "--sops-age-key-file",
        "age identities for SOPS-encrypted manifests (repeatable; default: $SOPS_AGE_KEY_FILE; "
        "$SOPS_AGE_KEY adds identities inline).",
    ),
    _files(
        "--sops-pgp-key-file",
        "Armored OpenPGP private key for SOPS-encrypted manifests (repeatable; imported into a private "
        "GNUPGHOME for the run).",
    ),
    click.option(
        "--verify-commits",
        is_flag=True,
        help="Render only a commit signed by a trusted key (--allowed-signers, --trusted-pgp-keys); exit 2 "
        "otherwise, nothing applied or pruned.",
    ),
    click.option(
        "--verify-tag",
        is_flag=True,
        help="--revision must be an annotated tag signed by a trusted key (with --verify-commits: its commit too); "
        "exit 2 otherwise.",
    ),
    click.option(
        "--allowed-signers",
        type=click.Path(path_type=Path),
        default=None,
        help="SSH allowed-signers file (ssh-keygen(1) format) for --verify-commits and --verify-tag.",
    ),
    _files("--trusted-pgp-keys", "Armored OpenPGP public keys for --verify-commits and --verify-tag (repeatable)."),
]


def _take_secret_options(kw: dict[str, Any]) -> None:
    """The keys of `secret_options`, read now (a missing file fails before any fetch), into kw["source"]; a
    caller passing the source flags by hand may leave them out."""
    from gitops_sync.render import sops
    from gitops_sync.source import verify

    source = kw["source"]
    age, pgp = kw.pop("sops_age_key_file", ()), kw.pop("sops_pgp_key_file", ())
    signers, pgp_keys = kw.pop("allowed_signers", None), kw.pop("trusted_pgp_keys", ())
    commits, tags = kw.pop("verify_commits", False), kw.pop("verify_tag", False)
    if (signers or pgp_keys) and not (commits or tags):
        raise click.UsageError(
            "--allowed-signers and --trusted-pgp-keys are the keys of --verify-commits / --verify-tag: add one"
        )
    if not source.repo:  # the fleet: a GitSync never gets the controller's keys (its own come with its spec)
        if age or pgp or commits or tags:
            raise click.UsageError(
                "--sops-*-key-file, --verify-commits and --verify-tag apply to a --repo source, not to GitSyncs"
            )
        return
    source.render.decryption = sops.from_cli(age, pgp, os.environ)
    if commits or tags:
        source.verify = verify.from_cli(signers, pgp_keys, commits=commits, tags=tags)


def _ignore_rules(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> list[IgnoreRule]:
    from gitops_sync.plan.ignore import parse_flag

    try:
        return [parse_flag(v) for v in values]
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def cluster_options(fn: F) -> F:
    """--kubeconfig --context --field-manager --concurrency --name --inventory-namespace -> `cluster=`."""
    return _cluster_options(fn, many=False)


def multi_cluster_options(fn: F) -> F:
    """`cluster_options` with --context repeatable (`sync`, `diff`: one pass per cluster)."""
    return _cluster_options(fn, many=True)


def _cluster_options(fn: F, *, many: bool) -> F:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kw: Any) -> Any:
        contexts = _contexts(kw.pop("context"))
        kw["cluster"] = ClusterArgs(
            kubeconfig=kw.pop("kubeconfig"),
            context=contexts[0] if contexts else None,
            contexts=contexts,
            field_manager=kw.pop("field_manager"),
            concurrency=kw.pop("concurrency"),
            name=kw.pop("inv_name"),
            inventory_namespace=kw.pop("inventory_namespace"),
            ignore=tuple(kw.pop("ignore")),
        )
        return fn(*args, **kw)

    options = [
        click.option(
            "--kubeconfig",
            type=click.Path(path_type=Path),
            default=None,
            envvar="KUBECONFIG",
            help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster).",
        ),
        _context_option(many=many),
        click.option(
            "--field-manager",
            envvar="GITOPS_SYNC_FIELD_MANAGER",
            default=FIELD_MANAGER,
            show_default=True,
            help="Server-side apply field manager name.",
        ),
        click.option(
            "--concurrency", default=8, show_default=True, type=click.IntRange(1, 64), help="Parallel API requests."
        ),
        click.option(
            "--name",
            "inv_name",
            envvar="GITOPS_SYNC_NAME",
            default=None,
            help="ApplySet (inventory) name; default: gitops-sync-<readable part>-<hash of the normalised "
            "repository and --path>. A name whose parent records another source is refused.",
        ),
        click.option(
            "--inventory-namespace",
            envvar="GITOPS_SYNC_INVENTORY_NAMESPACE",
            default=None,
            help="Namespace of the ApplySet parent ConfigMap (default: -n).",
        ),
        click.option(
            "--ignore",
            multiple=True,
            callback=_ignore_rules,
            metavar="RULE",
            help="A field Git sets that the cluster may own: [GROUP/]KIND:[NAMESPACE/]NAME:PATH[:MODE], globs "
            "allowed, PATH a field path (.spec.replicas) or JSON pointer (/spec/replicas), MODE "
            "if-owned-by-others (default) or always. Repeatable; .gitops-sync.yaml in the repository adds rules.",
        ),
    ]
    return _apply(wrapper, options)  # type: ignore[no-any-return]


def _contexts(given: str | tuple[str, ...] | None) -> tuple[str, ...]:
    """Every --context given, each once, in order: a repeatable option's tuple or one option's value."""
    if isinstance(given, tuple):
        return tuple(dict.fromkeys(given))
    return (given,) if given else ()


def _context_option(*, many: bool) -> Callable[[F], F]:
    """--context: one (`run`), or repeatable (`sync`, `diff`)."""
    if not many:
        return click.option("--context", envvar="GITOPS_SYNC_CONTEXT", default=None, help="kubeconfig context.")
    return click.option(
        "--context",
        envvar="GITOPS_SYNC_CONTEXT",
        multiple=True,
        help="kubeconfig context; repeat it (or list them in GITOPS_SYNC_CONTEXT, space-separated) for one pass "
        "per cluster, one report grouped by cluster, the exit code the worst of them.",
    )


def safety_options(adopt_shared_help: str) -> Callable[[F], F]:
    """--adopt-shared --prune-cascade (`sync`, `diff`, `run`), each command saying in its own words what
    --adopt-shared leaves alone."""

    def decorate(fn: F) -> F:
        fn = click.option(
            "--prune-cascade",
            is_flag=True,
            help="With --prune: also delete a Namespace or CRD that still holds objects this prune does not remove.",
        )(fn)
        return click.option("--adopt-shared", is_flag=True, help=adopt_shared_help)(fn)

    return decorate


def conflict_option(default: str, help: str) -> Callable[[F], F]:
    """--on-conflict: one of the ConflictPolicy values; the default and its explanation are the command's."""
    from gitops_sync.conventions import ConflictPolicy

    choice = click.Choice([p.value for p in ConflictPolicy])
    return click.option("--on-conflict", type=choice, default=default, show_default=True, help=help)


# --log-format/--log-level are accepted on the group and on every command; the command decides the
# default level (warning for one-shot commands whose output is the report, info for the daemon).
_LOG_CHOICES: Final = "gitops_sync.log_choices"


@dataclass(frozen=True)
class LogChoices:
    """The --log-format/--log-level given on one command line (None: not given)."""

    format: str | None = None
    level: str | None = None

    def configure(self, default_level: str = "warning") -> None:
        """Set up logging as chosen; `default_level` where no level was given."""
        logsetup.configure(self.format or "auto", self.level or default_level)


def log_choices(ctx: click.Context) -> LogChoices:
    """The --log-* choices of the command line `ctx` belongs to so far (the group's, then the command's):
    kept in `ctx.meta`, which the group and its command share and a new command line starts empty."""
    found = ctx.meta.get(_LOG_CHOICES)
    return found if isinstance(found, LogChoices) else LogChoices()


def log_options(fn: F) -> F:
    """--log-format --log-level -> `logs=` (a LogChoices; a command's own flags over the group's)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kw: Any) -> Any:
        ctx = click.get_current_context()
        earlier = log_choices(ctx)
        fmt, level = kw.pop("log_format"), kw.pop("log_level")
        ctx.meta[_LOG_CHOICES] = logs = LogChoices(fmt or earlier.format, level or earlier.level)
        return fn(*args, logs=logs, **kw)

    options = [
        click.option(
            "--log-format",
            type=click.Choice(["auto", "json", "console"]),
            default=None,
            help="Logs on stderr: JSON unless stderr is a terminal (auto).",
        ),
        click.option(
            "--log-level",
            type=click.Choice(["debug", "info", "warning", "error"]),
            default=None,
            help="Log level (default: warning; info for `run`).",
        ),
    ]
    return _apply(wrapper, options)  # type: ignore[no-any-return]


# --- durations ------------------------------------------------------------------------------------

_DURATION_PART: Final = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|h|m|s)")
_UNIT_SECONDS: Final = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def parse_duration(text: str | float) -> float:
    """Seconds from `90`, `90s`, `5m`, `1h30m`, `1.5h`, `500ms` (Go's time.ParseDuration units that
    make sense here, as `kubectl --timeout` and flux take them); ValueError otherwise."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        seconds = float(text)
    else:
        raw = str(text).strip().lower()
        try:
            seconds = float(raw)
        except ValueError:
            pos, seconds = 0, 0.0
            for match in _DURATION_PART.finditer(raw):
                if match.start() != pos:
                    break
                seconds += float(match[1]) * _UNIT_SECONDS[match[2]]
                pos = match.end()
            if not raw or pos != len(raw):
                raise ValueError(f"{text!r} is not a duration (examples: 90, 90s, 5m, 1h30m)") from None
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"{text!r} is not a duration (examples: 90, 90s, 5m, 1h30m)")
    return seconds


class _Duration(click.ParamType[float]):
    name = "DURATION"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        try:
            return parse_duration(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


DURATION: Final = _Duration()
