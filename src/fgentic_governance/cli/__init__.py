"""The `fgentic-governance` command: one console script, one subcommand per process or tool.

Processes (one Deployment each in the chart): ``operator`` (the Kopf controller), ``webhook``
(admission), ``projector`` (retrieval identity), ``retrieval-server`` (the knowledge-retrieval
MCP server), ``control-api`` (the ``!memory`` commands), ``memory-api`` (kagent's memory
calls). Tools: ``crds`` (generate or ``--check`` CRDs and schemas), ``render`` (manifests
offline, for GitOps), ``test`` (admission policy suites offline, for GitOps), ``corpus``
(load and count the knowledge corpus), ``offboard`` (erase a person's memory), ``memory``
(content-free store status, list and erasure), ``detach`` (before uninstall).
Input a command cannot use ends in one line on stderr and exit 2 (``cli.errors``; docs/cli.md).
The development environment (``fgentic-dev up``) is not part of the product.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from fgentic_governance.cli import errors, inputs
from fgentic_governance.serving.process import add_serving_flags

# The generators' outputs, relative to the working directory (a checkout's root): the product
# knows nothing of where it was built from.
CRD_DIRS = (Path("crds"), Path("charts/fgentic-governance/files/crds"))
SCHEMA_DIR = Path("schemas")


def _crds(args: argparse.Namespace) -> int:
    """CRDs and the contract's JSON Schemas: every artefact generated from the models."""
    from fgentic_governance.api import crdgen, crdref
    from fgentic_governance.contract import schemagen

    dirs = [Path(d) for d in args.output] if args.output else list(CRD_DIRS)
    # --output alone regenerates CRDs only (a chart's copy, say); --schema-dir adds the schemas.
    schemas: Path | None = args.schema_dir or (None if args.output else SCHEMA_DIR)
    reference = None if args.output else crdref.PATH  # docs/crd-reference.md, with the defaults
    if args.check:
        problems = crdgen.drift(dirs) + (schemagen.drift(schemas) if schemas else [])
        problems += crdref.drift(reference) if reference else []
        for problem in problems:
            print(f"drift: {problem}", file=sys.stderr)
        if problems:
            print("run `fgentic-governance crds` and commit the result", file=sys.stderr)
            return 1
        print(f"crds up to date in {', '.join(map(str, dirs))}")
        return 0
    crdgen.write(dirs)
    print(f"wrote {len(crdgen.render_all())} CRDs to {', '.join(map(str, dirs))}")
    if schemas:
        schemagen.write(schemas)
        print(f"wrote the contract's JSON Schemas to {schemas}")
    if reference:
        crdref.write(reference)
        print(f"wrote the CRD reference to {reference}")
    return 0


def _operator(args: argparse.Namespace) -> int:
    from fgentic_governance.controller.main import run_operator

    return int(run_operator(args))


def _webhook(args: argparse.Namespace) -> int:
    if not args.bootstrap_secret:  # otherwise the bootstrap writes the pair
        inputs.tls_pair(args.tls_dir, args.client_ca_file)
    elif args.client_ca_file is not None:
        inputs.pem_certificates(args.client_ca_file, "client_ca_file")
    from fgentic_governance.admission.server import run_webhook

    return int(run_webhook(args))


def _render(args: argparse.Namespace) -> int:
    from fgentic_governance.cli.render import run_render

    return int(run_render(args))


def _offboard(args: argparse.Namespace) -> int:
    from fgentic_governance.cli.offboard import run_offboard

    return int(run_offboard(args))


def _test(args: argparse.Namespace) -> int:
    from fgentic_governance.cli.policytest import run_policy_test

    return int(run_policy_test(args))


def _projector(args: argparse.Namespace) -> int:
    from fgentic_governance.retrieval.projector.server import run_projector

    return int(run_projector(args))


def _control_api(args: argparse.Namespace) -> int:
    from fgentic_governance.controlapi.room import RoomPolicy
    from fgentic_governance.controlapi.server import run_control_api

    # The server checks these too, but a template that does not format ends there in a traceback.
    try:
        args.ghost_template.format(namespace="ns", name="agent", server=args.local_homeserver)
    except (ValueError, KeyError, IndexError, AttributeError):
        raise errors.InputError("--ghost-template: use only {namespace}, {name} and {server}, "
                                "e.g. '@agent-{namespace}-{name}:{server}'") from None
    try:
        RoomPolicy(args.local_homeserver, args.bot_mxid, args.ghost_template)
    except ValueError as exc:  # one of RoomPolicy's own sentences, naming no value
        raise errors.InputError(f"{exc} (--local-homeserver, --bot-mxid, --ghost-template)") \
            from None

    return int(run_control_api(args))


def _memory_api(args: argparse.Namespace) -> int:
    from fgentic_governance.memoryapi.server import run_memory_api

    return int(run_memory_api(args))


def _retrieval_server(args: argparse.Namespace) -> int:
    from fgentic_governance.retrievalserver.server import run_retrieval_server

    inputs.http_url(args.embeddings_url, "--embeddings-url")  # before it listens
    return int(run_retrieval_server(args))


def _detach(args: argparse.Namespace) -> int:
    from fgentic_governance.cli.detach import run_detach
    return run_detach(args)


def _add_memory_commands(sub: Any) -> None:
    """`memory status|list-scopes|erase-scope`, `control-api` (the memory control API) and
    `memory-api` (kagent's memory calls)."""
    from fgentic_governance.cli import memory
    from fgentic_governance.controlapi import server

    parser = sub.add_parser("memory", help="content-free memory store status and erasure")
    memory.add_arguments(parser)
    control = sub.add_parser("control-api", help="run the memory control API (!memory)")
    server.add_arguments(control)
    control.set_defaults(func=_control_api)
    from fgentic_governance.memoryapi import server as memory_api

    governed = sub.add_parser("memory-api", help="run the governed memory API that kagent's "
                                                 "runtime calls (KAGENT_URL)")
    memory_api.add_arguments(governed)
    governed.set_defaults(func=_memory_api)
    from fgentic_governance.cli import detach

    det = sub.add_parser("detach", help="before uninstall: fence every scope, release "
                                        "the operator's finalizers (the chart's hook)")
    detach.add_arguments(det)
    det.set_defaults(func=_detach)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fgentic-governance", description=__doc__)
    parser.add_argument("--version", action="version", version=f"fgentic-governance {version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (_add_crds, _add_operator, _add_webhook, _add_render, _add_test, _add_offboard,
                _add_projector, _add_memory_commands):
        add(sub)
    return parser


def _add_crds(sub: Any) -> None:
    crds = sub.add_parser("crds", help="generate crds/ and schemas/ from the models, or --check")
    crds.add_argument("--check", action="store_true", help="fail if committed YAML differs")
    crds.add_argument("--output", action="append", metavar="DIR",
                      help="CRD directory (repeatable; default: crds/ and the chart's files/crds/)")
    crds.add_argument("--schema-dir", type=Path,
                      help="directory of the contract's JSON Schemas (default: schemas/, "
                           "none with --output)")
    crds.set_defaults(func=_crds)


def _add_operator(sub: Any) -> None:
    from fgentic_governance.controller import options

    op = sub.add_parser("operator", help="run the reconcilers")
    options.add_arguments(op)
    op.set_defaults(func=_operator)


def _add_webhook(sub: Any) -> None:
    from fgentic_governance.admission import options

    wh = sub.add_parser("webhook", help="run the validating admission webhook server")
    options.add_arguments(wh)
    wh.set_defaults(func=_webhook)


def _add_render(sub: Any) -> None:
    render = sub.add_parser("render", help="render manifests offline, for GitOps")
    targets = render.add_subparsers(dest="target", required=True)
    vwc = targets.add_parser("webhook-config", help="the ValidatingWebhookConfiguration")
    vwc.add_argument("--url", required=True,
                     help="base https URL of the webhook (/agents and /governance are appended)")
    vwc.add_argument("--ca-file", type=Path, required=True, help="PEM CA that signed it")
    vwc.add_argument("--name", default="fgentic-governance")
    rb = targets.add_parser("retrievalbinding",
                            help="NetworkPolicies + agentgateway config of RetrievalBindings")
    rb.add_argument("file", type=Path, help="YAML with one or more RetrievalBindings")
    rb.add_argument("-o", "--output", type=Path, help="directory for one file per form")
    rb.add_argument("--format", choices=["standalone", "kubernetes", "all"],
                    help="default: all with -o, kubernetes on stdout")
    rb.add_argument("--jwks-file", type=Path,
                    help="the public route's JWKS (what the operator reads from jwksConfigMap)")
    rb.add_argument("--cluster-domain", default="cluster.local")
    rb.add_argument("--standalone-host", action="append", default=[], metavar="KEY=HOST:PORT",
                    help="standalone address of projector, kagent or retrieval (repeatable)")
    from fgentic_governance.api import appservice  # as the operator's flag

    appservice.add_flag(rb)
    mr = targets.add_parser("memory-model-routes",
                            help="agentgateway config: a rate-limited model route per "
                                 "memory-enabled Agent (docs/memory.md §11)")
    mr.add_argument("--agent", action="append", required=True, metavar="NAMESPACE/NAME",
                    help="a memory-enabled Agent (repeatable)")
    mr.add_argument("--upstream", required=True, metavar="HOST:PORT",
                    help="the model endpoint the routes forward to")
    mr.add_argument("--port", type=int, default=8090, help="the listener's port")
    mr.add_argument("--per-minute", type=int, default=30, help="requests refilled a minute")
    mr.add_argument("--burst", type=int, default=10, help="requests at once")
    render.set_defaults(func=_render)


def _add_test(sub: Any) -> None:
    from fgentic_governance.cli import policytest

    test = sub.add_parser("test", help="the webhook's verdict on suites and manifests offline, "
                                       "for GitOps (docs/policy-testing.md)")
    policytest.add_arguments(test)
    test.set_defaults(func=_test)


def _add_offboard(sub: Any) -> None:
    off = sub.add_parser("offboard", help="request erasure of every memory scope of a principal")
    off.add_argument("mxid", help="complete MXID of the deactivated user")
    off.add_argument("--origin-kind", default="native-local")
    off.add_argument("--kubeconfig", type=Path)
    off.add_argument("--wait", type=float, default=0.0,
                     help="seconds to wait for ReadyForDeactivation (0: do not wait)")
    off.set_defaults(func=_offboard)


def _add_projector(sub: Any) -> None:
    proj = sub.add_parser("projector",
                          help="run the retrieval identity projector (agentgateway ext-authz)")
    proj.add_argument("--config", type=Path, required=True,
                      help="projector configuration (JSON or YAML, see docs/projector.md)")
    add_serving_flags(proj, port=9090)
    proj.set_defaults(func=_projector)
    from fgentic_governance.retrievalserver import server

    retrieval_server = sub.add_parser(
        "retrieval-server", help="run the retrieval MCP server (one binding's tool)")
    server.add_arguments(retrieval_server)
    retrieval_server.set_defaults(func=_retrieval_server)
    from fgentic_governance.cli import corpus

    corpus.add_arguments(sub.add_parser(
        "corpus", help="the knowledge corpus: load chunks from JSON Lines, content-free stats"))


def version() -> str:
    """The installed distribution's version, else the package's own."""
    from importlib import metadata

    try:
        return metadata.version("fgentic-governance")
    except metadata.PackageNotFoundError:
        import fgentic_governance

        return str(getattr(fgentic_governance, "__version__", "unknown"))


def main(argv: Sequence[str] | None = None) -> int:
    """The subcommand's exit code; input it cannot use is one line on stderr (``cli.errors``)."""
    args = _parser().parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func

    def command() -> int:
        inputs.check_files(args)
        return func(args)

    return errors.run(command, args)


if __name__ == "__main__":
    sys.exit(main())
