"""gitops-sync: keep a cluster equal to a Git repository through server-side apply."""

__version__ = "0.1.0"
