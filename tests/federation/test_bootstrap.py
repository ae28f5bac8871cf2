"""The first-start rule (federation/bootstrap.py): new cluster or lost disk."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from federation.bootstrap import (
    SERVING,
    WAITING,
    Bootstrap,
    PeerView,
    Refuse,
    Seed,
    Wait,
    decide,
    derived_cluster_id,
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
