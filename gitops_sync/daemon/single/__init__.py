"""`gitops-sync run --repo`: one source, one process, its own Lease for leader election."""
