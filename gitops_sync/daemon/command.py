"""`gitops-sync run`: the daemon's command line. Every option can also come from a GITOPS_SYNC_* variable."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

import click

from gitops_sync.cluster.lease import LeaderConfig, default_identity
from gitops_sync.conventions import ConflictPolicy
from gitops_sync.daemon.fleet.controller import Fleet
from gitops_sync.daemon.process.controller import DaemonOptions
from gitops_sync.daemon.reconcile.triggers import WEBHOOK_SECRET_ENV, load_webhook_secret
from gitops_sync.daemon.runtime.auth import AUTH_MODES
from gitops_sync.daemon.single.controller import Daemon
from gitops_sync.engine import PassOptions, SourceOptions
from gitops_sync.errors import GitOpsError, SourceError
from gitops_sync.log import get_logger
from gitops_sync.options import (
    DURATION,
    ClusterArgs,
    LogChoices,
    cluster_options,
    conflict_option,
    daemon_source_options,
    log_options,
    safety_options,
)
from gitops_sync.source.lazyfetch import serving_lazy_fetches

F = TypeVar("F", bound=Callable[..., Any])
log = get_logger("gitops_sync.daemon")

_SA_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")

_CONFLICT_HELP = (
    "Fields another manager owns with a different value. Default force: Git wins and takes the field "
    "back, like Argo CD self-heal, and the manager it was taken from is named in the log and the Event "
    "(with --detect-only: report what self-heal would take). report: apply the rest, leave contested "
    "fields to their owner and report a conflict; skip: leave the whole object."
)


def _seconds(flag: str, default: float, least: float, help: str) -> Callable[[F], F]:
    """A number of seconds, `least` or more (plain seconds; the duration flags take 90s, 5m too)."""
    return click.option(flag, default=default, type=click.FloatRange(least), help=help)


@dataclass(frozen=True)
class RunFlags:
    """The flags of `run` besides the shared groups (logs, source, cluster), as click passes them."""

    namespace: str
    self_heal: bool
    prune: bool
    allow_empty: bool
    on_conflict: str
    adopt_shared: bool
    prune_cascade: bool
    interval: float
    resync: float
    debounce: float
    http_addr: str
    http_auth: str
    webhook_secret_file: Path | None
    tls_cert_file: Path | None
    tls_key_file: Path | None
    leader_elect: bool
    leader_elect_namespace: str | None
    leader_elect_identity: str | None
    lease_duration: float
    renew_deadline: float
    retry_period: float
    max_backoff: float
    fight_threshold: int
    fight_window: float
    autoscaler_wins: bool
    shutdown_grace: float
    watch_namespace: str | None
    shards: int
    max_shards: int
    workers: int
    allow_local_repository: tuple[Path, ...]


@click.command(context_settings={"auto_envvar_prefix": "GITOPS_SYNC", "show_default": True})
@daemon_source_options
@cluster_options
@log_options
@click.option(
    "--self-heal/--detect-only",
    default=True,
    help="Correct drift as soon as the watch shows it, or only report it (never write).",
)
@click.option(
    "--prune",
    is_flag=True,
    help="Delete objects this source applied that have left Git (never after a failed fetch or render).",
)
@click.option("--allow-empty", is_flag=True, help="With --prune: allow pruning everything when Git renders nothing.")
@conflict_option("force", _CONFLICT_HELP)
@safety_options(
    "Take over objects that are members of another ApplySet "
    "(default: leave them alone and report a `shared` conflict; --on-conflict force does not)."
)
@_seconds(
    "--interval",
    60.0,
    0,
    "Seconds between Git polls (±10% jitter; 0 = no polling). Local paths are also watched for changes.",
)
@_seconds("--resync", 600.0, 0, "Seconds between full passes over every object, whatever the events said (0 = never).")
@_seconds("--debounce", 0.2, 0, "Quiet period after file changes in a local repository before re-rendering.")
@click.option(
    "--http-addr", default=":8080", help="HOST:PORT for /healthz /readyz /metrics /status and POST /hooks/git."
)
@click.option(
    "--http-auth",
    type=click.Choice(AUTH_MODES),
    default="none",
    help="Who may read /status, /metrics (and any other path but the probes and the webhook): "
    "none, or kubernetes: a bearer token checked with TokenReview and authorised with "
    "SubjectAccessReview (get on the non-resource URL).",
)
@click.option(
    "--webhook-secret-file",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help=f"Secret for POST /hooks/git (GitHub X-Hub-Signature-256 or GitLab X-Gitlab-Token); "
    f"else ${WEBHOOK_SECRET_ENV}; without one the webhook is off.",
)
@click.option(
    "--tls-cert-file",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Serve --http-addr over HTTPS only (TLS 1.2+) with this certificate (PEM, chain after it); "
    "re-read when the file changes. Needs --tls-key-file.",
)
@click.option(
    "--tls-key-file",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="The private key (PEM) of --tls-cert-file.",
)
@click.option(
    "--leader-elect",
    is_flag=True,
    help="Elect a leader on a coordination.k8s.io Lease; only the leader writes (run several replicas).",
)
@click.option(
    "--leader-elect-namespace",
    default=None,
    help="Namespace of the Lease (default: the pod's namespace in a cluster, else the inventory namespace).",
)
@click.option("--leader-elect-identity", default=None, help="This replica's identity (default: hostname_random).")
@_seconds("--lease-duration", 15.0, 1, "Seconds a Lease holds without renewal before a follower may take it.")
@_seconds("--renew-deadline", 10.0, 0.5, "Seconds the leader keeps writing without a successful renewal.")
@_seconds("--retry-period", 2.0, 0.1, "Seconds between Lease attempts.")
@click.option(
    "--max-backoff",
    default="5m",
    type=DURATION,
    help="Longest delay before retrying a pass or an "
    "object that keeps failing (the delay doubles from 0.05 s on each failure; a clean pass resets "
    "it). Seconds or 90s, 5m, 1h.",
)
@click.option(
    "--fight-threshold",
    default=3,
    type=click.IntRange(2),
    help="Stop correcting a field Git sets "
    "(leave it to the other manager, report a fight) once another manager has taken it this many times "
    "within --fight-window.",
)
@click.option(
    "--fight-window",
    default="10m",
    type=DURATION,
    help="Window for --fight-threshold; a yielded field "
    "is corrected again once its other manager has not written it for this long (or Git's value changes).",
)
@click.option(
    "--autoscaler-wins/--git-wins-over-autoscaler",
    default=True,
    help="Leave a .spec.replicas that a "
    "HorizontalPodAutoscaler scales (kube-controller-manager through the scale subresource) to the HPA at "
    "once, or keep correcting it to Git's value.",
)
@_seconds("--shutdown-grace", 10.0, 0, "Seconds SIGTERM waits for the pass in flight before abandoning it.")
@click.option(
    "--watch-namespace",
    default=None,
    help="Without --repo: reconcile only the GitSyncs of this namespace (default: every namespace).",
)
@click.option(
    "--shards",
    default=1,
    type=click.IntRange(1, 1024),
    help="Without --repo, with --leader-elect: "
    "split the GitSyncs into this many shards, each its own Lease gitops-sync-shard-<i>; every "
    "replica must use the same number.",
)
@click.option(
    "--max-shards",
    default=0,
    type=click.IntRange(0),
    help="Most shards one replica holds "
    "(0 = all): with 3 replicas and --shards 4, 2 leaves every replica some work and spare capacity.",
)
@click.option(
    "--workers",
    default=4,
    type=click.IntRange(1, 256),
    help="Without --repo: GitSyncs reconciled at the same time (one pass per GitSync at a time).",
)
@click.option(
    "--allow-local-repository",
    multiple=True,
    type=click.Path(path_type=Path, file_okay=False),
    help="Without --repo: a directory under which a GitSync's spec.repository may be a local path or "
    "file:// URL (repeatable; default none: only remote URLs). The clone cache is never allowed.",
)
def run(logs: LogChoices, source: SourceOptions, cluster: ClusterArgs, **flags: Any) -> None:
    """Keep the cluster equal to the repository for as long as it runs (the daemon).

    Level-triggered: watch events, Git polls, file events and webhooks only queue work; every pass
    recomputes desired vs live from the watch cache. Drift and field fights are reported in the log,
    as Kubernetes Events, on /status and /metrics. SIGTERM finishes the pass, releases the Lease, exits 0.
    """
    logs.configure("info")  # a daemon's log is its report
    f = RunFlags(**flags)
    if f.allow_local_repository and source.repo:
        raise click.UsageError(
            "--allow-local-repository is for the fleet (run without --repo): the --repo of `run` is the "
            "operator's own and is not checked"
        )
    if f.allow_local_repository:
        _refuse_lazy_fetching_git()
    if source.credentials is not None and not source.repo:
        raise click.UsageError(
            "Git credential flags and variables are for --repo: a GitSync names its own in spec.secretRef "
            "(docs/private-repositories.md)"
        )
    if source.render.kustomize_allow_external and not source.repo:
        raise click.UsageError(
            "--kustomize-allow-external is for --repo: a GitSync's kustomizations would fetch remote bases with "
            "the controller's Git credentials and read files of the controller's disk"
        )
    _serve(_options(source, cluster, f))


def _refuse_lazy_fetching_git() -> None:
    """A tenant's `file://` repository must not run a command as us through a lazy fetch: this git must keep
    its upload-pack from starting one (source/lazyfetch.py; docs/safety.md)."""
    try:
        unsafe = serving_lazy_fetches()
    except SourceError as err:
        raise click.UsageError(f"--allow-local-repository: {err}") from None
    if unsafe:
        raise click.UsageError(
            "--allow-local-repository: this machine's git starts a lazy fetch when it serves a file:// fetch of "
            "a partial clone, which runs that repository's remote.<name>.uploadpack as the controller; use a "
            "git with the upload-pack fix (2.39.4, 2.40.2, 2.41.1, 2.42.2, 2.43.4, 2.44.1, 2.45.1 or later)"
        )


def _options(source: SourceOptions, cluster: ClusterArgs, f: RunFlags) -> DaemonOptions:
    try:
        policy = ConflictPolicy(f.on_conflict)
        leader = LeaderConfig(f.lease_duration, f.renew_deadline, f.retry_period)
        secret = load_webhook_secret(f.webhook_secret_file)
        if (f.tls_cert_file is None) != (f.tls_key_file is None):
            raise ValueError("--tls-cert-file and --tls-key-file go together")
    except (ValueError, GitOpsError) as exc:
        raise click.UsageError(str(exc)) from exc
    return DaemonOptions(
        source=source,
        pass_opts=PassOptions(
            namespace=f.namespace,
            prune=f.prune,
            allow_empty=f.allow_empty,
            policy=policy,
            name=cluster.name,
            inventory_namespace=cluster.inventory_namespace,
            adopt_shared=f.adopt_shared,
            prune_cascade=f.prune_cascade,
            ignore=cluster.ignore,
        ),
        self_heal=f.self_heal,
        interval=f.interval,
        resync=f.resync,
        debounce=f.debounce,
        http_addr=f.http_addr,
        http_auth=f.http_auth,
        tls_files=(f.tls_cert_file, f.tls_key_file) if f.tls_cert_file and f.tls_key_file else None,
        webhook_secret=secret,
        kubeconfig=cluster.kubeconfig,
        context=cluster.context,
        field_manager=cluster.field_manager,
        concurrency=cluster.concurrency,
        leader_elect=f.leader_elect,
        leader_namespace=f.leader_elect_namespace or _pod_namespace(),
        identity=f.leader_elect_identity or default_identity(),
        leader=leader,
        shutdown_grace=f.shutdown_grace,
        max_backoff=max(f.max_backoff, 0.05),
        fight_threshold=f.fight_threshold,
        fight_window=f.fight_window,
        autoscaler_wins=f.autoscaler_wins,
        watch_namespace=f.watch_namespace,
        shards=f.shards,
        max_shards=f.max_shards,
        workers=f.workers,
        allow_local_repositories=f.allow_local_repository,
    )


def _serve(opts: DaemonOptions) -> None:
    """Run until SIGTERM or SIGINT, then stop and exit 0."""
    try:
        daemon: Daemon | Fleet = Daemon(opts) if opts.source.repo else Fleet(opts)
    except (GitOpsError, OSError, ValueError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("signal received", signal=signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    daemon.start()
    while not stop.wait(0.2) and not daemon.failure:
        pass
    daemon.stop()
    if daemon.failure:
        click.echo(f"error: {daemon.failure}", err=True)
        sys.stderr.flush()
        os._exit(2)
    # Everything is released (Lease, Events, HTTP, connections). The interpreter's own teardown would
    # garbage-collect every cached object first: 0.1-0.5 s of an idle daemon's SIGTERM, for nothing.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _pod_namespace() -> str | None:
    """In a cluster the Lease lives in the pod's own namespace, which the ServiceAccount can write."""
    env = os.environ.get("POD_NAMESPACE")
    if env:
        return env
    try:
        return _SA_NAMESPACE.read_text().strip() or None
    except OSError:
        return None
