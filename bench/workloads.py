"""What one iteration of each workload sends, as seen by a client.

A workload is a frozen, picklable :class:`WorkloadSpec` (it crosses into
the load-generator processes) naming one of the operation functions below.
An operation is one unit of the workload's throughput and may issue more
than one request: ``sendpop`` posts a project message and then claims one
from the same mailbox, so its unit is a claim attempt. Each operation
returns the status that decides it (the first non-2xx status, else the last
one), and the driver times the whole operation; the individual requests are
timed too, per kind, through :meth:`Requester.call`.

``echo`` sends exactly the notify request to the bare echo server, so the
ceiling and the daemon are driven by the same bytes and the same client.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from typing import Any, Protocol

from common.lanes import lane_of, memory_placement
from common.ops import inbox_key

WORKLOADS = ("echo", "notify", "inbox", "sendpop", "mix", "memory", "memlist")


@dataclass(frozen=True)
class WorkloadSpec:
    name: str
    agents: int = 64  # notify recipients, and the inboxes the mix reads
    agent_prefix: str = "bench-agent"
    notify_target: str | None = None  # fixed recipient (inbox fill)
    inbox_agent: str | None = None  # whose inbox the inbox workload reads
    inbox_limit: int = 50
    consistency: str | None = None  # "local" skips the cross-node read
    workspace: str = "bench"
    projects: tuple[str, ...] = ()  # mailboxes sendpop spreads over
    sender_project: str = "bench-sender"
    payload_bytes: int = 160
    mix: tuple[tuple[str, int], ...] = (("notify", 60), ("inbox", 30), ("sendpop", 10))
    extra: dict[str, Any] = field(default_factory=dict)
    # A lane-aware client (docs/lanes.md, "Three ways on", option 2): with
    # N > 0, each notify goes to the port of the lane of N that owns its
    # recipient's inbox (``lane_of(inbox_key(agent), N)``, port = the
    # target's port + lane_port_offset * (lane + 1)), so no lane hands it on.
    direct_lanes: int = 0
    lane_port_offset: int = 100

    def __post_init__(self) -> None:
        if self.name not in WORKLOADS:
            raise ValueError(f"unknown workload {self.name!r}; known: {', '.join(WORKLOADS)}")
        if self.name == "inbox" and not self.inbox_agent:
            raise ValueError("the inbox workload needs inbox_agent")
        if self.name in ("sendpop", "mix") and not self.projects:
            raise ValueError(f"the {self.name} workload needs projects")


class Requester(Protocol):
    """What an operation may do: one timed request against some node
    (``port_offset``: to that node's port plus this, a lane's own port)."""

    async def call(
        self,
        kind: str,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
        want_body: bool = False,
        port_offset: int = 0,
    ) -> tuple[int, Any]: ...

    def count(self, event: str, n: int = 1) -> None: ...


def _payload(spec: WorkloadSpec, rng: random.Random) -> str:
    """A body of the configured size whose text varies a little per request."""
    head = f"{rng.getrandbits(32):08x} "
    return head + "x" * max(spec.payload_bytes - len(head), 0)


def _agent(spec: WorkloadSpec, rng: random.Random) -> str:
    return f"{spec.agent_prefix}-{rng.randrange(spec.agents)}"


async def op_notify(r: Requester, spec: WorkloadSpec, rng: random.Random, kind: str = "notify") -> int:
    sender = f"bench-sender-{rng.randrange(16)}"
    target = spec.notify_target or _agent(spec, rng)
    body = {
        "target_agent_id": target,
        "title": "bench notify",
        "payload": _payload(spec, rng),
        "priority": 5,
        "tier": "mid",
        "agent_id": sender,
    }
    offset = 0
    if spec.direct_lanes > 0:
        offset = spec.lane_port_offset * (lane_of(inbox_key(target), spec.direct_lanes) + 1)
    status, _ = await r.call(kind, "POST", "/api/v1/notify", json=body, headers={"X-Agent-Id": sender},
                             port_offset=offset)
    return status


async def op_echo(r: Requester, spec: WorkloadSpec, rng: random.Random) -> int:
    return await op_notify(r, spec, rng, kind="echo")


async def op_inbox(r: Requester, spec: WorkloadSpec, rng: random.Random) -> int:
    agent = spec.inbox_agent or _agent(spec, rng)
    params = {
        "agent_id": agent,
        "limit": str(spec.inbox_limit),
        "unread_only": "false",
        "mark_read": "false",
    }
    if spec.consistency:
        params["consistency"] = spec.consistency
    status, _ = await r.call("inbox", "GET", "/api/v1/inbox", params=params, headers={"X-Agent-Id": agent})
    return status


async def op_sendpop(r: Requester, spec: WorkloadSpec, rng: random.Random) -> int:
    project = rng.choice(spec.projects)
    send = {
        "to_workspace": spec.workspace,
        "to_project": project,
        "from_workspace": spec.workspace,
        "from_project": spec.sender_project,
        "from_agent": "bench-mailer",
        "subject": "bench",
        "body": _payload(spec, rng),
        "nature": "unknown",
    }
    hdr = {"X-Agent-Id": "bench-mailer"}
    status, _ = await r.call("send", "POST", "/api/v1/messages", json=send, headers=hdr)
    if not 200 <= status < 300:
        return status
    pop = {"workspace": spec.workspace, "project": project, "request_id": uuid.uuid4().hex}
    status, body = await r.call(
        "pop", "POST", "/api/v1/messages/pop", json=pop, headers={"X-Agent-Id": "bench-popper"}, want_body=True
    )
    if 200 <= status < 300:
        claimed = isinstance(body, dict) and body.get("message") is not None
        r.count("claimed" if claimed else "empty_pop")
    return status


def _namespace(spec: WorkloadSpec, rng: random.Random) -> str:
    return f"bench-ns-{rng.randrange(spec.agents)}"


async def op_memory(r: Requester, spec: WorkloadSpec, rng: random.Random) -> int:
    """Store one memory in one of ``agents`` namespaces (with ``direct_lanes``,
    at the port of the lane the namespace's new memories are made on)."""
    ns = _namespace(spec, rng)
    body = {"title": f"bench memory {rng.getrandbits(32):08x}", "content": _payload(spec, rng),
            "namespace": ns, "tier": "mid", "priority": 1 + rng.randrange(9)}
    offset = 0
    if spec.direct_lanes > 0:
        offset = spec.lane_port_offset * (lane_of(memory_placement(ns), spec.direct_lanes) + 1)
    status, _ = await r.call("memory", "POST", "/api/v1/memories", json=body,
                             headers={"X-Agent-Id": "bench-writer"}, port_offset=offset)
    return status


async def op_memlist(r: Requester, spec: WorkloadSpec, rng: random.Random) -> int:
    """List the newest 20 memories of one namespace (with lanes: every lane asked)."""
    status, _ = await r.call("memlist", "GET", "/api/v1/memories",
                             params={"namespace": _namespace(spec, rng), "limit": "20"})
    return status


async def op_mix(r: Requester, spec: WorkloadSpec, rng: random.Random) -> int:
    names = [n for n, _ in spec.mix]
    weights = [w for _, w in spec.mix]
    choice = rng.choices(names, weights)[0]
    return await OPERATIONS[choice](r, spec, rng)


OPERATIONS = {
    "echo": op_echo,
    "notify": op_notify,
    "inbox": op_inbox,
    "sendpop": op_sendpop,
    "mix": op_mix,
    "memory": op_memory,
    "memlist": op_memlist,
}
