"""Kubernetes API access every process shares: building the client (``client``) and a bounded
name for a failed call (``failures``, pure). Process-specific calls live with their process."""
