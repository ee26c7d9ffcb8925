"""One source as an object a controller owns: its desired state, its passes, its health and its report.

The controllers in `single/` and `fleet/` build one `SourceReconciler` per source and hand it the keys the
queue gives out; what people see of it (status, `/status`, Events, metrics) is derived from it here.
"""
