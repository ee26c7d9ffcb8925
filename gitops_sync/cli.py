"""Command line: `sync` (CI), `diff` (drift report), `render`, `run` (daemon).

Exit codes follow `kubectl diff`: 0 in sync / applied cleanly, 1 differences or unresolved
conflicts, 2 any error. Reports go to stdout, logs to stderr.
"""

from __future__ import annotations

import functools
import gc
import importlib
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn, TextIO, TypeVar

import click

from gitops_sync import __version__
from gitops_sync.conventions import REPORT_FORMATS, ConflictPolicy
from gitops_sync.errors import GitOpsError
from gitops_sync.log import get_logger
from gitops_sync.options import (
    DURATION,
    ClusterArgs,
    LogChoices,
    cluster_options,
    conflict_option,
    log_choices,
    log_options,
    safety_options,
    source_options,
)

# The pipeline (engine, report, cluster client, renderers) is imported by the command that runs it, inside
# its function: `--version`, `--help` and shell completion start in ~30 ms instead of ~0.1 s.
if TYPE_CHECKING:
    from gitops_sync.cluster.client import Client
    from gitops_sync.engine import PassOptions, SourceOptions
    from gitops_sync.plan.changeset import ChangeSet
    from gitops_sync.plan.masking import Redactor
    from gitops_sync.plan.planner import Target
    from gitops_sync.resource import DesiredObject, Manifest
    from gitops_sync.source import Checkout

F = TypeVar("F", bound=Callable[..., Any])
log = get_logger("gitops_sync")

_ENV_EPILOG = (
    "Environment: GITOPS_SYNC_REPO, GITOPS_SYNC_REVISION, GITOPS_SYNC_PATH, GITOPS_SYNC_NAMESPACE, "
    "GITOPS_SYNC_NAME, GITOPS_SYNC_INVENTORY_NAMESPACE, GITOPS_SYNC_FIELD_MANAGER, GITOPS_SYNC_CONTEXT and "
    "KUBECONFIG stand in for the flags; `run` reads every one of its flags as GITOPS_SYNC_<FLAG>. "
    'Shell completion: eval "$(_GITOPS_SYNC_COMPLETE=bash_source gitops-sync)" (zsh_source, fish_source).'
)


# report's formats, and html: the web page's templates (web/) as one self-contained file
OUTPUTS = (*REPORT_FORMATS, "html")


def _write(cs: ChangeSet, output: str, out: TextIO, **kwargs: Any) -> None:
    if output == "html":
        from gitops_sync import web  # jinja2: only for this format

        out.write(web.diff_html(cs.to_dict()))  # every object: a reader scrolls or searches
    else:
        from gitops_sync import report

        report.write(cs, output, out, **kwargs)


@contextmanager
def _stdout_reader_may_leave(code: int) -> Iterator[None]:
    """Writing the output for a reader that may stop early (`render | head`): a closed pipe ends the
    command with `code`, what it exits with anyway, and no message, as `git log | head` does. The reader
    chose to stop; that is no failure of ours ("BrokenPipeError ... failed unexpectedly" was)."""
    try:
        yield
        sys.stdout.flush()  # what is still buffered fails here, not at exit
    except BrokenPipeError:
        # The interpreter flushes stdout once more at exit and would print "Exception ignored ..."
        # for what is left in the buffer: from now on stdout goes to /dev/null.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
        except (OSError, ValueError):  # stdout is no file (a test runner's buffer): nothing is left to flush
            pass
        sys.exit(code)


def _output_options(fn: F) -> F:
    fn = click.option("-v", "--verbose", is_flag=True, help="Also list unchanged objects.")(fn)
    return click.option(
        "-o",
        "--output",
        type=click.Choice(OUTPUTS),
        default="table",
        show_default=True,
        help="Report on stdout: table (for people; colour and width follow the terminal), json (for jq; "
        "also on failure, with `errors` filled), markdown (pull-request comments) or html (one self-contained "
        "page for a CI artifact: no script, nothing fetched).",
    )(fn)


@dataclass(frozen=True)
class _Budget:
    """Time limits of one `sync`/`diff`: per API request, and for the whole command (None: no limit)."""

    request_timeout: float
    deadline: float | None
    started: float


def _budget_options(fn: F) -> F:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kw: Any) -> Any:
        timeout, deadline = kw.pop("request_timeout"), kw.pop("deadline")
        if timeout <= 0 or (deadline is not None and deadline <= 0):
            raise click.BadParameter("must be more than 0", param_hint="--request-timeout/--deadline")
        kw["budget"] = _Budget(timeout, deadline, time.monotonic())
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
class _LockArgs:
    """`sync`'s per-source Lease: how long its first write waits for it, and where it lives."""

    timeout: float
    namespace: str | None  # None: the inventory's (where the daemon keeps it without --leader-elect-namespace)


def _lock_options(fn: F) -> F:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kw: Any) -> Any:
        kw["lock"] = _LockArgs(kw.pop("lock_timeout"), kw.pop("lock_namespace"))
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


@dataclass
class _Attempt:
    """What a command knows so far, for its failure: the error document and masking the message."""

    command: str
    output: str = "table"
    source: SourceOptions | None = None
    checkout: Checkout | None = None
    dry_run: bool = False
    rendered: bool = False  # the Secret values are known (registered with `redact`)
    redact: Redactor = field(default_factory=lambda: _new_redactor())
    inventory: tuple[str, str, str] = ("", "", "")  # name, namespace, source identity, once known
    logs: LogChoices = field(default_factory=LogChoices)

    def mask(self, text: str, *, ours: bool) -> str:
        """`ours`: a message we wrote (already masked by design); else any quoted literal is masked too
        while the Secret values it might hold are not known yet."""
        from gitops_sync.plan.masking import mask_literals
        from gitops_sync.source import mask_url

        text = mask_url(self.redact(text))
        return text if ours or self.rendered else mask_literals(text)

    def failed(self, message: str) -> ChangeSet:
        """The report of a pass that ended in `message`: what was known, `errors` filled."""
        from gitops_sync.engine import source_label
        from gitops_sync.plan.changeset import ChangeSet

        src, co = self.source, self.checkout
        label = source_label(src.repo, src.path, src.revision) if src else ""
        name, namespace, identity = self.inventory
        return ChangeSet(
            revision=co.revision if co else "",
            source=label,
            errors=[message],
            dry_run=self.dry_run,
            inventory=name,
            inventory_namespace=namespace,
            source_identity=identity,
        )


def _new_redactor() -> Redactor:
    """An empty Redactor; gitops_sync.plan.masking is imported once a command starts, not by `--version`."""
    from gitops_sync.plan.masking import Redactor

    return Redactor()


def _attempt(command: str, **known: Any) -> _Attempt:
    """The attempt of the command running now, found again by the group when the command fails."""
    attempt = _Attempt(command, **known)
    click.get_current_context().meta[_ATTEMPT] = attempt
    return attempt


_ATTEMPT = "gitops_sync.attempt"
_PASS_THROUGH = (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort)


class _Commands(click.Group):
    """Imports the daemon only for `run`: prometheus, watchdog and the HTTP server cost a one-shot
    `sync` in CI ~0.1 s of start-up for nothing. Every failure of every command ends here: exit 2."""

    # name: (module, attribute, the first paragraph of its help: what `--help` lists without importing it;
    # tests/unit/cli/test_startup_imports.py holds each to the command's own help)
    _lazy: ClassVar[dict[str, tuple[str, str, str]]] = {
        "run": (
            "gitops_sync.daemon.command",
            "run",
            "Keep the cluster equal to the repository for as long as it runs (the daemon).",
        ),
        "get": (
            "gitops_sync.daemon.fleetctl",
            "get",
            "List GitSync objects with their status (Ready, revision, drift, conflicts, message).",
        ),
        "reconcile": (
            "gitops_sync.daemon.fleetctl",
            "reconcile",
            "Ask the controller to fetch and reconcile NAME now (annotation gitops-sync.io/reconcile-requested-at).",
        ),
        "suspend": (
            "gitops_sync.daemon.fleetctl",
            "suspend",
            "Stop reconciling NAME (spec.suspend=true): no fetch, no apply, no drift correction until resumed.",
        ),
        "resume": (
            "gitops_sync.daemon.fleetctl",
            "resume",
            "Reconcile NAME again (spec.suspend=false) and, unless --no-wait, wait for that pass (as `flux resume`).",
        ),
    }

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self._lazy])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self._lazy:
            module, attr, _ = self._lazy[cmd_name]
            command: click.Command = getattr(importlib.import_module(module), attr)
            return command
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """As click lists commands, with the lazy ones' summaries from `_lazy` (no daemon import)."""
        limit = formatter.width - 6 - max(len(name) for name in self.list_commands(ctx))
        rows = []
        for name in self.list_commands(ctx):
            if name in self._lazy:
                rows.append((name, click.Command(name, help=self._lazy[name][2]).get_short_help_str(limit)))
            elif (command := super().get_command(ctx, name)) is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except _PASS_THROUGH:
            raise  # usage errors: click prints them (exit 2) and --help/--version exit 0
        except GitOpsError as exc:
            attempt = _current(ctx)
            _fail(attempt, attempt.mask(str(exc), ours=True))
        except KeyboardInterrupt:
            _fail(_current(ctx), "interrupted")
        except Exception as exc:  # the last line of defence: never a raw traceback
            attempt = _current(ctx)
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            what = type(exc).__name__ + (f": {first}" if first else "")
            hint = "" if _debug(ctx) else " (--log-level debug prints the traceback)"
            if _debug(ctx):
                click.echo(_masked_traceback(attempt, exc), err=True, nl=False)
            _fail(attempt, f"gitops-sync {attempt.command} failed unexpectedly: {attempt.mask(what, ours=False)}{hint}")


def _masked_traceback(attempt: _Attempt, exc: BaseException) -> str:
    """Frames (our code: file, line, source) keep their quotes; exception messages are masked like the
    one-line error; known Secret values and URL credentials are masked everywhere."""
    chunks = []
    for chunk in traceback.TracebackException.from_exception(exc).format():
        frame = chunk.startswith(("  File ", "Traceback "))
        chunks.append(attempt.mask(chunk, ours=frame))
    return "".join(chunks)


def _current(ctx: click.Context) -> _Attempt:
    found = ctx.meta.get(_ATTEMPT)
    return found if isinstance(found, _Attempt) else _Attempt(ctx.invoked_subcommand or "gitops-sync")


def _fail(attempt: _Attempt, message: str) -> NoReturn:
    """One line on stderr; with -o json/markdown also the error document on stdout, so `jq` reads it."""
    click.echo(f"error: {message}", err=True)
    if attempt.output in ("json", "markdown", "html"):
        with _stdout_reader_may_leave(2):
            _write(attempt.failed(message), attempt.output, sys.stdout)
    sys.exit(2)


def _debug(ctx: click.Context) -> bool:
    return log_choices(ctx).level == "debug"


@click.group(
    cls=_Commands,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110},
    epilog=_ENV_EPILOG,
)
@click.version_option(__version__, prog_name="gitops-sync")
@log_options
def main(logs: LogChoices) -> None:
    """Keep a Kubernetes cluster equal to a Git repository through server-side apply."""
    # `logs`: the group's --log-* flags, already kept by log_options for the command to build on.


def _load(attempt: _Attempt, source: SourceOptions) -> tuple[Checkout, list[DesiredObject]]:
    """Fetch and render, then register the Secret values so that no later message can show them."""
    # A one-shot command keeps everything it renders and reads until it exits, and the cyclic collector's
    # full passes walk all of it again and again: with the default thresholds a plan of 20,000 objects
    # spent 4.3 CPU-s instead of 3.2 (5,000: 0.9 vs 0.8), the growth faster than linear. Our objects hold
    # no cycles worth collecting early, so the young generation is collected 140x less often.
    gc.set_threshold(100_000, 50, 100)
    from gitops_sync.engine import disk_render_cache, load

    # Before any cluster access: a broken source never touches the cluster.
    checkout, objects = load(source, disk_render_cache(source))
    attempt.checkout = checkout
    attempt.redact.add(o.manifest for o in objects)
    attempt.rendered = True
    return checkout, objects


def _run_pass(
    attempt: _Attempt,
    src: SourceOptions,
    opts: PassOptions,
    cluster: ClusterArgs,
    budget: _Budget,
    lock: _LockArgs | None,
    *,
    apply: bool,
) -> ChangeSet:
    from gitops_sync.cluster.client import Client
    from gitops_sync.engine import Engine, inventory_of
    from gitops_sync.errors import ApiTimeoutError, ApiUnavailableError

    attempt.logs.configure()
    if budget.deadline is not None:
        src = replace(src, timeout=min(src.timeout, budget.deadline))
    checkout, objects = _load(attempt, src)
    log.info("rendered", revision=checkout.revision, objects=len(objects))
    opts.name = cluster.name  # None: the engine derives it from the repository and --path
    opts.inventory_namespace = cluster.inventory_namespace
    attempt.inventory = inventory_of(checkout, opts)
    on_terminal = attempt.output == "table" and sys.stderr.isatty()
    pool = max(cluster.concurrency * 2, 10)
    with Client(cluster.kubeconfig, cluster.context, pool_size=pool, timeout=budget.request_timeout) as client:
        client.set_deadline(budget.deadline, started=budget.started)
        engine = Engine(client, field_manager=cluster.field_manager, concurrency=cluster.concurrency)
        targets = engine.resolve(objects, opts)

        def one_pass(targets: list[Target]) -> ChangeSet:
            with _progress(enabled=apply and on_terminal, applying=len(targets), waiting=len(targets)) as bars:
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
    return cs


@contextmanager
def _source_lock(
    client: Client, lock: _LockArgs | None, inventory: tuple[str, str, str]
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


_Tick = Callable[[Any], None]


@contextmanager
def _progress(*, enabled: bool, applying: int, waiting: int) -> Iterator[tuple[_Tick | None, _Tick | None]]:
    """Transient bars on stderr, a terminal only (never in a CI log or between JSON log lines): objects
    applied (for 20 or more), then objects ready under --wait (the bar appears with the first one)."""
    if not enabled:
        yield None, None
        return
    from rich.console import Console  # a terminal only: never imported for CI or `-o json`
    from rich.progress import Progress, TaskID

    with Progress(transient=True, console=Console(stderr=True)) as bar:
        applied = bar.add_task("applying", total=applying) if applying >= 20 else None
        ready: list[TaskID] = []

        def tick(_entry: Any) -> None:
            if applied is not None:
                bar.advance(applied)

        def on_ready(_key: Any) -> None:
            if not ready:
                ready.append(bar.add_task("waiting until healthy", total=waiting))
            bar.advance(ready[0])

        yield tick, on_ready


def _report_pass(
    command: str,
    logs: LogChoices,
    source: SourceOptions,
    cluster: ClusterArgs,
    budget: _Budget,
    opts: PassOptions,
    output: str,
    verbose: bool,
    lock: _LockArgs | None = None,
) -> NoReturn:
    """One pass of `sync` (applies) or `diff` (dry run only), its report on stdout, its exit code."""
    from gitops_sync import report

    apply = command == "sync"
    attempt = _attempt(command, logs=logs, output=output, source=source, dry_run=opts.dry_run)
    cs = _run_pass(attempt, source, opts, cluster, budget, lock, apply=apply)
    code = report.exit_code_sync(cs) if apply else report.exit_code_diff(cs)
    with _stdout_reader_may_leave(code):
        _write(cs, output, sys.stdout, color=None if sys.stdout.isatty() else False, verbose=verbose)
    sys.exit(code)


@main.command(epilog=_ENV_EPILOG)
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
    budget: _Budget,
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
    lock: _LockArgs,
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


@main.command(epilog=_ENV_EPILOG)
@log_options
@source_options
@cluster_options
@_output_options
@_budget_options
@click.option("--prune", is_flag=True, help="Also list objects that --prune would delete.")
@_safety_options
def diff(
    logs: LogChoices,
    source: SourceOptions,
    cluster: ClusterArgs,
    budget: _Budget,
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


@main.command(epilog=_ENV_EPILOG)
@log_options
@source_options
@click.option("--show-secrets", is_flag=True, help="Print Secret values (masked as *** by default).")
def render(logs: LogChoices, source: SourceOptions, namespace: str, show_secrets: bool) -> None:
    """Print the desired objects as multi-document YAML (no cluster needed)."""
    from gitops_sync.plan.masking import mask_secret
    from gitops_sync.render import to_yaml
    from gitops_sync.resource import ObjectKey

    attempt = _attempt("render", logs=logs, source=source)
    attempt.logs.configure()
    checkout, objects = _load(attempt, source)
    manifests = [o.manifest if show_secrets else mask_secret(o.manifest) for o in objects]
    cluster_scoped = _cluster_scoped_kinds(manifests)
    with _stdout_reader_may_leave(0):
        click.echo(f"# revision: {checkout.revision or '(plain directory)'}")
        click.echo(f"# namespace: {namespace} (-n: for namespaced objects that name none)")
        # charts from repositories (helm-chart.yaml): the version each range resolved to and the archive's digest
        for c in sorted({tuple(o.extra["chart"].values()) for o in objects if "chart" in o.extra}):
            click.echo(f"# chart: {c[1]} {c[2]} from {c[0]} ({c[3]})")
        for manifest in manifests:
            document = to_yaml([manifest])
            key = ObjectKey.of(manifest)
            if not key.namespace and (key.group, key.kind) not in cluster_scoped:
                head, sep, rest = document.partition("\n")
                document = f"{head}{sep}# namespace: {namespace} (from -n)\n{rest}"
            click.echo(document, nl=False)


# Built-in cluster-scoped kinds: `render` runs without a cluster, so it cannot ask discovery. A custom
# cluster-scoped kind is recognised when its CRD is in the same source.
_BUILTIN_CLUSTER_SCOPED = frozenset(
    {
        ("", "Namespace"),
        ("", "Node"),
        ("", "PersistentVolume"),
        ("", "ComponentStatus"),
        ("rbac.authorization.k8s.io", "ClusterRole"),
        ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
        ("apiextensions.k8s.io", "CustomResourceDefinition"),
        ("apiregistration.k8s.io", "APIService"),
        ("admissionregistration.k8s.io", "MutatingWebhookConfiguration"),
        ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration"),
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"),
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding"),
        ("storage.k8s.io", "StorageClass"),
        ("storage.k8s.io", "CSIDriver"),
        ("storage.k8s.io", "CSINode"),
        ("storage.k8s.io", "VolumeAttachment"),
        ("scheduling.k8s.io", "PriorityClass"),
        ("networking.k8s.io", "IngressClass"),
        ("node.k8s.io", "RuntimeClass"),
        ("flowcontrol.apiserver.k8s.io", "FlowSchema"),
        ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration"),
        ("certificates.k8s.io", "CertificateSigningRequest"),
    }
)


def _cluster_scoped_kinds(manifests: list[Manifest]) -> set[tuple[str, str]]:
    """(group, kind) of the built-in cluster-scoped kinds and of CRDs in the source with `scope: Cluster`."""
    out = set(_BUILTIN_CLUSTER_SCOPED)
    for m in manifests:
        spec = m.get("spec") if m.get("kind") == "CustomResourceDefinition" else None
        if isinstance(spec, dict) and spec.get("scope") == "Cluster":
            names = spec.get("names") or {}
            out.add((str(spec.get("group", "")), str(names.get("kind", "") if isinstance(names, dict) else "")))
    return out
