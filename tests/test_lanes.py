"""The partition function of lanes (common/lanes.py, docs/lanes.md)."""

from __future__ import annotations

from collections import Counter

import pytest

from common.handoffs import box_key
from common.lanes import HOME_LANE, LANES_MAX, jump_hash, lane_of, partition_token
from common.ops import ALL_KEYS, IDENT_KEY, agent_key, inbox_key, mailbox_key, mem_key, project_key

# Fixed answers: a change of the rule would strand every key already placed
# by it, so the rule may only change under a new PARTITION_VERSION.
GOLDEN = {
    ("inbox:alice", 2): 1,
    ("inbox:alice", 8): 1,
    ("mbox:default/project-a", 4): 3,
    # memories: the lane their id names (partition 2; partition 1 had them on lane 0)
    ("mem:0193c3b6-1f2e-7000-8000-000000000001", 16): 15,
}


@pytest.mark.parametrize(("key", "lanes"), sorted(GOLDEN))
def test_the_rule_is_stable(key: str, lanes: int) -> None:
    assert lane_of(key, lanes) == GOLDEN[(key, lanes)]


def test_keys_read_together_share_a_lane() -> None:
    for lanes in (2, 3, 8, 64):
        for i in range(200):
            agent, ws, proj = f"agent-{i}", f"ws{i % 7}", f"project-{i}"
            assert lane_of(inbox_key(agent), lanes) == lane_of(agent_key(agent), lanes)
            home = lane_of(project_key(ws, proj), lanes)
            assert lane_of(mailbox_key(ws, proj), lanes) == home
            assert lane_of(box_key(ws, proj), lanes) == home  # the project's handoffs too


def test_tokens_of_different_kinds_differ() -> None:
    # an agent and a project or memory of the same name are different keys
    assert len({partition_token(inbox_key("x")), partition_token(project_key("x", "y")),
                partition_token(mem_key("x")), partition_token("other:x")}) == 4


@pytest.mark.parametrize("lanes", [2, 3, 4, 8, 16])
def test_uniform_over_ten_thousand_keys(lanes: int) -> None:
    keys = [inbox_key(f"agent-{i}") for i in range(5000)]
    keys += [mailbox_key("ws", f"project-{i}") for i in range(2500)]
    keys += [mailbox_key(f"ws{i}", "p") for i in range(2500)]
    counts = Counter(lane_of(k, lanes) for k in keys)
    expected = len(keys) / lanes
    assert set(counts) == set(range(lanes))
    # binomial spread: 15 % is beyond five standard deviations at 16 lanes
    assert all(abs(c - expected) <= 0.15 * expected for c in counts.values()), counts


def test_growing_the_count_moves_keys_only_to_the_new_lane() -> None:
    keys = [inbox_key(f"agent-{i}") for i in range(10_000)]
    for n in (1, 2, 3, 7, 15):
        moved = 0
        for k in keys:
            before, after = lane_of(k, n), lane_of(k, n + 1)
            if before != after:
                assert after == n
                moved += 1
        assert abs(moved / len(keys) - 1 / (n + 1)) < 0.03


def test_identity_lives_on_the_home_lane_and_all_keys_on_none() -> None:
    assert all(lane_of(IDENT_KEY, n) == HOME_LANE for n in (1, 2, 9))
    with pytest.raises(ValueError):
        lane_of(ALL_KEYS, 2)


def test_a_memory_is_on_the_lane_its_id_names_and_new_ids_follow_the_namespace() -> None:
    from common.lanes import lane_of_id, memory_placement, mint

    for lanes in (2, 3, 8):
        for ns in ("global", "w/p", "w/p/_rules", "x"):
            home = lane_of(memory_placement(ns), lanes)
            made = mint(memory_placement(ns), lanes, lambda n, ns=ns: f"m-{ns}-{n}")
            assert lane_of(mem_key(made), lanes) == lane_of_id(made, lanes) == home
    # one namespace's memories start on one lane; many namespaces use every lane
    assert {lane_of(memory_placement(f"ns{i}"), 4) for i in range(64)} == {0, 1, 2, 3}


def test_lane_count_bounds() -> None:
    assert lane_of("inbox:a", 1) == 0
    for bad in (0, -1, LANES_MAX + 1):
        with pytest.raises(ValueError):
            lane_of("inbox:a", bad)
    with pytest.raises(ValueError):
        jump_hash(1, 0)


def test_jump_hash_stays_in_range_for_any_64_bit_key() -> None:
    for key in (0, 1, 2**63, 2**64 - 1, 2**64 + 5, -1):
        assert 0 <= jump_hash(key, 10) < 10


def test_a_lane_cluster_id_names_its_lane_count() -> None:
    from common.lanes import lanes_of_cluster_id
    from daemon.lanes.layout import lane_cluster_id

    assert lanes_of_cluster_id(lane_cluster_id("m-abc", 1, 2)) == 2
    assert lanes_of_cluster_id(lane_cluster_id("prod.lane3of4", 0, 8)) == 8
    assert lanes_of_cluster_id("m-abc") == 1
    assert lanes_of_cluster_id("team.lanes") == 1
    assert lanes_of_cluster_id("") is None
    # the partition rule: named from partition 2 on, 1 where an id names none
    from common.lanes import PARTITION_VERSION, partition_of_cluster_id
    assert lane_cluster_id("m-abc", 1, 2) == f"m-abc.lane1of2p{PARTITION_VERSION}"
    assert partition_of_cluster_id(lane_cluster_id("m-abc", 1, 2)) == PARTITION_VERSION
    assert partition_of_cluster_id("m-abc.lane1of2") == 1  # a member of partition 1
    assert lanes_of_cluster_id("m-abc.lane1of2") == 2
    assert partition_of_cluster_id("m-abc") is None
    # the longest id a member may configure, on the most lanes, is read whole
    # from a peer's answer (joining cuts it at lane_cluster_id_max_chars)
    from common import limits
    longest = lane_cluster_id("c" * limits.cluster_id_max_chars, 1023, 1024)
    assert len(longest) <= limits.lane_cluster_id_max_chars
    assert lanes_of_cluster_id(longest[:limits.lane_cluster_id_max_chars]) == 1024


def test_joining_members_of_another_lane_count_is_refused() -> None:
    from common.errors import ClusterMismatch
    from common.lanes import PARTITION_VERSION
    from daemon.replication.joining import check_lane_count
    from federation.bootstrap import SERVING, WAITING, PeerView

    views = [PeerView("node1", True, SERVING, cluster_id=f"m-abc.lane0of2p{PARTITION_VERSION}"),
             PeerView("node2", False, why="unreachable")]
    check_lane_count(views, 2)
    # a laned member of partition 1 (memories all on lane 0) is refused too
    with pytest.raises(ClusterMismatch, match="partition rule 1 and this member by rule"):
        check_lane_count([PeerView("node1", True, SERVING, cluster_id="m-abc.lane0of2")], 2)
    with pytest.raises(ClusterMismatch, match="node1 runs 2 lanes and this member 1"):
        check_lane_count(views, 1)
    with pytest.raises(ClusterMismatch, match="node1 runs 1 lane and this member 3"):
        check_lane_count([PeerView("node1", True, WAITING, cluster_id="m-abc")], 3)
    check_lane_count([PeerView("node1", True, WAITING, cluster_id="")], 3)
