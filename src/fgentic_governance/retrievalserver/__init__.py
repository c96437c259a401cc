"""The retrieval MCP server (ADR 0017): the only chunk-row ACL enforcement point.

``fgentic-governance retrieval-server`` serves one RetrievalBinding's one tool over MCP
2025-11-25 (Streamable HTTP, stateless, JSON answers). Every request carries exactly one
X-Fgentic-Identity for the binding's Agent, decoded once into a ``contract.VerifiedIdentity``
(``guard``); a tool call checks its arguments (``tool``), embeds the query through an
OpenAI-compatible endpoint (``embeddings``) and runs the prefilter's one statement
(``service``). ``protocol`` answers MCP as the `mcp` SDK does (its handler kernel only for
rare request shapes) behind our own bounded HTTP server (``http``), which refuses everything
the guard does not admit before any protocol work.
"""
