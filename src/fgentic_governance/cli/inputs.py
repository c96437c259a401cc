"""Reading what a subcommand is given, or one content-free :class:`InputError` saying why not.

Every message names the flag and the path, and never echoes what a file holds (a DSN, a token,
a kubeconfig's credentials). :func:`check_files` runs before every subcommand: each input file
a flag names must open, a DSN file must hold a PostgreSQL URI, an explicit kubeconfig must be a
YAML mapping; so a server stops at start-up with one line rather than retrying or a traceback.
"""

from __future__ import annotations

import argparse
import ssl
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit

from fgentic_governance.cli.errors import InputError, kube_problem, named, raised_in

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

INPUT_FILES: Final = ("kubeconfig", "store_dsn_file", "token_file", "embeddings_key_file",
                      "client_ca_file", "jwks_file", "ca_file", "config", "file")
"""The parser's dests that name a file read at start (outputs and directories are not here)."""
DSN_SCHEMES: Final = frozenset({"postgres", "postgresql"})
PEM_CERTIFICATE: Final = b"-----BEGIN CERTIFICATE-----"


def check_files(args: argparse.Namespace) -> None:
    """Every input file the arguments name can be read; DSN and kubeconfig files make sense."""
    for dest in INPUT_FILES:
        path = getattr(args, dest, None)
        if isinstance(path, Path):
            _opens(path, dest)
    if isinstance(getattr(args, "store_dsn_file", None), Path):
        dsn(args.store_dsn_file)
    if isinstance(getattr(args, "kubeconfig", None), Path):
        kubeconfig(args.kubeconfig)


def _opens(path: Path, dest: str) -> None:
    try:
        with path.open("rb"):
            pass
    except OSError as exc:
        raise InputError(f"{named(dest, path)}: {_unreadable(exc)}") from None


def _unreadable(exc: OSError) -> str:
    if isinstance(exc, FileNotFoundError):
        return "no such file"
    if isinstance(exc, IsADirectoryError):
        return "is a directory, not a file"
    if isinstance(exc, PermissionError):
        return "cannot be read (permission denied)"
    return f"cannot be read ({type(exc).__name__})"


def read_bytes(path: Path, dest: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise InputError(f"{named(dest, path)}: {_unreadable(exc)}") from None


def read_text(path: Path, dest: str) -> str:
    try:
        return read_bytes(path, dest).decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{named(dest, path)}: not UTF-8 text") from None


def yaml_documents(path: Path, dest: str) -> list[Any]:
    """The YAML documents of a file (empty ones dropped); the place only of a syntax error."""
    import yaml

    text = read_text(path, dest)
    try:
        return [doc for doc in yaml.safe_load_all(text) if doc is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise InputError(f"{named(dest, path)}: not valid YAML{at}") from None


def dsn(path: Path, dest: str = "store_dsn_file") -> str:
    """The PostgreSQL URI a mounted Secret holds (``postgresql://USER@HOST:PORT/DB``)."""
    text = read_text(path, dest).strip()
    where = named(dest, path)
    if not text:
        raise InputError(f"{where}: empty; it must hold a PostgreSQL URI")
    if "\n" in text:
        raise InputError(f"{where}: more than one line; it must hold one PostgreSQL URI")
    problem = _dsn_problem(text)
    if problem:
        raise InputError(f"{where}: {problem}")
    return text


def _dsn_problem(text: str) -> str | None:
    try:
        parts = urlsplit(text)
    except ValueError:
        return "not a PostgreSQL URI (postgresql://USER@HOST:PORT/DB)"
    if parts.scheme not in DSN_SCHEMES:
        return "not a PostgreSQL URI (postgresql://USER@HOST:PORT/DB)"
    for host in parts.netloc.rpartition("@")[2].split(","):
        port = host.rpartition("]")[2] if host.startswith("[") else host
        number = port.rpartition(":")[2] if ":" in port else ""
        if number and not (number.isdigit() and 0 < int(number) < 65536):
            return "a port in the URI is not a number from 1 to 65535"
    # Imported here: the parser stays light (memory/__init__ loads the driver).
    from fgentic_governance.memory.dsn import problem

    return problem(text)


def kubeconfig(path: Path) -> None:
    """An explicit kubeconfig is a YAML mapping (the client library checks the rest)."""
    docs = yaml_documents(path, "kubeconfig")
    if not docs:
        raise InputError(f"--kubeconfig {path}: empty")
    if len(docs) > 1 or not isinstance(docs[0], dict):
        raise InputError(f"--kubeconfig {path}: not a kubeconfig (a YAML mapping with "
                         "clusters, users, contexts and current-context)")


def kube_client(path: Path | None) -> ApiClient:
    """The API client (``kube.client.api_client``); credentials that cannot be loaded are an
    InputError naming ``--kubeconfig`` or the defaults that were tried."""
    from fgentic_governance.kube.client import api_client

    if path is not None:
        kubeconfig(path)
    try:
        return api_client(path)
    except Exception as exc:
        if not raised_in(exc, "kubernetes.config"):
            raise
        raise InputError(kube_problem(path, exc)) from None


def https_url(url: str, option: str = "--url") -> str:
    """An ``https://`` URL with a host, and no user information, query or fragment (what the
    API server accepts as a webhook's ``clientConfig.url``). The URL is not echoed: it could
    carry a password."""
    if not url or any(c.isspace() or not c.isprintable() for c in url):
        raise InputError(f"{option}: empty or with whitespace; give https://HOST[:PORT][/PATH]")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise InputError(f"{option}: not a URL; give https://HOST[:PORT][/PATH]") from None
    if not parts.scheme or not parts.netloc:
        raise InputError(f"{option}: no scheme; give https://HOST[:PORT][/PATH]")
    if parts.scheme != "https":
        raise InputError(f"{option}: the scheme is {parts.scheme}, not https; the API server "
                         "calls webhooks over TLS only")
    problem = ("user information is not allowed" if "@" in parts.netloc
               else "no host" if not parts.hostname
               else "port 0 is not a port" if port == 0
               else "a query is not allowed" if parts.query or "?" in url
               else "a fragment is not allowed" if parts.fragment or "#" in url
               else None)
    if problem:
        raise InputError(f"{option}: {problem}; give https://HOST[:PORT][/PATH]")
    return url


def http_url(url: str, option: str) -> str:
    """An ``http://`` or ``https://`` URL with a host (an embeddings endpoint): anything else
    would start a server that can never answer. The URL is not echoed (it could carry a
    password)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises ValueError for a port that is not one)
    except ValueError:
        raise InputError(f"{option}: not a URL; give http(s)://HOST[:PORT]/PATH") from None
    if parts.scheme.lower() not in {"http", "https"}:
        scheme = f"the scheme is {parts.scheme}" if parts.scheme else "no scheme"
        raise InputError(f"{option}: {scheme}, not http or https; give "
                         "http(s)://HOST[:PORT]/PATH")
    if not parts.hostname:
        raise InputError(f"{option}: no host; give http(s)://HOST[:PORT]/PATH")
    return url


def pem_certificates(path: Path, dest: str) -> bytes:
    """A file of one or more PEM certificates (and no private key): its bytes."""
    from cryptography import x509

    data = read_bytes(path, dest)
    where = named(dest, path)
    if b"PRIVATE KEY-----" in data:
        raise InputError(f"{where}: holds a private key; give only the CA's certificate")
    if PEM_CERTIFICATE not in data:
        raise InputError(f"{where}: not a PEM certificate (no {PEM_CERTIFICATE.decode()} "
                         "block); convert DER with `openssl x509 -inform der`")
    try:
        x509.load_pem_x509_certificates(data)
    except ValueError:
        raise InputError(f"{where}: a certificate block does not parse; give the CA's PEM "
                         "certificate") from None
    return data


def tls_pair(tls_dir: Path, client_ca: Path | None) -> None:
    """``tls.crt`` and ``tls.key`` in ``tls_dir`` load as a server's pair (and ``client_ca``
    as trusted CAs), as the webhook will load them."""
    cert, key = tls_dir / "tls.crt", tls_dir / "tls.key"
    for path in (cert, key):
        try:
            with path.open("rb"):
                pass
        except OSError as exc:
            raise InputError(f"--tls-dir {tls_dir}: {path.name}: {_unreadable(exc)}") from None
    pem_certificates(cert, "tls_dir")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(cert, key, password=_no_password)
    except (ssl.SSLError, ValueError) as exc:
        raise InputError(f"--tls-dir {tls_dir}: tls.crt and tls.key are not a matching PEM "
                         f"certificate and unencrypted key ({type(exc).__name__})") from None
    if client_ca is not None:
        pem_certificates(client_ca, "client_ca_file")


def _no_password() -> bytes:
    """An encrypted key fails to load instead of prompting on a terminal."""
    return b""
