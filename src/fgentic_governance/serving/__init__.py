"""The HTTP shell every process of ours shares: the bounded, content-free server (``http``),
strict JSON (``strict_json``, pure) and serving certificates (``tls``). No Kopf, no Kubernetes
client, no store."""
