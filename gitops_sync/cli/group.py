"""The `gitops-sync` command group: lazy daemon commands, and the one place every failure ends (exit 2).

The commands themselves are in `pass_commands` (sync, diff), `render_command` and, imported only when
run, `gitops_sync.daemon` (run, get, reconcile, suspend, resume).
"""

from __future__ import annotations

import importlib
import sys
import traceback
from typing import Any, ClassVar, NoReturn

import click

from gitops_sync import __version__
from gitops_sync.cli.attempt import Attempt, current_attempt, describe_unexpected
from gitops_sync.cli.output import stdout_reader_may_leave, write
from gitops_sync.errors import GitOpsError
from gitops_sync.options import LogChoices, log_choices, log_options

ENV_EPILOG = (
    "Environment: GITOPS_SYNC_REPO, GITOPS_SYNC_REVISION, GITOPS_SYNC_PATH, GITOPS_SYNC_NAMESPACE, "
    "GITOPS_SYNC_NAME, GITOPS_SYNC_INVENTORY_NAMESPACE, GITOPS_SYNC_FIELD_MANAGER, GITOPS_SYNC_CONTEXT and "
    "KUBECONFIG stand in for the flags; `run` reads every one of its flags as GITOPS_SYNC_<FLAG>. "
    'Shell completion: eval "$(_GITOPS_SYNC_COMPLETE=bash_source gitops-sync)" (zsh_source, fish_source).'
)


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
            attempt = current_attempt(ctx)
            _fail(attempt, attempt.mask(str(exc), ours=True))
        except KeyboardInterrupt:
            _fail(current_attempt(ctx), "interrupted")
        except Exception as exc:  # the last line of defence: never a raw traceback
            attempt = current_attempt(ctx)
            what = describe_unexpected(exc)
            hint = "" if _debug(ctx) else " (--log-level debug prints the traceback)"
            if _debug(ctx):
                click.echo(_masked_traceback(attempt, exc), err=True, nl=False)
            _fail(attempt, f"gitops-sync {attempt.command} failed unexpectedly: {attempt.mask(what, ours=False)}{hint}")


def _masked_traceback(attempt: Attempt, exc: BaseException) -> str:
    """Frames (our code: file, line, source) keep their quotes; exception messages are masked like the
    one-line error; known Secret values and URL credentials are masked everywhere."""
    chunks = []
    for chunk in traceback.TracebackException.from_exception(exc).format():
        frame = chunk.startswith(("  File ", "Traceback "))
        chunks.append(attempt.mask(chunk, ours=frame))
    return "".join(chunks)


def _fail(attempt: Attempt, message: str) -> NoReturn:
    """One line on stderr; with -o json/markdown also the error document on stdout, so `jq` reads it."""
    click.echo(f"error: {message}", err=True)
    if attempt.output in ("json", "markdown", "html"):
        with stdout_reader_may_leave(2):
            write(attempt.failed(message), attempt.output, sys.stdout)
    sys.exit(2)


def _debug(ctx: click.Context) -> bool:
    return log_choices(ctx).level == "debug"


@click.group(
    cls=_Commands,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110},
    epilog=ENV_EPILOG,
)
@click.version_option(__version__, prog_name="gitops-sync")
@log_options
def main(logs: LogChoices) -> None:
    """Keep a Kubernetes cluster equal to a Git repository through server-side apply."""
    # `logs`: the group's --log-* flags, already kept by log_options for the command to build on.
