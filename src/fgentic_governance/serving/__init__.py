"""The HTTP shell every process of ours shares: the bounded, content-free server (``http``),
strict JSON (``strict_json``, pure), serving certificates (``tls``) and the process shell
(``process``: logging, event loop, signals, bounded teardown, shared flags). No Kopf, no
Kubernetes client, no store."""
