"""Command line: `sync` (CI), `diff` (drift report), `render`, `run` (daemon).

Exit codes follow `kubectl diff`: 0 in sync / applied cleanly, 1 differences or unresolved
conflicts, 2 any error. Reports go to stdout, logs to stderr.
"""

from __future__ import annotations

import functools
import importlib
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import click
import structlog
from rich.console import Console
from rich.progress import Progress

from gitops_sync import __version__, report
from gitops_sync.apply.manager import ConflictPolicy
from gitops_sync.cluster.client import Client
from gitops_sync.engine import Engine, PassOptions, SourceOptions, load
from gitops_sync.errors import ApiTimeoutError, ApiUnavailableError, GitOpsError
from gitops_sync.options import ClusterArgs, cluster_options, log_options, setup_logging, source_options
from gitops_sync.plan.changeset import ChangeSet, Entry
from gitops_sync.plan.masking import mask_secret
from gitops_sync.render import to_yaml

F = TypeVar("F", bound=Callable[..., Any])
log = structlog.get_logger("gitops_sync")


def _output_options(fn: F) -> F:
    fn = click.option("-v", "--verbose", is_flag=True, help="Also list unchanged objects.")(fn)
    return click.option("-o", "--output", type=click.Choice(report.FORMATS), default="table", show_default=True)(fn)


@dataclass(frozen=True)
class _Budget:
    """Time limits of one `sync`/`diff`: per API request, and for the whole command (None: no limit)."""

    request_timeout: float
    deadline: float | None
    started: float


def _budget_options(fn: F) -> F:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kw: Any) -> Any:
        kw["budget"] = _Budget(kw.pop("request_timeout"), kw.pop("deadline"), time.monotonic())
        return fn(*args, **kw)

    wrapper = click.option(
        "--deadline",
        type=click.FloatRange(min=1),
        default=None,
        help="Seconds for the whole command (fetch, plan, apply, prune, wait); past it nothing more is sent, "
        "the rest is reported 'not attempted' and the exit code is 2. Default: no limit.",
    )(wrapper)
    return click.option(  # type: ignore[return-value]
        "--request-timeout",
        type=click.FloatRange(min=0.1),
        default=30.0,
        show_default=True,
        help="Seconds for one API request. An unanswered request makes the tool probe /readyz; if that fails "
        "too, every remaining request fails at once ('not attempted') instead of waiting.",
    )(wrapper)


@contextmanager
def _errors_exit_2() -> Iterator[None]:
    try:
        yield
    except GitOpsError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(2)


def _exits_2(fn: F) -> F:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with _errors_exit_2():
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


class _Commands(click.Group):
    """Imports the daemon only for `run`: prometheus, watchdog and the HTTP server cost a one-shot
    `sync` in CI ~0.1 s of start-up for nothing."""

    _lazy = {"run": ("gitops_sync.daemon.command", "run")}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self._lazy])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self._lazy:
            module, attr = self._lazy[cmd_name]
            command: click.Command = getattr(importlib.import_module(module), attr)
            return command
        return super().get_command(ctx, cmd_name)


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="gitops-sync")
@log_options
def main() -> None:
    """Keep a Kubernetes cluster equal to a Git repository through server-side apply."""


def _run_pass(
    src: SourceOptions, opts: PassOptions, cluster: ClusterArgs, budget: _Budget, *, apply: bool, output: str
) -> ChangeSet:
    setup_logging()
    if budget.deadline is not None:
        src = replace(src, timeout=min(src.timeout, budget.deadline))
    checkout, objects = load(src)  # before any cluster access: a broken source never touches the cluster
    log.info("rendered", revision=checkout.revision, objects=len(objects))
    opts.name = cluster.name  # None: the engine derives it from the repository and --path
    opts.inventory_namespace = cluster.inventory_namespace
    pool = max(cluster.concurrency * 2, 10)
    with Client(cluster.kubeconfig, cluster.context, pool_size=pool, timeout=budget.request_timeout) as client:
        client.set_deadline(budget.deadline, started=budget.started)
        engine = Engine(client, field_manager=cluster.field_manager, concurrency=cluster.concurrency)
        targets = engine.resolve(objects, opts)
        with _progress(enabled=apply and output == "table" and sys.stderr.isatty(), total=len(objects)) as tick:
            try:
                cs = engine.run(checkout, targets, opts, apply=apply, on_entry=tick)
            except (ApiUnavailableError, ApiTimeoutError) as exc:  # before any object was sent
                cs = engine.not_attempted(checkout, targets, opts, exc, apply=apply)
        log.info("requests", reads=client.stats.reads, writes=client.stats.writes, dry_runs=client.stats.dry_runs)
    return cs


@contextmanager
def _progress(*, enabled: bool, total: int) -> Iterator[Callable[[Entry], None] | None]:
    if not enabled or total < 20:
        yield None
        return
    with Progress(transient=True, console=Console(stderr=True)) as bar:
        task = bar.add_task("applying", total=total)
        yield lambda _entry: bar.advance(task)


@main.command()
@log_options
@source_options
@cluster_options
@_output_options
@_budget_options
@click.option("--prune", is_flag=True, help="Delete objects this source applied earlier that have left Git.")
@click.option(
    "--allow-empty", is_flag=True, help="With --prune: allow pruning everything when the source renders nothing."
)
@click.option("--dry-run", is_flag=True, help="Plan only (server-side dry run); change nothing.")
@click.option(
    "--on-conflict",
    type=click.Choice([p.value for p in ConflictPolicy]),
    default="report",
    show_default=True,
    help="report: apply the rest, leave contested fields to their owner; force: take them; skip: leave the object.",
)
@click.option("--wait", is_flag=True, help="Wait until applied objects are healthy (kstatus rules).")
@click.option("--timeout", default=300.0, show_default=True, help="Seconds to wait with --wait.")
@_exits_2
def sync(
    source: SourceOptions,
    cluster: ClusterArgs,
    budget: _Budget,
    namespace: str,
    output: str,
    verbose: bool,
    prune: bool,
    allow_empty: bool,
    dry_run: bool,
    on_conflict: str,
    wait: bool,
    timeout: float,
) -> None:
    """Apply the repository to the cluster (one pass, for CI). Exit 0 clean, 1 conflicts left, 2 error."""
    opts = PassOptions(
        namespace=namespace,
        prune=prune,
        allow_empty=allow_empty,
        dry_run=dry_run,
        policy=ConflictPolicy(on_conflict),
        wait=wait,
        timeout=timeout,
    )
    cs = _run_pass(source, opts, cluster, budget, apply=True, output=output)
    report.write(cs, output, sys.stdout, color=None if sys.stdout.isatty() else False, verbose=verbose)
    sys.exit(report.exit_code_sync(cs))


@main.command()
@log_options
@source_options
@cluster_options
@_output_options
@_budget_options
@click.option("--prune", is_flag=True, help="Also list objects that --prune would delete.")
@_exits_2
def diff(
    source: SourceOptions,
    cluster: ClusterArgs,
    budget: _Budget,
    namespace: str,
    output: str,
    verbose: bool,
    prune: bool,
) -> None:
    """Drift and field-ownership report; changes nothing. Exit 0 in sync, 1 differences/conflicts, 2 error."""
    opts = PassOptions(namespace=namespace, prune=prune, allow_empty=True, dry_run=True)
    cs = _run_pass(source, opts, cluster, budget, apply=False, output=output)
    report.write(cs, output, sys.stdout, color=None if sys.stdout.isatty() else False, verbose=verbose)
    sys.exit(report.exit_code_diff(cs))


@main.command()
@log_options
@source_options
@click.option("--show-secrets", is_flag=True, help="Print Secret values (masked as *** by default).")
@_exits_2
def render(source: SourceOptions, namespace: str, show_secrets: bool) -> None:
    """Print the desired objects as multi-document YAML (no cluster needed)."""
    setup_logging()
    checkout, objects = load(source)
    manifests = [o.manifest if show_secrets else mask_secret(o.manifest) for o in objects]
    click.echo(f"# revision: {checkout.revision or '(plain directory)'}")
    click.echo(to_yaml(manifests), nl=False)

