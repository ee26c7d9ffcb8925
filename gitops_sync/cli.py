"""Command line: `sync` (CI), `diff` (drift report), `render`, `run` (daemon).

Exit codes follow `kubectl diff`: 0 in sync / applied cleanly, 1 differences or unresolved
conflicts, 2 any error. Reports go to stdout, logs to stderr.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import click
import structlog
from rich.console import Console
from rich.progress import Progress

from gitops_sync import FIELD_MANAGER, __version__, report
from gitops_sync import log as logsetup
from gitops_sync.apply.manager import ConflictPolicy
from gitops_sync.cluster.client import Client
from gitops_sync.daemon import command as daemon_command
from gitops_sync.engine import Engine, PassOptions, SourceOptions, default_inventory_name, load
from gitops_sync.errors import GitOpsError
from gitops_sync.plan.changeset import ChangeSet, Entry
from gitops_sync.plan.masking import mask_secret
from gitops_sync.render import RenderOptions, to_yaml

F = TypeVar("F", bound=Callable[..., Any])
log = structlog.get_logger("gitops_sync")


def _source_options(fn: F) -> F:
    opts = [
        click.option(
            "--repo",
            required=True,
            envvar="GITOPS_SYNC_REPO",
            help="Git URL or local path (work tree or plain directory).",
        ),
        click.option(
            "--revision", default=None, help="Branch, tag or commit SHA (default: remote HEAD / the work tree as is)."
        ),
        click.option("--path", "subpath", default=None, help="Sub-directory of the repository to render."),
        click.option("--cache-dir", type=click.Path(path_type=Path), default=None, help="Where clones are kept."),
        click.option(
            "--helm-values",
            multiple=True,
            type=click.Path(path_type=Path),
            help="Values file for every Helm chart (repeatable).",
        ),
        click.option(
            "--helm-release", default=None, help="Release name for Helm charts (default: the chart directory name)."
        ),
        click.option(
            "-n",
            "--namespace",
            default="default",
            show_default=True,
            help="Namespace for namespaced objects that name none.",
        ),
    ]
    for o in reversed(opts):
        fn = o(fn)
    return fn


def _cluster_options(fn: F) -> F:
    opts = [
        click.option(
            "--kubeconfig",
            type=click.Path(path_type=Path),
            default=None,
            envvar="KUBECONFIG",
            help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster).",
        ),
        click.option("--context", default=None, help="kubeconfig context."),
        click.option(
            "--field-manager", default=FIELD_MANAGER, show_default=True, help="Server-side apply field manager name."
        ),
        click.option(
            "--concurrency", default=8, show_default=True, type=click.IntRange(1, 64), help="Parallel API requests."
        ),
        click.option(
            "--name",
            "inv_name",
            default=None,
            help="ApplySet (inventory) name; default derived from --repo and --path.",
        ),
        click.option(
            "--inventory-namespace", default=None, help="Namespace of the ApplySet parent ConfigMap (default: -n)."
        ),
    ]
    for o in reversed(opts):
        fn = o(fn)
    return fn


def _output_options(fn: F) -> F:
    opts = [
        click.option("-o", "--output", type=click.Choice(report.FORMATS), default="table", show_default=True),
        click.option("-v", "--verbose", is_flag=True, help="Also list unchanged objects."),
    ]
    for o in reversed(opts):
        fn = o(fn)
    return fn


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


_log_settings = {"format": "auto", "level": "warning"}


def _set_log(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """Accept --log-format/--log-level before or after the subcommand."""
    if value is not None:
        _log_settings["format" if param.name == "log_format" else "level"] = value
    logsetup.configure(_log_settings["format"], _log_settings["level"])


def _log_options(fn: F) -> F:
    fn = click.option(
        "--log-level",
        type=click.Choice(["debug", "info", "warning", "error"]),
        default=None,
        expose_value=False,
        callback=_set_log,
        help="Log level (default warning).",
    )(fn)
    return click.option(
        "--log-format",
        type=click.Choice(["auto", "json", "console"]),
        default=None,
        expose_value=False,
        callback=_set_log,
        help="Logs on stderr: JSON when not a terminal (auto), or forced.",
    )(fn)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="gitops-sync")
@_log_options
def main() -> None:
    """Keep a Kubernetes cluster equal to a Git repository through server-side apply."""


def _source(
    repo: str,
    revision: str | None,
    subpath: str | None,
    cache_dir: Path | None,
    helm_values: tuple[Path, ...],
    helm_release: str | None,
    namespace: str,
) -> SourceOptions:
    return SourceOptions(
        repo=repo,
        revision=revision,
        path=subpath,
        cache_dir=cache_dir,
        render=RenderOptions(helm_values=tuple(helm_values), helm_release=helm_release, namespace=namespace),
    )


def _run_pass(
    src: SourceOptions,
    opts: PassOptions,
    *,
    apply: bool,
    kubeconfig: Path | None,
    context: str | None,
    field_manager: str,
    concurrency: int,
    output: str,
) -> ChangeSet:
    checkout, objects = load(src)  # before any cluster access: a broken source never touches the cluster
    log.info("rendered", revision=checkout.revision, objects=len(objects))
    opts.name = opts.name or default_inventory_name(src.repo, src.path)
    with Client(kubeconfig, context, pool_size=max(concurrency * 2, 10)) as client:
        engine = Engine(client, field_manager=field_manager, concurrency=concurrency)
        with _progress(enabled=apply and output == "table" and sys.stderr.isatty(), total=len(objects)) as tick:
            cs = engine.run(checkout, engine.resolve(objects, opts), opts, apply=apply, on_entry=tick)
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
@_log_options
@_source_options
@_cluster_options
@_output_options
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
    repo: str,
    revision: str | None,
    subpath: str | None,
    cache_dir: Path | None,
    helm_values: tuple[Path, ...],
    helm_release: str | None,
    namespace: str,
    kubeconfig: Path | None,
    context: str | None,
    field_manager: str,
    concurrency: int,
    inv_name: str | None,
    inventory_namespace: str | None,
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
    src = _source(repo, revision, subpath, cache_dir, helm_values, helm_release, namespace)
    opts = PassOptions(
        namespace=namespace,
        prune=prune,
        allow_empty=allow_empty,
        dry_run=dry_run,
        policy=ConflictPolicy(on_conflict),
        wait=wait,
        timeout=timeout,
        name=inv_name,
        inventory_namespace=inventory_namespace,
    )
    cs = _run_pass(
        src,
        opts,
        apply=True,
        kubeconfig=kubeconfig,
        context=context,
        field_manager=field_manager,
        concurrency=concurrency,
        output=output,
    )
    report.write(cs, output, sys.stdout, color=None if sys.stdout.isatty() else False, verbose=verbose)
    sys.exit(report.exit_code_sync(cs))


@main.command()
@_log_options
@_source_options
@_cluster_options
@_output_options
@click.option("--prune", is_flag=True, help="Also list objects that --prune would delete.")
@_exits_2
def diff(
    repo: str,
    revision: str | None,
    subpath: str | None,
    cache_dir: Path | None,
    helm_values: tuple[Path, ...],
    helm_release: str | None,
    namespace: str,
    kubeconfig: Path | None,
    context: str | None,
    field_manager: str,
    concurrency: int,
    inv_name: str | None,
    inventory_namespace: str | None,
    output: str,
    verbose: bool,
    prune: bool,
) -> None:
    """Drift and field-ownership report; changes nothing. Exit 0 in sync, 1 differences/conflicts, 2 error."""
    src = _source(repo, revision, subpath, cache_dir, helm_values, helm_release, namespace)
    opts = PassOptions(
        namespace=namespace,
        prune=prune,
        allow_empty=True,
        dry_run=True,
        name=inv_name,
        inventory_namespace=inventory_namespace,
    )
    cs = _run_pass(
        src,
        opts,
        apply=False,
        kubeconfig=kubeconfig,
        context=context,
        field_manager=field_manager,
        concurrency=concurrency,
        output=output,
    )
    report.write(cs, output, sys.stdout, color=None if sys.stdout.isatty() else False, verbose=verbose)
    sys.exit(report.exit_code_diff(cs))


@main.command()
@_log_options
@_source_options
@click.option("--show-secrets", is_flag=True, help="Print Secret values (masked as *** by default).")
@_exits_2
def render(
    repo: str,
    revision: str | None,
    subpath: str | None,
    cache_dir: Path | None,
    helm_values: tuple[Path, ...],
    helm_release: str | None,
    namespace: str,
    show_secrets: bool,
) -> None:
    """Print the desired objects as multi-document YAML (no cluster needed)."""
    checkout, objects = load(_source(repo, revision, subpath, cache_dir, helm_values, helm_release, namespace))
    manifests = [o.manifest if show_secrets else mask_secret(o.manifest) for o in objects]
    click.echo(f"# revision: {checkout.revision or '(plain directory)'}")
    click.echo(to_yaml(manifests), nl=False)


main.add_command(daemon_command.run)
