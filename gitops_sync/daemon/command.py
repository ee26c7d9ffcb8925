"""`gitops-sync run`: the daemon's command line. Every option can also come from a GITOPS_SYNC_* variable."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

import click
import structlog

from gitops_sync import FIELD_MANAGER
from gitops_sync import log as logsetup
from gitops_sync.apply.manager import ConflictPolicy
from gitops_sync.daemon.leader import LeaderConfig, default_identity
from gitops_sync.daemon.loop import Daemon, DaemonOptions
from gitops_sync.daemon.triggers import WEBHOOK_SECRET_ENV, load_webhook_secret
from gitops_sync.engine import PassOptions, SourceOptions
from gitops_sync.errors import GitOpsError
from gitops_sync.render import RenderOptions

log = structlog.get_logger("gitops_sync.daemon")

_SA_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")

_CONFLICT_HELP = (
    "Fields another manager owns with a different value. Default force: Git wins and takes the field "
    "back, like Argo CD self-heal, and the manager it was taken from is named in the log and the Event "
    "(with --detect-only: report what self-heal would take). report: apply the rest, leave contested "
    "fields to their owner and report a conflict; skip: leave the whole object."
)


@click.command(context_settings={"auto_envvar_prefix": "GITOPS_SYNC", "show_default": True})
@click.option("--repo", required=True, help="Git URL or local path (work tree or plain directory).")
@click.option("--revision", default=None, help="Branch, tag or commit (default: remote HEAD / the work tree).")
@click.option("--path", "subpath", default=None, envvar="GITOPS_SYNC_PATH",
              help="Sub-directory of the repository to render.")
@click.option("--cache-dir", type=click.Path(path_type=Path), default=None, help="Where clones are kept.")
@click.option("--helm-values", multiple=True, type=click.Path(path_type=Path), help="Values file for every chart.")
@click.option("--helm-release", default=None, help="Release name for Helm charts (default: chart directory).")
@click.option("-n", "--namespace", default="default", help="Namespace for namespaced objects that name none.")
@click.option("--kubeconfig", type=click.Path(path_type=Path), default=None, envvar="KUBECONFIG",
              help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster).")
@click.option("--context", default=None, help="kubeconfig context.")
@click.option("--field-manager", default=FIELD_MANAGER, help="Server-side apply field manager name.")
@click.option("--concurrency", default=8, type=click.IntRange(1, 64), help="Parallel API requests in a pass.")
@click.option("--name", "inv_name", default=None, envvar="GITOPS_SYNC_NAME",
              help="ApplySet (inventory) name; default from --repo/--path.")
@click.option("--inventory-namespace", default=None, help="Namespace of the ApplySet parent (default: -n).")
@click.option("--self-heal/--detect-only", default=True,
              help="Correct drift as soon as the watch shows it, or only report it (never write).")
@click.option("--prune", is_flag=True, help="Delete objects this source applied that have left Git "
              "(never after a failed fetch or render).")
@click.option("--allow-empty", is_flag=True, help="With --prune: allow pruning everything when Git renders nothing.")
@click.option("--on-conflict", type=click.Choice([p.value for p in ConflictPolicy]), default="force",
              help=_CONFLICT_HELP)
@click.option("--interval", default=60.0, type=click.FloatRange(0), help="Seconds between Git polls "
              "(±10% jitter; 0 = no polling). Local paths are also watched for changes.")
@click.option("--resync", default=600.0, type=click.FloatRange(0), help="Seconds between full passes over "
              "every object, whatever the events said (0 = never).")
@click.option("--debounce", default=0.2, type=click.FloatRange(0), help="Quiet period after file changes "
              "in a local repository before re-rendering.")
@click.option("--http-addr", default=":8080", help="HOST:PORT for /healthz /readyz /metrics /status and "
              "POST /hooks/git.")
@click.option("--webhook-secret-file", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help=f"Secret for POST /hooks/git (GitHub X-Hub-Signature-256 or GitLab X-Gitlab-Token); "
              f"else ${WEBHOOK_SECRET_ENV}; without one the webhook is off.")
@click.option("--leader-elect", is_flag=True, help="Elect a leader on a coordination.k8s.io Lease; only the "
              "leader writes (run several replicas).")
@click.option("--leader-elect-namespace", default=None, help="Namespace of the Lease (default: the pod's "
              "namespace in a cluster, else the inventory namespace).")
@click.option("--leader-elect-identity", default=None, help="This replica's identity (default: hostname_random).")
@click.option("--lease-duration", default=15.0, type=click.FloatRange(1), help="Seconds a Lease holds "
              "without renewal before a follower may take it.")
@click.option("--renew-deadline", default=10.0, type=click.FloatRange(0.5), help="Seconds the leader keeps "
              "writing without a successful renewal.")
@click.option("--retry-period", default=2.0, type=click.FloatRange(0.1), help="Seconds between Lease attempts.")
@click.option("--shutdown-grace", default=10.0, type=click.FloatRange(0), help="Seconds SIGTERM waits for "
              "the pass in flight before abandoning it.")
@click.option("--log-format", type=click.Choice(["auto", "json", "console"]), default=None,
              help="Logs on stderr: JSON unless stderr is a terminal (auto).  [default: auto]")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default=None,
              help="[default: info]")
@click.pass_context
def run(ctx: click.Context, repo: str, revision: str | None, subpath: str | None, cache_dir: Path | None,
        helm_values: tuple[Path, ...], helm_release: str | None, namespace: str, kubeconfig: Path | None,
        context: str | None, field_manager: str, concurrency: int, inv_name: str | None,
        inventory_namespace: str | None, self_heal: bool, prune: bool, allow_empty: bool,
        on_conflict: str, interval: float, resync: float, debounce: float, http_addr: str,
        webhook_secret_file: Path | None, leader_elect: bool, leader_elect_namespace: str | None,
        leader_elect_identity: str | None, lease_duration: float, renew_deadline: float, retry_period: float,
        shutdown_grace: float, log_format: str | None, log_level: str | None) -> None:
    """Keep the cluster equal to the repository for as long as it runs (the daemon).

    Level-triggered: watch events, Git polls, file events and webhooks only queue work; every pass
    recomputes desired vs live from the watch cache. Drift and field fights are reported in the log,
    as Kubernetes Events, on /status and /metrics. SIGTERM finishes the pass, releases the Lease, exits 0.
    """
    _configure_logging(ctx, log_format, log_level)
    try:
        policy = ConflictPolicy(on_conflict)
        leader = LeaderConfig(lease_duration, renew_deadline, retry_period)
        secret = load_webhook_secret(webhook_secret_file)
    except (ValueError, GitOpsError) as exc:
        raise click.UsageError(str(exc)) from exc
    opts = DaemonOptions(
        source=SourceOptions(repo=repo, revision=revision, path=subpath, cache_dir=cache_dir,
                             render=RenderOptions(helm_values=tuple(helm_values), helm_release=helm_release,
                                                  namespace=namespace)),
        pass_opts=PassOptions(namespace=namespace, prune=prune, allow_empty=allow_empty, policy=policy,
                              name=inv_name, inventory_namespace=inventory_namespace),
        self_heal=self_heal, interval=interval, resync=resync, debounce=debounce, http_addr=http_addr,
        webhook_secret=secret, kubeconfig=kubeconfig, context=context, field_manager=field_manager,
        concurrency=concurrency, leader_elect=leader_elect,
        leader_namespace=leader_elect_namespace or _pod_namespace(),
        identity=leader_elect_identity or default_identity(), leader=leader, shutdown_grace=shutdown_grace,
    )
    try:
        daemon = Daemon(opts)
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
    while not stop.wait(1.0):
        pass
    daemon.stop()
    sys.exit(0)


def _configure_logging(ctx: click.Context, log_format: str | None, log_level: str | None) -> None:
    """A daemon's log is its report: info by default, unless a level was chosen (here or on the group)."""
    parent = ctx.parent
    group_format = parent.params.get("log_format") if parent is not None else None
    fmt = log_format or (str(group_format) if group_format else "auto")
    if log_level is None:
        wrapper = structlog.get_config().get("wrapper_class")
        current = getattr(wrapper, "get_effective_level", None)
        level_now = current(None) if callable(current) else logging.WARNING
        if level_now != logging.WARNING:  # the group's default is warning: anything else was asked for
            if log_format is None:
                return
            log_level = logging.getLevelName(level_now).lower()
    logsetup.configure(fmt, log_level or "info")


def _pod_namespace() -> str | None:
    """In a cluster the Lease lives in the pod's own namespace, which the ServiceAccount can write."""
    env = os.environ.get("POD_NAMESPACE")
    if env:
        return env
    try:
        return _SA_NAMESPACE.read_text().strip() or None
    except OSError:
        return None
