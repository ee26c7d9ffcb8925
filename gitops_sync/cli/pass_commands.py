"""`sync` and `diff`: one pass against the cluster, its report and its exit code.

Their flags become a `PassOptions` for `Engine.run`; the time limits (`Budget`) and the source's Lease
(`LockArgs`) are the command's own. The change set goes to `output.write`.
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, NoReturn

import click

from gitops_sync.cli.attempt import Attempt, describe_unexpected, load_source, start_attempt
from gitops_sync.cli.group import ENV_EPILOG
from gitops_sync.cli.output import F, output_options, progress, stdout_reader_may_leave, write
from gitops_sync.conventions import ConflictPolicy
from gitops_sync.errors import GitOpsError
from gitops_sync.log import get_logger
from gitops_sync.options import (
    DURATION,
    ClusterArgs,
    LogChoices,
    conflict_option,
    log_options,
    multi_cluster_options,
    safety_options,
    source_options,
)

# The pipeline (engine, report, cluster client) is imported by the command that runs it, inside its
# function: `--version`, `--help` and shell completion start in ~30 ms instead of ~0.1 s.
if TYPE_CHECKING:
    from gitops_sync.cluster.client import Client
    from gitops_sync.cluster.connection import ClusterConnection
    from gitops_sync.engine import PassOptions, SourceOptions
    from gitops_sync.plan.changeset import ChangeSet
    from gitops_sync.plan.planner import Target
    from gitops_sync.resource import DesiredObject
    from gitops_sync.source import Checkout

    Loaded = tuple[Checkout, list[DesiredObject]]

log = get_logger("gitops_sync")


@dataclass(frozen=True)
class Budget:
    """Time limits of one `sync`/`diff`: per API request, and for the whole command (None: no limit)."""

    request_timeout: float
    deadline: float | None
    started: float


def budget_options(fn: F) -> F:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kw: Any) -> Any:
        timeout, deadline = kw.pop("request_timeout"), kw.pop("deadline")
        if timeout <= 0 or (deadline is not None and deadline <= 0):
            raise click.BadParameter("must be more than 0", param_hint="--request-timeout/--deadline")
        kw["budget"] = Budget(timeout, deadline, time.monotonic())
        return fn(*args, **kw)

    wrapper = click.option(
        "--deadline",
        type=DURATION,
        default=None,
        help="Time for the whole command (fetch, plan, apply, prune, wait): 90s, 5m or seconds. Past it nothing "
        "more is sent, the rest is reported 'not attempted', nothing is pruned, exit 2. Default: no limit.",
    )(wrapper)
    return click.option(  # type: ignore[return-value]
        "--request-timeout",
        type=DURATION,
        default="30s",
        show_default=True,
        help="Time for one API request. An unanswered request makes the tool probe /readyz; if that fails "
        "too, every remaining request fails at once ('not attempted') instead of waiting its own timeout.",
    )(wrapper)


_safety_options = safety_options(
    "Take over objects that are members of another ApplySet (default: leave them, report `shared`)."
)


@dataclass(frozen=True)
class LockArgs:
    """`sync`'s per-source Lease: how long its first write waits for it, and where it lives."""

    timeout: float
    namespace: str | None  # None: the inventory's (where the daemon keeps it without --leader-elect-namespace)


def _lock_options(fn: F) -> F:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kw: Any) -> Any:
        kw["lock"] = LockArgs(kw.pop("lock_timeout"), kw.pop("lock_namespace"))
        return fn(*args, **kw)

    wrapper = click.option(
        "--lock-namespace",
        default=None,
        metavar="NS",
        help="Namespace of the source's Lease: the daemon's --leader-elect-namespace when it runs with one "
        "(default: the inventory namespace).",
    )(wrapper)
    return click.option(  # type: ignore[return-value]
        "--lock-timeout",
        type=DURATION,
        default="5m",
        show_default=True,
        help="How long the first write waits for the source's Lease while another run (a sync, the daemon) "
        "holds it; then exit 2 naming the holder. 0: do not wait.",
    )(wrapper)


@dataclass(frozen=True)
class ClusterPass:
    """One cluster's part of a `sync`/`diff`: which context, which cluster it reached, its change set."""

    context: str  # "" for the kubeconfig's current context
    server: str  # the API server URL ("" when the connection could not be made)
    cluster_id: str  # its kube-system UID ("" unknown)
    cs: ChangeSet


def _load(attempt: Attempt, src: SourceOptions, opts: PassOptions, cluster: ClusterArgs, budget: Budget) -> Loaded:
    """Fetch and render once, whatever the number of clusters; name the inventory in the options."""
    from gitops_sync.engine import inventory_of

    attempt.logs.configure()
    if budget.deadline is not None:
        src = replace(src, timeout=min(src.timeout, budget.deadline))
    checkout, objects = load_source(attempt, src)
    log.info("rendered", revision=checkout.revision, objects=len(objects))
    opts.name = cluster.name  # None: the engine derives it from the repository and --path
    opts.inventory_namespace = cluster.inventory_namespace
    attempt.inventory = inventory_of(checkout, opts)
    return checkout, objects


@dataclass(frozen=True)
class _Run:
    """What every cluster's pass of one command shares: the rendered source, the options, the limits."""

    attempt: Attempt
    loaded: Loaded
    opts: PassOptions
    budget: Budget
    lock: LockArgs | None
    apply: bool


def _pass_on(run: _Run, cluster: ClusterArgs, *, bars_allowed: bool = True) -> ClusterPass:
    """One pass against the cluster of `cluster.context`, through a connection of its own (its pool, breaker,
    discovery: cluster/connection.py), recording that cluster on the inventory."""
    from gitops_sync.cluster.connection import ClusterConnection
    from gitops_sync.engine import Engine
    from gitops_sync.errors import ApiTimeoutError, ApiUnavailableError

    attempt, opts, budget, lock, apply = run.attempt, run.opts, run.budget, run.lock, run.apply
    checkout, objects = run.loaded
    on_terminal = bars_allowed and attempt.output == "table" and sys.stderr.isatty()
    pool = max(cluster.concurrency * 2, 10)
    with ClusterConnection.open(
        cluster.kubeconfig, cluster.context, pool_size=pool, timeout=budget.request_timeout
    ) as conn:
        client = conn.client
        client.set_deadline(budget.deadline, started=budget.started)
        engine = Engine(
            client, field_manager=cluster.field_manager, concurrency=cluster.concurrency, discovery=conn.discovery
        )
        targets = engine.resolve(objects, opts)  # the first cluster access: a server down fails here, as ever
        engine.cluster_id = cluster_id = _cluster_id(conn)

        def one_pass(targets: list[Target]) -> ChangeSet:
            with progress(enabled=apply and on_terminal, applying=len(targets), waiting=len(targets)) as bars:
                try:
                    return engine.run(checkout, targets, opts, apply=apply, on_entry=bars[0], on_ready=bars[1])
                except (ApiUnavailableError, ApiTimeoutError) as exc:  # before any object was sent
                    return engine.not_attempted(checkout, targets, opts, exc, apply=apply)

        with _source_lock(client, lock if apply and not opts.dry_run else None, attempt.inventory) as (stale, replan):
            try:
                cs = one_pass(targets)
            except stale:  # nothing was written: the first write found the Lease taken since the pass began
                log.info("another run held the source's Lease while this one read: planning again under it")
                replan()
                # Fresh targets: a pass writes its bookkeeping into them from what it read (now stale).
                cs = one_pass(engine.resolve(objects, opts))
        stats = client.stats
        log.info("requests", reads=stats.reads, writes=stats.writes, dry_runs=stats.dry_runs, throttled=stats.throttled)
    return ClusterPass(cluster.context or "", client.host, cluster_id, cs)


def _cluster_id(conn: ClusterConnection) -> str:
    """The cluster's kube-system UID, "" when it cannot be read (no permission; the server gone since
    discovery: the pass's own requests report that)."""
    from gitops_sync.errors import ClusterError

    try:
        return conn.identity().uid
    except ClusterError as exc:
        log.info("cluster identity unknown", reason=str(exc))
        return ""


@contextmanager
def _source_lock(
    client: Client, lock: LockArgs | None, inventory: tuple[str, str, str]
) -> Iterator[tuple[type[Exception], Callable[[], None]]]:
    """While a `sync` that may write runs: its source's Lease, taken by the first write (cluster/lease.py).

    Yields the exception on which the pass is planned again (another run held the Lease while this one
    read the cluster) and what to call before it is; without a lock (diff, --dry-run) one never raised."""
    if lock is None:
        yield _NeverRaised, lambda: None
        return
    from gitops_sync.cluster.lease import (
        ApiLeaseStore,
        LeaderElector,
        LeaseChanged,
        SourceLock,
        cli_identity,
        lease_name,
    )

    name, inventory_namespace, _identity = inventory
    namespace = lock.namespace or inventory_namespace
    store = ApiLeaseStore(client, namespace, lease_name(name, inventory_namespace, namespace))
    elector = LeaderElector(store, cli_identity())
    held = SourceLock(elector, timeout=lock.timeout, exempt=store.owns, namespace=namespace)
    held.observe()
    client.before_write = held.before_write
    try:
        yield LeaseChanged, held.replan
    finally:
        client.before_write = None
        held.release()
        if held.replans or held.waited:
            log.info("source lease", lease=held.where, waited=round(held.waited, 2), replans=held.replans)


class _NeverRaised(Exception):
    """What `_source_lock` yields when there is no Lease: no pass is ever planned again."""


def _report_pass(
    command: str,
    logs: LogChoices,
    source: SourceOptions,
    cluster: ClusterArgs,
    budget: Budget,
    opts: PassOptions,
    output: str,
    verbose: bool,
    lock: LockArgs | None = None,
) -> NoReturn:
    """One pass of `sync` (applies) or `diff` (dry run only), its report on stdout, its exit code."""
    from gitops_sync import report

    apply = command == "sync"
    if len(cluster.contexts) > 1 and output == "html":
        raise click.BadParameter("one page per cluster: run once per --context for html", param_hint="-o html")
    attempt = start_attempt(command, logs=logs, output=output, source=source, dry_run=opts.dry_run)
    run = _Run(attempt, _load(attempt, source, opts, cluster, budget), opts, budget, lock, apply)
    color = None if sys.stdout.isatty() else False
    if len(cluster.contexts) <= 1:
        cs = _pass_on(run, cluster).cs
        code = _exit_code(cs, apply=apply)
        with stdout_reader_may_leave(code):
            write(cs, output, sys.stdout, color=color, verbose=verbose)
        sys.exit(code)
    passes = _on_every_cluster(run, cluster)
    codes = [_exit_code(p.cs, apply=apply) for p in passes]
    code = max(codes)  # the worst of the clusters: 2 an error anywhere, else 1 differences anywhere
    groups = [(_cluster_head(p, c), p.cs) for p, c in zip(passes, codes, strict=True)]
    with stdout_reader_may_leave(code):
        report.write_clusters(groups, output, sys.stdout, color=color, verbose=verbose, exit_code=code)
    sys.exit(code)


def _exit_code(cs: ChangeSet, *, apply: bool) -> int:
    from gitops_sync import report

    return report.exit_code_sync(cs) if apply else report.exit_code_diff(cs)


def _cluster_head(p: ClusterPass, code: int) -> dict[str, Any]:
    """What the report says of one cluster before its change set (and `-o json` as its fields)."""
    return {"context": p.context, "server": p.server, "clusterId": p.cluster_id, "exitCode": code}


def _on_every_cluster(run: _Run, cluster: ClusterArgs) -> list[ClusterPass]:
    """One pass per --context, side by side (a thread each, a connection each): a cluster that is down, hung
    or refuses the kubeconfig ends in its own error report (exit 2) and never stops or slows the others."""
    from concurrent.futures import ThreadPoolExecutor

    def on(context: str) -> ClusterPass:
        try:
            one = replace(cluster, context=context, contexts=(context,))
            return _pass_on(replace(run, opts=replace(run.opts)), one, bars_allowed=False)
        except Exception as exc:  # any failure is this cluster's report, never the others'
            ours = isinstance(exc, GitOpsError)
            what = str(exc) if ours else describe_unexpected(exc)
            message = run.attempt.mask(f"context {context}: {what}", ours=ours)
            click.echo(f"error: {message}", err=True)
            return ClusterPass(context, "", "", run.attempt.failed(message))

    with ThreadPoolExecutor(max_workers=len(cluster.contexts), thread_name_prefix="cluster") as pool:
        return list(pool.map(on, cluster.contexts))


@click.command(epilog=ENV_EPILOG)
@log_options
@source_options
@multi_cluster_options
@output_options
@budget_options
@click.option("--prune", is_flag=True, help="Delete objects this source applied earlier that have left Git.")
@click.option(
    "--allow-empty", is_flag=True, help="With --prune: allow pruning everything when the source renders nothing."
)
@click.option("--dry-run", is_flag=True, help="Plan only (server-side dry run); change nothing.")
@conflict_option(
    "report", "report: apply the rest, leave contested fields to their owner; force: take them; skip: leave the object."
)
@_safety_options
@click.option(
    "--allow-rollback",
    is_flag=True,
    help="Apply a commit older than one the inventory records (an ancestor of it); refused by default.",
)
@_lock_options
@click.option("--wait", is_flag=True, help="Wait until applied objects are healthy (kstatus rules).")
@click.option(
    "--timeout",
    type=DURATION,
    default="5m",
    show_default=True,
    help="How long --wait waits: 90s, 5m, 1h30m or plain seconds.",
)
def sync(
    logs: LogChoices,
    source: SourceOptions,
    cluster: ClusterArgs,
    budget: Budget,
    namespace: str,
    output: str,
    verbose: bool,
    prune: bool,
    allow_empty: bool,
    dry_run: bool,
    on_conflict: str,
    adopt_shared: bool,
    prune_cascade: bool,
    allow_rollback: bool,
    lock: LockArgs,
    wait: bool,
    timeout: float,
) -> None:
    """Apply the repository to the cluster (one pass, for CI). Exit 0 clean, 1 conflicts left, 2 error."""
    from gitops_sync.engine import PassOptions

    opts = PassOptions(
        namespace=namespace,
        prune=prune,
        allow_empty=allow_empty,
        dry_run=dry_run,
        policy=ConflictPolicy(on_conflict),
        wait=wait,
        timeout=timeout,
        adopt_shared=adopt_shared,
        prune_cascade=prune_cascade,
        ignore=cluster.ignore,
        refuse_older=not allow_rollback,
    )
    _report_pass("sync", logs, source, cluster, budget, opts, output, verbose, lock)


@click.command(epilog=ENV_EPILOG)
@log_options
@source_options
@multi_cluster_options
@output_options
@budget_options
@click.option("--prune", is_flag=True, help="Also list objects that --prune would delete.")
@_safety_options
def diff(
    logs: LogChoices,
    source: SourceOptions,
    cluster: ClusterArgs,
    budget: Budget,
    namespace: str,
    output: str,
    verbose: bool,
    prune: bool,
    adopt_shared: bool,
    prune_cascade: bool,
) -> None:
    """Drift and field-ownership report; changes nothing. Exit 0 in sync, 1 differences/conflicts, 2 error."""
    from gitops_sync.engine import PassOptions

    opts = PassOptions(
        namespace=namespace,
        prune=prune,
        allow_empty=True,
        dry_run=True,
        adopt_shared=adopt_shared,
        prune_cascade=prune_cascade,
        ignore=cluster.ignore,
    )
    _report_pass("diff", logs, source, cluster, budget, opts, output, verbose)
