"""What a command writes on stdout and stderr: the report in the chosen format (`write`), a reader that
stops early (`stdout_reader_may_leave`), and the progress bars of a `sync` on a terminal (`progress`)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

import click

from gitops_sync.conventions import REPORT_FORMATS

if TYPE_CHECKING:
    from gitops_sync.plan.changeset import ChangeSet

F = TypeVar("F", bound=Callable[..., Any])


# report's formats, and html: the web page's templates (web/) as one self-contained file
OUTPUTS = (*REPORT_FORMATS, "html")


def write(cs: ChangeSet, output: str, out: TextIO, **kwargs: Any) -> None:
    if output == "html":
        from gitops_sync import web  # jinja2: only for this format

        out.write(web.diff_html(cs.to_dict()))  # every object: a reader scrolls or searches
    else:
        from gitops_sync import report

        report.write(cs, output, out, **kwargs)


@contextmanager
def stdout_reader_may_leave(code: int) -> Iterator[None]:
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


def output_options(fn: F) -> F:
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


_Tick = Callable[[Any], None]


@contextmanager
def progress(*, enabled: bool, applying: int, waiting: int) -> Iterator[tuple[_Tick | None, _Tick | None]]:
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
