"""Which key a client sends, and in which header: one rule for every client.

A client may be given a directory key (``--key``, ``AI_MEMORY_KEY``; sent as
``Authorization: Bearer``) and the older API key (``--api-key``,
``AI_MEMORY_API_KEY``; sent as ``X-API-Key``). A node that gets both headers
refuses the request (401) unless they carry the same key, so a client sends
exactly one: ``--key`` when it has one, else ``--api-key``. The CLI
(:class:`cli.client.ApiClient`) and ``ai-memory mcp``
(:class:`daemon.mcp.node_client.NodeClient`) both ask :func:`key_headers`.
"""

from __future__ import annotations


def key_headers(key: str | None, api_key: str | None) -> dict[str, str]:
    """The one key header to send: ``key`` as a bearer key, else ``api_key``; none without either."""
    if key:
        return {"Authorization": f"Bearer {key}"}
    if api_key:
        return {"X-API-Key": api_key}
    return {}
