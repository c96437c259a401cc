"""Consent gates: whether a MemoryScope may be enabled, as a pure function."""
