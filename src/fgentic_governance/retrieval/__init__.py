"""Permission-aware retrieval (ADR 0017): the RetrievalBinding renderer and its helpers."""
