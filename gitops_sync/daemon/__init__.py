"""`gitops-sync run`: the level-triggered daemon around the engine's pass.

Triggers (Git poll, webhook, file events, the watch cache) enqueue work; the reconciler runs `Engine`
passes on it; the results go to `/status`, `/metrics`, Events and the logs. Imported only for `run`
(prometheus, watchdog and the HTTP server would slow down a one-shot command).
"""

from gitops_sync.daemon.loop import Daemon, DaemonOptions

__all__ = ["Daemon", "DaemonOptions"]
