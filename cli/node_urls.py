"""Every node's address, for the entries that fail over between them.

``install-hooks`` writes the MCP bridge and the hooks with a list of node
URLs. The list is what ``--url`` gives (repeated, or comma-separated), else
the members of the cluster the CLI talks to: the node at the global
``--url`` (``AI_MEMORY_URL``) first, as it was reached, then its peers in
the order the node lists them, with the addresses it uses for them (from
``GET /api/v1/cluster/status``). A node that cannot be asked, or answers
without peers, leaves the list at its own address, and the caller says so.

Peers' addresses are the ones the members were configured with: on one
machine or a flat network they are what a client reaches too; where agents
reach the nodes by other names, pass ``--url`` once per node.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from cli.client import ApiClient, normalize_url
from common import limits
from common.errors import AiMemoryError


@dataclass(frozen=True, slots=True)
class NodeUrls:
    urls: tuple[str, ...]
    source: str  # for the user: where the list came from


def split_urls(values: Iterable[str]) -> tuple[str, ...]:
    """``--url`` values, each possibly comma-separated, normalized, without repeats."""
    urls = [normalize_url(u) for v in values for u in v.split(",") if u.strip()]
    return tuple(dict.fromkeys(urls))


def members_of(status: dict[str, Any], asked: str) -> tuple[str, ...]:
    """``asked`` first, then each peer's address as the node's status lists it."""
    peers = status.get("peers")
    urls = [asked]
    if isinstance(peers, dict):
        for view in peers.values():
            url = view.get("url") if isinstance(view, dict) else None
            if isinstance(url, str) and url:
                urls.append(normalize_url(url))
    return tuple(dict.fromkeys(urls))


def node_urls(given: Iterable[str], asked: str, *, key: str | None = None,
              api_key: str | None = None) -> NodeUrls:
    """The URLs ``--url`` gives, else the members of the cluster at ``asked``."""
    explicit = split_urls(given)
    if explicit:
        return NodeUrls(explicit, "given with --url")
    client = ApiClient(asked, key=key, api_key=api_key, timeout=limits.hook_http_timeout_secs)
    try:
        status = client.get("/api/v1/cluster/status")
    except AiMemoryError as exc:
        return NodeUrls((client.base_url,), f"that node alone, since asking it for its "
                        f"cluster's members failed ({exc.message}); pass --url once per node")
    if not isinstance(status, dict):
        return NodeUrls((client.base_url,), "that node alone: its status is not JSON")
    urls = members_of(status, client.base_url)
    if len(urls) == 1:
        return NodeUrls(urls, "that node alone: it has no peers")
    node = status.get("node_id") or client.base_url
    return NodeUrls(urls, f"every member of {node}'s cluster, from its cluster status; "
                          "--url once per node chooses others")
