"""What every controller of this package runs on, knowing nothing about Git or sources.

The work queue, the one list/watch loop (`listwatch`) every watch runs on, the watch cache built on it,
Events, metrics, token review and the supervisor of background threads. Higher layers (`reconcile/`,
`serving/`, the controllers) are built on these; nothing here imports them.
"""
