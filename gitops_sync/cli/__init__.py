"""Command line: `sync` (CI), `diff` (drift report), `render`, `run` (daemon).

Exit codes follow `kubectl diff`: 0 in sync / applied cleanly, 1 differences or unresolved
conflicts, 2 any error. Reports go to stdout, logs to stderr.

`group` is the command group and its failure path, `attempt` what a command knows for its failure
report, `output` the report and progress on the terminal, `pass_commands` sync and diff, `render_command`
render. The pipeline (engine, cluster, report) is imported only by the command that runs it.
"""

from gitops_sync.cli.group import main
from gitops_sync.cli.pass_commands import diff, sync
from gitops_sync.cli.render_command import render

for _command in (sync, diff, render):
    main.add_command(_command)

__all__ = ["main"]
