"""The first-start rule (federation/bootstrap.py): new cluster or lost disk."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from federation.bootstrap import (
    CHECKING,
    SERVING,
    WAITING,
    Bootstrap,
    KeepCopy,
    PeerView,
    Refuse,
    Seed,
    SetAside,
    Wait,
    decide,
    decide_copy,
    derived_cluster_id,
    lost_to_collection,
)

MEMBERS = ("n1", "n2", "n3")


def waiting(nid: str, cid: str = "") -> PeerView:
    return PeerView(nid, True, WAITING, cluster_id=cid)


def serving(nid: str, cid: str = "c-1", fresh: bool = False) -> PeerView:
    return PeerView(nid, True, SERVING, cluster_id=cid, fresh=fresh)


def silent(nid: str) -> PeerView:
    return PeerView(nid, False, why="unreachable")


def test_every_member_waiting_bootstraps_with_one_id() -> None:
    d = decide([waiting("n2"), waiting("n3")], cluster_id="", member_ids=MEMBERS)
    assert d == Bootstrap(derived_cluster_id(MEMBERS))
    # Every member derives the same id, whatever order it lists them in.
    assert derived_cluster_id(["n3", "n1", "n2"]) == derived_cluster_id(MEMBERS)
    assert derived_cluster_id(["n1", "n2"]) != derived_cluster_id(MEMBERS)


def test_configured_id_wins_and_a_waiting_peer_may_carry_it() -> None:
    assert decide([waiting("n2", "c-7"), waiting("n3")], cluster_id="",
                  member_ids=MEMBERS) == Bootstrap("c-7")
    assert decide([waiting("n2"), waiting("n3")], cluster_id="c-7",
                  member_ids=MEMBERS) == Bootstrap("c-7")


def test_a_silent_member_makes_it_wait() -> None:
    d = decide([waiting("n2"), silent("n3")], cluster_id="", member_ids=MEMBERS)
    assert isinstance(d, Wait) and d.waiting_for == ("n3",)
    assert "n3 (unreachable)" in d.reason


def test_a_member_holding_data_seeds_it_even_with_others_silent() -> None:
    d = decide([serving("n2"), silent("n3")], cluster_id="", member_ids=MEMBERS)
    assert d == Seed(("n2",))
    d = decide([serving("n3"), serving("n2")], cluster_id="c-1", member_ids=MEMBERS)
    assert d == Seed(("n2", "n3"))


def test_fresh_serving_peers_count_as_new_and_lend_their_id() -> None:
    d = decide([serving("n2", "c-9", fresh=True), waiting("n3")], cluster_id="",
               member_ids=MEMBERS)
    assert d == Bootstrap("c-9")
    # ... but only with every member heard: a silent one may hold data.
    d = decide([serving("n2", "c-9", fresh=True), silent("n3")], cluster_id="",
               member_ids=MEMBERS)
    assert isinstance(d, Wait)
    # One fresh and one holding data: seeded from the one with data.
    d = decide([serving("n2", "c-9", fresh=True), serving("n3", "c-9")], cluster_id="",
               member_ids=MEMBERS)
    assert d == Seed(("n3",))


def test_existing_never_bootstraps() -> None:
    d = decide([waiting("n2"), waiting("n3")], cluster_id="", member_ids=MEMBERS,
               mode="existing")
    assert isinstance(d, Wait) and "existing" in d.reason
    assert decide([serving("n2")], cluster_id="", member_ids=MEMBERS,
                  mode="existing") == Seed(("n2",))


def test_another_clusters_data_is_refused() -> None:
    d = decide([serving("n2", "c-other"), waiting("n3")], cluster_id="c-mine",
               member_ids=MEMBERS)
    assert isinstance(d, Refuse) and "c-other" in d.reason and "c-mine" in d.reason
    d = decide([waiting("n2", "c-a"), waiting("n3", "c-b")], cluster_id="", member_ids=MEMBERS)
    assert isinstance(d, Refuse)
    # An older build answers without an id: it is a donor, checked after the copy.
    assert decide([serving("n2", "")], cluster_id="c-mine", member_ids=MEMBERS) == Seed(("n2",))


views = st.lists(
    st.one_of(
        st.builds(silent, st.just("x")),
        st.builds(waiting, st.just("x"), st.sampled_from(["", "c-1"])),
        st.builds(serving, st.just("x"), st.sampled_from(["", "c-1"]), st.booleans()),
    ),
    min_size=1, max_size=6,
).map(lambda vs: [PeerView(f"p{i}", v.answered, v.state, v.cluster_id, v.why, v.fresh)
                  for i, v in enumerate(vs)])


@given(views, st.sampled_from(["auto", "existing"]), st.sampled_from(["", "c-1"]))
def test_never_bootstraps_beside_data_or_silence(vs: list[PeerView], mode: str,
                                                 cid: str) -> None:
    """The safety rule: a member bootstraps only when every other member
    answered and none of them holds data; it never seeds from a peer
    without data; it never refuses a peer of its own cluster."""
    d = decide(vs, cluster_id=cid, member_ids=["me", *(v.node_id for v in vs)], mode=mode)
    holders = {v.node_id for v in vs if v.answered and v.state == SERVING and not v.fresh}
    if isinstance(d, Bootstrap):
        assert mode == "auto"
        assert all(v.answered for v in vs) and not holders
        assert not cid or d.cluster_id == cid
    if isinstance(d, Seed):
        assert set(d.donors) == holders and holders
    if holders and not isinstance(d, Refuse):
        assert isinstance(d, Seed)
    if isinstance(d, Refuse):
        ids = {v.cluster_id for v in vs if v.answered and v.cluster_id} | {cid}
        assert len(ids - {""}) > 1


# -- a copy that must recover: can the others still give it what it lacks? ------------

def logged(nid: str, collected: dict[str, int] | None) -> PeerView:
    return PeerView(nid, True, SERVING, cluster_id="c-1", collected=collected)


def test_a_copy_behind_what_every_holder_collected_lacks_those_ops() -> None:
    copy = {"n1": 100, "n2": 90, "n3": 80}
    views = [logged("n1", {"n1": 700, "n2": 650, "n3": 60}),
             logged("n2", {"n1": 500, "n2": 640, "n3": 70})]
    assert lost_to_collection(copy, views, took={"n1", "n2"}) == {
        "n1": (100, 500), "n2": (90, 640)}


def test_one_holder_that_still_logs_the_ops_is_enough() -> None:
    copy = {"n1": 100}
    views = [logged("n1", {"n1": 700}), logged("n2", {"n1": 100})]
    assert lost_to_collection(copy, views, took={"n1", "n2"}) == {}
    # ... but only if it took Reseeding: else it may collect them next.
    assert lost_to_collection(copy, views, took={"n1"}) == {"n1": (100, 700)}


def test_nothing_known_without_a_holder_that_said() -> None:
    views = [logged("n1", None), PeerView("n2", False, why="timeout"),
             PeerView("n3", True, WAITING)]
    assert lost_to_collection({}, views, took={"n1", "n2", "n3"}) == {}
    assert lost_to_collection({}, [logged("n1", {"n2": 5})], took=set()) == {}


def test_an_origin_the_copy_never_saw_counts_from_zero() -> None:
    assert lost_to_collection({}, [logged("n1", {"n9": 3})], took={"n1"}) == {"n9": (0, 3)}


@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 50)), min_size=1, max_size=4),
       st.integers(0, 60), st.data())
def test_empty_exactly_when_the_holders_logs_cover_what_the_copy_lacks(
        peers: list[tuple[int, int]], have: int, data: st.DataObject) -> None:
    # One origin; each holder logs (floor, vv]. A floor is at most every
    # member's vector (collection needs every member's offer), and no
    # member's vector is below what the copy held (the old disk offered it).
    least_vv = min(vv for vv, _ in peers)
    floors = [min(f, least_vv) for _, f in peers]
    vvs = [max(vv, have) for vv, _ in peers]
    took = data.draw(st.sets(st.integers(0, len(peers) - 1), min_size=1))
    views = [logged(f"p{i}", {"o": floor}) for i, floor in enumerate(floors)]
    needed = set(range(have + 1, max(vvs[i] for i in took) + 1))  # what they hold, it lacks
    covered: set[int] = set()
    for i in took:
        covered |= set(range(floors[i] + 1, vvs[i] + 1))
    lost = lost_to_collection({"o": have}, views, took={f"p{i}" for i in took})
    assert (lost == {}) == (needed <= covered)


def test_a_copy_waits_for_a_silent_member_unless_a_holder_settles_it() -> None:
    copy = {"n1": 10}
    silent = PeerView("n3", False, why="timeout")
    assert isinstance(decide_copy(copy, [logged("n2", {"n1": 3}), silent], {"n2"}), KeepCopy)
    assert decide_copy(copy, [logged("n2", {"n1": 30}), silent], {"n2"}) == SetAside(
        {"n1": (10, 30)})
    waits = decide_copy(copy, [logged("n2", {"n1": 3}), silent], set())  # n2 did not take it
    assert isinstance(waits, Wait) and waits.waiting_for == ("n2", "n3")


def test_a_serving_member_that_did_not_take_the_message_is_waited_for() -> None:
    # Its Reseeding timed out, its hello did not: it may still collect over
    # the copy, so what it says settles nothing (review, 2026-12-05).
    views = [logged("n2", {"n1": 100}), logged("n3", {"n1": 100})]
    waits = decide_copy({"n1": 5}, views, set())
    assert isinstance(waits, Wait) and waits.waiting_for == ("n2", "n3")
    assert "did not take Reseeding" in waits.reason
    assert decide_copy({"n1": 5}, views, {"n2"}) == SetAside({"n1": (5, 100)})


def test_a_copy_among_members_without_a_database_to_serve_is_kept() -> None:
    # A whole cluster put back from backups: every member checks its copy.
    views = [PeerView("n2", True, CHECKING), PeerView("n3", True, WAITING)]
    assert isinstance(decide_copy({"n1": 10}, views, set()), KeepCopy)
    # An older build serving without saying what it collected: nothing known.
    assert isinstance(decide_copy({"n1": 10}, [logged("n2", None)], {"n2"}), KeepCopy)


def test_a_member_checking_its_copy_is_never_taken_for_an_empty_one() -> None:
    views = [PeerView("n2", True, CHECKING, cluster_id="c-1"), waiting("n3")]
    got = decide(views, cluster_id="c-1", member_ids=MEMBERS)
    assert isinstance(got, Wait) and got.waiting_for == ("n2",)
