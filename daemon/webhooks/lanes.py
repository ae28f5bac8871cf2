"""Webhook subscriptions on a node with lanes (docs/lanes.md): every lane holds every one.

Each lane applies the ops of its own keys (notifications on the agent's
lane, mail on the project's, a memory on the lane its id names), and the
webhook intake of
the lane that applies an op makes its event (ops every lane applies, such
as sessions and identity records, make none: :mod:`daemon.webhooks.events`).
So each subscription is installed on every lane, the same row everywhere,
and each lane delivers the events of its own ops from its own outbox (its
side file ``<lane db>.webhooks.sqlite``). Chosen over "subscriptions on the
home lane, the other lanes handing their event-producing ops to it"
because that needs a second durable queue between lanes (an op applied on
lane 1 while lane 0 restarts must still be delivered, once), whereas here
an event is made once, by the one lane that applies its op, and waits in
a durable outbox already; a slow receiver or a lane's restart holds up
only that lane's deliveries. The price: a create or delete is written on
every lane (rare), and what must be minted once is:

* **create**: the lane the request reaches validates the URL, mints the
  id and the secret and stores the row, then hands the exact row to every
  sibling (``/lane/v1/webhooks``, :func:`serve`); if one refuses or does not
  answer, the row is removed again everywhere and the create fails (an
  idempotent retry installs it on every lane that lacks it);
* **delete**: every sibling first, then this lane (so a failed delete can be
  retried here); ``undelivered_dropped`` is the sum over lanes;
* **list**: any lane's rows (they are the same);
* **dead letters**: each lane keeps its own, numbered by its own ``seq``;
  the list merges them (oldest first, then by lane) and gives each a
  ``lane`` and a ``ref``, ``"<lane>:<seq>"``; a replay takes that ref or the
  delivery id (unique on the node), never a bare seq (ambiguous: 400).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Final

from common.errors import AiMemoryError, BadRequest, NotFound

if TYPE_CHECKING:
    from daemon.node import Node
    from daemon.webhooks.service import Webhooks

from daemon.webhooks.registry import Subscription

RPC: Final = "webhooks"


def _siblings(node: Node) -> Any:
    return node.siblings


def _wire(sub: Subscription) -> dict[str, Any]:
    out = dataclasses.asdict(sub)
    out["events"] = list(sub.events)
    return out


def _sub(raw: dict[str, Any]) -> Subscription:
    return Subscription(**{**raw, "events": tuple(raw["events"])})


def _first_error(answers: dict[int, Any]) -> AiMemoryError | None:
    for _, answer in sorted(answers.items()):
        if isinstance(answer, AiMemoryError):
            return answer
    return None


async def installed(node: Node, out: dict[str, Any]) -> dict[str, Any]:
    """After this lane created (or replayed) subscription ``out``: the same
    row on every sibling, or none anywhere and the error raised."""
    siblings = _siblings(node)
    if siblings is None:
        return out
    webhooks = node.webhooks
    assert webhooks.registry is not None
    sub = webhooks.registry.get(str(out["id"]))
    if sub is None:  # removed meanwhile
        raise NotFound(f"subscription {out['id']} not found")
    error = _first_error(await siblings.call_all(RPC, {"op": "install", "sub": _wire(sub)}))
    if error is None:
        return out
    if not out.get("replayed"):
        await siblings.call_all(RPC, {"op": "remove", "id": sub.id})
        await webhooks.unsubscribe(sub.id)
    raise error


async def unsubscribe(node: Node, sub_id: str) -> dict[str, Any]:
    """Remove ``sub_id`` from every lane: the siblings first."""
    siblings = _siblings(node)
    dropped = 0
    if siblings is not None:
        answers = await siblings.call_all(RPC, {"op": "remove", "id": sub_id})
        error = _first_error(answers)
        if error is not None:
            raise error
        dropped = sum(int(a["undelivered_dropped"]) for a in answers.values())
    out = await node.webhooks.unsubscribe(sub_id)
    out["undelivered_dropped"] = int(out["undelivered_dropped"]) + dropped
    return out


async def dead_letters(node: Node, limit: int) -> list[dict[str, object]]:
    """Every lane's dead letters, oldest first, each with its ``lane`` and ``ref``."""
    siblings = _siblings(node)
    mine = await node.webhooks.dead_letters(limit)
    if siblings is None:
        return mine
    answers = await siblings.call_all(RPC, {"op": "dead", "limit": limit})
    error = _first_error(answers)
    if error is not None:
        raise error
    rows = [{**r, "lane": lane, "ref": f"{lane}:{r['seq']}"}
            for lane, found in [(siblings.lane, mine), *answers.items()] for r in found]
    rows.sort(key=lambda r: (int(str(r["created_at_ms"])), int(str(r["lane"])),
                             int(str(r["seq"]))))
    return rows[:limit]


def parse_ref(node: Node, ref: str) -> tuple[int | None, str]:
    """A dead letter's ref as (lane, the ref on that lane); lane None: a
    delivery id, on whichever lane has it."""
    siblings = _siblings(node)
    lane, sep, seq = ref.partition(":")
    if sep:
        if siblings is None or not lane.isdigit() or not seq.isdigit() or len(seq) > 18 \
                or int(lane) >= siblings.lanes:
            raise BadRequest(f"malformed dead letter ref {ref!r}: a delivery id, or "
                             "<lane>:<seq> as the dead-letter list gives it")
        return int(lane), seq
    if siblings is not None and ref.isdigit():
        raise BadRequest(f"dead letter seq {ref} is ambiguous on a node with lanes: give the "
                         "delivery id or the ref (<lane>:<seq>) the dead-letter list gives")
    return (None if siblings is not None else 0), ref


async def _on(node: Node, lane: int, call: dict[str, Any]) -> Any:
    siblings = _siblings(node)
    if siblings is None or lane == siblings.lane:
        return await serve(node.webhooks, call)
    return await siblings.call(lane, RPC, call)


async def find_dead(node: Node, ref: str) -> tuple[int, str, dict[str, object]]:
    """The dead letter ``ref`` names: (its lane, its ref there, its row); 404 if none."""
    lane, local = parse_ref(node, ref)
    siblings = _siblings(node)
    lanes = [lane] if lane is not None else [siblings.lane, *siblings.others]
    for i in lanes:
        try:
            row = await _on(node, i, {"op": "dead_one", "ref": local})
        except NotFound:
            continue
        return i, local, row
    raise NotFound(f"dead letter {ref} not found")


async def replay(node: Node, lane: int, ref: str) -> dict[str, Any]:
    out: dict[str, Any] = await _on(node, lane, {"op": "replay", "ref": ref})
    if _siblings(node) is not None:
        out.update(lane=lane, ref=f"{lane}:{out['seq']}")
    return out


async def serve(webhooks: Webhooks, call: dict[str, Any]) -> Any:
    """A sibling's ``/lane/v1/webhooks`` call, on this lane's webhooks."""
    op = call.get("op")
    if op == "install":
        return await webhooks.install(_sub(dict(call["sub"])))
    if op == "remove":
        try:
            return await webhooks.unsubscribe(str(call["id"]))
        except NotFound:
            return {"deleted": False, "id": call["id"], "undelivered_dropped": 0}
    if op == "dead":
        return await webhooks.dead_letters(int(call["limit"]))
    if op == "dead_one":
        return await webhooks.dead_letter(str(call["ref"]))
    if op == "replay":
        return await webhooks.replay(str(call["ref"]))
    raise BadRequest(f"no webhooks lane call {op!r}")

