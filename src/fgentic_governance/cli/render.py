"""`fgentic-governance render`: the manifests the operator would apply, for GitOps.

Offline: nothing is read but the files named. Input that cannot be used (a missing file, YAML
that does not parse, a binding that does not validate or render, a webhook URL that is not
``https://HOST``, a CA file without a PEM certificate) is one line on stderr naming the file or
flag, never a value from it, and exit 2 (``cli.errors``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pydantic
import yaml

from fgentic_governance.admission.render import webhook_configuration
from fgentic_governance.cli import inputs
from fgentic_governance.cli.errors import EXIT_UNUSABLE, InputError, fail


def run_render(args: argparse.Namespace) -> int:
    if args.target == "webhook-config":
        url = inputs.https_url(args.url)
        doc = webhook_configuration(args.name, url,
                                    inputs.pem_certificates(args.ca_file, "ca_file"))
        yaml.safe_dump(doc, sys.stdout, sort_keys=False)
        return 0
    if args.target == "retrievalbinding":
        return _retrieval_bindings(args)
    if args.target == "memory-model-routes":
        return _memory_model_routes(args)
    return fail(args, f"unknown render target {args.target}", EXIT_UNUSABLE)


def _memory_model_routes(args: argparse.Namespace) -> int:
    from fgentic_governance.api.kagent import AgentRef
    from fgentic_governance.memoryapi.model_gateway_config import (
        ModelLimit,
        ModelRouteError,
        model_routes_config,
    )

    try:
        agents = [AgentRef(*item.split("/", 1)) for item in args.agent if "/" in item]
        if len(agents) != len(args.agent):
            raise ModelRouteError("--agent must be NAMESPACE/NAME")
        doc = model_routes_config(agents, args.upstream, args.port,
                                  ModelLimit(args.per_minute, args.burst))
    except ModelRouteError as refused:
        return fail(args, f"refused: {refused}", EXIT_UNUSABLE)
    yaml.safe_dump(doc, sys.stdout, sort_keys=False)
    return 0


def _retrieval_bindings(args: argparse.Namespace) -> int:
    from fgentic_governance.api.retrieval import RetrievalBindingSpec
    from fgentic_governance.retrieval.render.binding import RenderError, RenderOptions, render

    fmt = args.format or ("all" if args.output else "kubernetes")
    if fmt == "all" and not args.output:
        raise InputError("--format all needs -o DIR (the two forms are separate files)")
    hosts = dict(_host(item) for item in args.standalone_host)
    options = RenderOptions(cluster_domain=args.cluster_domain, standalone_hosts=hosts,
                            appservice=args.appservice_namespaces)
    jwks = inputs.read_text(args.jwks_file, "jwks_file") if args.jwks_file else None
    docs = [d for d in inputs.yaml_documents(args.file, "file")
            if isinstance(d, dict) and d.get("kind") == "RetrievalBinding"]
    if not docs:
        raise InputError(f"{args.file}: no RetrievalBinding in it")
    for doc in docs:
        meta = doc.get("metadata") or {}
        namespace, name = str(meta.get("namespace", "default")), str(meta.get("name", ""))
        try:
            spec = RetrievalBindingSpec.from_wire(doc.get("spec") or {})
            rendered = render(namespace, name, spec, jwks=jwks, options=options)
        except pydantic.ValidationError as exc:  # its text quotes the input: codes only
            raise InputError(f"{args.file}: {namespace}/{name}: {_invalid(exc)}") from None
        except RenderError as exc:  # names a field, never a value
            raise InputError(f"{args.file}: {namespace}/{name}: {exc}") from None
        if spec.public_route is not None and jwks is None and fmt != "standalone":
            print(f"{namespace}/{name}: no --jwks-file: the public route's inline JWKS is "
                  "empty and rejects every token", file=sys.stderr)
        _emit(args.output, f"{namespace}.{name}", fmt, rendered.kubernetes_yaml(),
              rendered.standalone_yaml())
        if args.output is not None and fmt != "kubernetes":
            # A standalone proxy's projector reads the same configuration from a file.
            (args.output / f"{namespace}.{name}.projector.json").write_text(
                rendered.projector_config)
        print(f"{namespace}/{name}: {len(rendered.objects)} objects, digest {rendered.digest}, "
              f"unenforceable {','.join(rendered.unenforceable)}", file=sys.stderr)
    return 0


def _invalid(exc: pydantic.ValidationError) -> str:
    """The first problem's place and pydantic's code for it, and how many more."""
    problems = exc.errors(include_url=False, include_input=False)
    where = ".".join(["spec", *(str(part) for part in problems[0]["loc"])])
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return f"not a valid RetrievalBinding: {where}: {problems[0]['type']}{more}"


def _host(item: str) -> tuple[str, str]:
    key, sep, address = item.partition("=")
    if not sep or key not in {"projector", "kagent", "retrieval"} or ":" not in address:
        raise InputError(f"--standalone-host wants projector|kagent|retrieval=HOST:PORT: {item}")
    return key, address


def _emit(output: Path | None, stem: str, fmt: str, kubernetes: str, standalone: str) -> None:
    forms = {"kubernetes": kubernetes, "standalone": standalone}
    chosen = forms if fmt == "all" else {fmt: forms[fmt]}
    if output is None:
        for text in chosen.values():
            sys.stdout.write(text)
        return
    output.mkdir(parents=True, exist_ok=True)
    for form, text in chosen.items():
        (output / f"{stem}.{form}.yaml").write_text(text)
