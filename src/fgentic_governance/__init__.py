"""fgentic-governance: governed agent memory and permission-aware retrieval for kagent."""

__version__ = "0.1.0"
