"""What a client of a node trusts when it speaks HTTPS: the cluster CA.

Every client the project ships (the CLI and what is built on it, the hooks,
``mcp-bridge``, the MCP stdio server) verifies the node's certificate against
the CA file given by ``--ca-cert`` or ``AI_MEMORY_CA_CERT`` (a PEM file or
bundle; several files comma separated, e.g. old and new CA during a
rotation), or against the system's CAs when none is given. The CLI's root
option sets :data:`default_ca` once per invocation, so the few clients built
without its state (``cluster status``, ``backup``) trust the same file.
Contexts are cached per file list: building one reads the files.

:func:`explain` turns a failed verification into a message that says what
to pass, instead of a bare ``CERTIFICATE_VERIFY_FAILED``.
"""

from __future__ import annotations

import functools
import os
import ssl

CA_ENV = "AI_MEMORY_CA_CERT"
HINT = (f"pass the cluster CA with --ca-cert FILE (or {CA_ENV}=FILE): ca.crt in the "
        "directory `ai-memory cluster init` wrote")

default_ca: str | None = None  # the CLI's --ca-cert, for this invocation


def ca_cert(explicit: str | None = None) -> str | None:
    """The CA file list to trust: ``explicit``, the CLI's ``--ca-cert``, or the
    environment (None: the system's CAs)."""
    return explicit or default_ca or os.environ.get(CA_ENV) or None


@functools.lru_cache(maxsize=8)
def _context(ca: str | None) -> ssl.SSLContext:
    if ca is None:
        return ssl.create_default_context()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    for path in (p.strip() for p in ca.split(",")):
        if path:
            try:
                ctx.load_verify_locations(cafile=path)
            except (OSError, ssl.SSLError) as exc:
                from common.errors import BadRequest

                raise BadRequest(f"cannot read the CA file {path!r} ({CA_ENV} / --ca-cert): "
                                 f"{exc}") from None
    return ctx


def context(explicit: str | None = None) -> ssl.SSLContext:
    """An SSL context that verifies nodes against the configured CA."""
    return _context(ca_cert(explicit))


def verify_value(explicit: str | None = None) -> ssl.SSLContext | bool:
    """For httpx's ``verify=``: the CA's context, or True (system CAs)."""
    return context(explicit) if ca_cert(explicit) else True


def explain(exc: BaseException, origin: str) -> str | None:
    """A clear message when ``exc`` is a failed certificate verification."""
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:  # the error, its causes, and urllib's wrapped reason
        cur = todo.pop()
        if id(cur) in seen:
            continue
        seen.add(id(cur))
        inner = getattr(cur, "certificate_error", None)  # aiohttp's wrapper
        if isinstance(inner, BaseException):
            todo.append(inner)
            continue
        if isinstance(cur, ssl.SSLCertVerificationError):
            why = (getattr(cur, "verify_message", None) or getattr(cur, "reason", None)
                   or str(cur))
            return f"cannot verify the TLS certificate of {origin}: {why}"
        reason = getattr(cur, "reason", None)
        todo += [e for e in (cur.__cause__, cur.__context__, reason)
                 if isinstance(e, BaseException)]
        todo += [e for e in getattr(cur, "exceptions", ()) if isinstance(e, BaseException)]
    return None
