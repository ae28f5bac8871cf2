"""What every client of a node does the same way: the key header it sends
and how it writes query values. The CLI (:class:`cli.client.ApiClient`) and
``ai-memory mcp`` (:class:`daemon.mcp.node_client.NodeClient`) both use it.

A client may be given a directory key (``--key``, ``AI_MEMORY_KEY``; sent as
``Authorization: Bearer``) and the older API key (``--api-key``,
``AI_MEMORY_API_KEY``; sent as ``X-API-Key``). A node that gets both headers
refuses the request (401) unless they carry the same key, so a client sends
exactly one (:func:`key_headers`): ``--key`` when it has one, else ``--api-key``.

Query values go as text (:func:`query_params`): booleans as ``true`` and
``false``, lists comma-separated, and a ``None`` not at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def key_headers(key: str | None, api_key: str | None) -> dict[str, str]:
    """The one key header to send: ``key`` as a bearer key, else ``api_key``; none without either."""
    if key:
        return {"Authorization": f"Bearer {key}"}
    if api_key:
        return {"X-API-Key": api_key}
    return {}


def query_params(params: Mapping[str, Any] | None) -> dict[str, str]:
    """``params`` as query-string text, those that are ``None`` left out."""
    return {k: _text(v) for k, v in (params or {}).items() if v is not None}


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)
