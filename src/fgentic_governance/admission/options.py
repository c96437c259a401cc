"""The admission webhook's flags (``fgentic-governance webhook``): its own, beside its server
(``admission.server``), as every process of the product declares its own."""

from __future__ import annotations

import argparse
from pathlib import Path

from fgentic_governance.serving.process import add_lease_flags, add_runtime_flags, add_serving_flags


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_runtime_flags(parser)
    parser.add_argument("--tls-dir", type=Path, required=True,
                        help="directory with tls.crt, tls.key and ca.crt")
    add_serving_flags(parser, port=9443)
    parser.add_argument("--health-port", type=int, default=8080,
                        help="plain HTTP: /healthz, /readyz, /metrics")
    parser.add_argument("--audit-interval", type=float, default=60.0,
                        help="seconds between audits of existing Agents (0 disables)")
    add_lease_flags(parser, "--audit-lease", "writing audit events and PolicyReports")
    parser.add_argument("--warn-rule", action="append", metavar="CODE",
                        help="admit with a warning instead of denying for this rule "
                             "(repeatable; only MEMORY_TTL_MISSING and "
                             "MEMORY_TTL_EXCEEDS_RETENTION, whose bound the store also holds)")
    parser.add_argument("--enforcement", choices=["deny", "audit"], default="deny",
                        help="audit: no rule denies, every one admits with a warning and the "
                             "audit's PolicyReports, for a roll-out on a running cluster; the "
                             "memory rules then do not hold at admission (docs/install.md)")
    parser.add_argument("--tls-reload-seconds", type=float, default=10.0,
                        help="how often to check the certificate files for renewal")
    parser.add_argument("--client-ca-file", type=Path, default=None,
                        help="require a client certificate issued by this CA on the review port "
                             "(the API server's, from its --admission-control-config-file "
                             "kubeconfig); default: any client")
    parser.add_argument("--memory-api-url", default="",
                        help="the governed memory API that memory-enabled Agents' Pods must use as "
                             "KAGENT_URL (docs/memory.md §11); empty: memory-enabled Agents are "
                             "refused")
    parser.add_argument("--memory-model-url", default="",
                        help="the governed model route (the memory API's /v1): every "
                             "ModelConfig a memory-enabled Agent's model work uses must be "
                             "OpenAI-compatible with this base URL (MEMORY_MODEL_UNGOVERNED); "
                             "empty: not checked")
    parser.add_argument("--memory-api-ready-url", default="",
                        help="where the webhook asks the memory API's /readyz (default: the "
                             "memory API URL)")
    boot = parser.add_argument_group("TLS bootstrap (cert-manager style; otherwise mount a Secret)")
    boot.add_argument("--bootstrap-secret", help="Secret holding the generated CA and pair")
    boot.add_argument("--bootstrap-namespace", default="fgentic-system")
    boot.add_argument("--bootstrap-service", default="fgentic-governance-webhook")
    boot.add_argument("--bootstrap-webhook-config", default="fgentic-governance",
                      help="ValidatingWebhookConfiguration whose caBundle is injected")
    boot.add_argument("--bootstrap-host", action="append",
                      help="extra DNS name or IP for the serving certificate (repeatable)")
