"""The admission webhook process: Kopf's WebhookServer with certificates we generate.

Kopf's managed webhook configuration is not used: it hard-codes a 30 s timeout, has no
namespaceSelector, and is deleted on shutdown (leaving the cluster unprotected). The chart
and the tests ship their own ValidatingWebhookConfiguration instead.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
from typing import Any

import kopf

from fgentic_admission import policy
from fgentic_governance import kube_login  # noqa: F401  (registers the login handler)

log = logging.getLogger("fgentic_admission")


@kopf.on.validate("kagent.dev", "v1alpha2", "agents", id="agents")  # type: ignore[arg-type]
def validate_agent(body: kopf.Body, **_: Any) -> None:
    denials = policy.header_denials(body)
    if denials:
        raise kopf.AdmissionError("; ".join(d.message() for d in denials), code=403)


def webhook_server(tls_dir: str, host: str, port: int) -> kopf.WebhookServer:
    return kopf.WebhookServer(
        addr=host,
        port=port,
        certfile=os.path.join(tls_dir, "tls.crt"),
        pkeyfile=os.path.join(tls_dir, "tls.key"),
        cafile=os.path.join(tls_dir, "ca.crt"),
    )


def run_webhook(args: argparse.Namespace) -> int:
    if args.kubeconfig:
        os.environ["KUBECONFIG"] = str(args.kubeconfig)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")

    @kopf.on.startup()
    def _configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.admission.server = webhook_server(str(args.tls_dir), args.host, args.port)
        settings.admission.managed = None  # We ship our own configuration.

    namespaces = args.namespace or []
    asyncio.run(kopf.operator(clusterwide=not namespaces, namespaces=namespaces,
                              standalone=True))
    return 0
