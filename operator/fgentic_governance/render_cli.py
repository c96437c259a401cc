"""`fgentic-governance render`: the manifests the operator would apply, for GitOps."""

from __future__ import annotations

import argparse
import sys

import yaml

from fgentic_governance.rendering.admission import webhook_configuration


def run_render(args: argparse.Namespace) -> int:
    if args.target == "webhook-config":
        doc = webhook_configuration(args.name, args.url, args.ca_file.read_bytes())
        yaml.safe_dump(doc, sys.stdout, sort_keys=False)
        return 0
    print(f"unknown render target {args.target}", file=sys.stderr)
    return 2
