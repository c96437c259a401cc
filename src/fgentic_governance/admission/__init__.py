"""Validating admission for kagent Agents and the governance CRDs."""
