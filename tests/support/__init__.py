"""Helpers shared by tests, benchmarks and fuzz harnesses: one module per topic, one home per
helper (tests/unit/test_layout.py checks both). Fixtures live in the conftest.py files.

* ``objects``   — the example manifests, dotted-path edits, object paths, raw API calls;
* ``kube``      — our API group, the project CRDs and bounded waits on custom objects;
* ``processes`` — our console script as a child process;
* ``store``     — a migrated pool and the store tests' scope builders;
* ``faults``    — the operator process and builders of the fault tests;
* ``projector`` — projector configs and check-request headers (ADR 0017);
* ``render``    — the example RetrievalBinding and its rendering;
* ``gateway``   — the real agentgateway stack of the e2e tests and the projector benchmark;
* ``mcp_stub``  — the two-tool MCP server behind that gateway (run with ``python -m``);
* ``doc_paths`` — addressing inside JSON documents, for the mutation fuzzers.

This package re-exports nothing: import each helper from its module.
"""
