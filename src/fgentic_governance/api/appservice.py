"""The appservice-namespace registry: which MXIDs belong to a bridge or another appservice
(ADR 0023 §3, §30, §31; ADR 0017 Matrix rule 1).

One source of truth for every process: the chart value ``appserviceNamespaces``, passed to the
operator, the webhook, the memory API and the control API as ``--appservice-namespaces``
(JSON). An MXID a namespace's ``userRegex`` fully matches is a bridged or external-appservice
identity whatever a MemoryScope's ``originKind`` or a bridge's assertion says: the memory path
refuses it (``APPSERVICE_IDENTITY_DENIED``) and the identity projector checks sender kinds
against the same entries (``SENDER_KIND_INVALID``). The registry is trusted configuration, like
the appservice registrations the homeserver itself reads; nothing a request carries can move an
MXID out of it.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Iterable, Sequence
from typing import Annotated, Final

from pydantic import Field, TypeAdapter, ValidationError, model_validator

from fgentic_governance.api.common import DnsLabel, Model

FLAG: Final = "--appservice-namespaces"
"""The one command-line flag of every process that reads the registry."""
MAX_NAMESPACES: Final = 64

# Python's `re` runs here, RE2 wherever the API server evaluates CEL: what only one of them
# understands (look-around, back-references, conditionals, possessive or atomic groups) could
# classify the same MXID differently, so the registry refuses it.
_NOT_PORTABLE: Final = re.compile(r"\(\?(?:<?[=!]|P?[=>]|<[A-Za-z]|\()|\\[1-9]|[*+?}]\+")


class AppserviceNamespace(Model):
    """A bridged network or external appservice namespace, from trusted bridge configuration.

    An MXID that ``userRegex`` fully matches is an identity of this namespace: the identity
    projector requires it to be a ``bridged_matrix`` principal of ``network`` (and a
    ``bridged_matrix`` principal to be in its network's namespace), and no MemoryScope,
    memory call or control command may treat it as ``native-local``.
    """

    network: DnsLabel
    """Bridged network name: an MXID that userRegex matches must be a bridged_matrix principal
    of this network."""
    user_regex: Annotated[str, Field(min_length=1, max_length=1024)]
    """Full-match regular expression over the complete MXID (as in an appservice
    registration's `namespaces.users[].regex`)."""

    @model_validator(mode="after")
    def _compiles(self) -> AppserviceNamespace:
        try:
            re.compile(self.user_regex)
        except re.error:
            raise ValueError("userRegex is not a valid regular expression") from None
        if _NOT_PORTABLE.search(self.user_regex):
            raise ValueError("userRegex uses look-around, a back-reference, a conditional or "
                             "a possessive quantifier (not portable to RE2)")
        return self


Namespaces = Annotated[list[AppserviceNamespace], Field(max_length=MAX_NAMESPACES)]
_NAMESPACES: Final = TypeAdapter(Namespaces)


class RegistryError(ValueError):
    """The registry is unusable; the message names a field, never a regular expression."""


class AppserviceRegistry:
    """The configured namespaces, compiled once for per-request matching."""

    def __init__(self, namespaces: Iterable[AppserviceNamespace] = ()) -> None:
        self.namespaces: tuple[AppserviceNamespace, ...] = tuple(namespaces)
        if len(self.namespaces) > MAX_NAMESPACES:
            raise RegistryError(f"at most {MAX_NAMESPACES} appservice namespaces")
        networks = [ns.network for ns in self.namespaces]
        if len(set(networks)) != len(networks):
            raise RegistryError("appservice namespaces: duplicate network")
        self._compiled = tuple((ns.network, re.compile(ns.user_regex))
                               for ns in self.namespaces)

    def __bool__(self) -> bool:
        return bool(self.namespaces)

    def networks(self, mxid: str) -> frozenset[str]:
        """The networks whose namespace holds ``mxid`` (a full match over the complete MXID)."""
        return frozenset(network for network, regex in self._compiled if regex.fullmatch(mxid))

    def holds(self, mxid: str) -> bool:
        """Whether ``mxid`` is a bridged or external-appservice identity: never native-local."""
        return any(regex.fullmatch(mxid) for _, regex in self._compiled)

    def wire(self) -> list[dict[str, str]]:
        return [ns.wire() for ns in self.namespaces]

    def flag_value(self) -> str:
        """The registry as the value of ``--appservice-namespaces`` (compact JSON)."""
        return json.dumps(self.wire(), separators=(",", ":"))


EMPTY: Final = AppserviceRegistry()


def parse_registry(text: str) -> AppserviceRegistry:
    """The registry from a flag value: a JSON list of ``{network, userRegex}`` (empty: none)."""
    if not text.strip():
        return EMPTY
    try:
        doc = json.loads(text)
    except ValueError:
        raise RegistryError("appservice namespaces: not a JSON list") from None
    try:
        return AppserviceRegistry(_NAMESPACES.validate_python(doc, by_alias=True,
                                                              by_name=False))
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False, include_context=False)[0]
        where = ".".join(str(part) for part in first["loc"])
        raise RegistryError(f"appservice namespaces[{where}]: {first['msg']}") from None


def registry_of(namespaces: Sequence[AppserviceNamespace]) -> AppserviceRegistry:
    """A registry of already validated entries (raises RegistryError on a duplicate network)."""
    return AppserviceRegistry(namespaces) if namespaces else EMPTY


def _flag_type(text: str) -> AppserviceRegistry:
    try:
        return parse_registry(text)
    except RegistryError as exc:  # argparse would echo the value; our message names a field
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_flag(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--appservice-namespaces``, the same in every process (``args.appservice_namespaces``)."""
    parser.add_argument(FLAG, type=_flag_type, default=EMPTY, metavar="JSON",
                        help="appservice-namespace registry: a JSON list of {network, "
                             "userRegex} (chart appserviceNamespaces); an MXID in it is never "
                             "native-local")
