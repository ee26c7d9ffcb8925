"""Benchmarks of gitops-sync against kubectl on the local control plane. Entry point: bench/run.py."""
