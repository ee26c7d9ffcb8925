"""Benchmarks of gitops-sync against kubectl on the local control plane (issue 5). Entry point: bench/run.py."""
