"""A revocation is acknowledged once every member confirms it holds the ops
(daemon/identity/admin.py ``refused_everywhere``). A member outside the
write quorum may still be applying them when first asked: it is asked again
a few times before the lease wait, which is the fallback."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from common import limits
from common.ops import APIKEY_PUT, IDENT_KEY, Op
from daemon.identity.admin import refused_everywhere

REVOKE = Op("node1", 7, 1 << 16, APIKEY_PUT, IDENT_KEY, {"id": "k1", "revoked": True}, 0)


def fake_node(answers: list[list[Any]]) -> tuple[Any, list[str], list[float]]:
    pulls: list[str] = []
    waited: list[float] = []

    async def call(peer: str, path: str, payload: Any, *, timeout_s: float) -> Any:
        assert path == "/peer/v1/pull" and payload["key"] == IDENT_KEY
        assert payload["vv"]["node1"] == 6  # everything below the revocation
        pulls.append(peer)
        return answers.pop(0) if answers else []

    async def outwait_leases(since: float) -> None:
        waited.append(since)

    node = SimpleNamespace(
        identity=SimpleNamespace(has_peers=True, monotonic=lambda: 5.0,
                                 outwait_leases=outwait_leases),
        core=SimpleNamespace(vv={"node1": 7}),
        settings=SimpleNamespace(cluster=SimpleNamespace(
            peers=[SimpleNamespace(node_id="node2")], quorum_timeout_ms=500)),
        peers=SimpleNamespace(call=call))
    return node, pulls, waited


async def test_a_member_that_applies_the_revocation_a_moment_later_confirms_it() -> None:
    node, pulls, waited = fake_node([[], [REVOKE.to_wire()]])
    await refused_everywhere(node, [REVOKE])
    assert pulls == ["node2", "node2"] and waited == []  # no lease wait


async def test_a_member_that_never_shows_it_is_outwaited() -> None:
    node, pulls, waited = fake_node([])
    await refused_everywhere(node, [REVOKE])
    assert len(pulls) == len(limits.identity_confirm_retry_secs) + 1
    assert waited == [5.0]
