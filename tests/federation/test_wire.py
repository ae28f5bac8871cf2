"""Every wire kind round-trips, and nothing malformed gets past its codec.

The kinds are enumerated from the registries and the unions they are built
from (peer messages, forwarded mailbox requests and their results), and the
values are generated from each dataclass's own type hints, so a new kind or
field is covered without touching this file. Every value goes through real
msgpack, as it does between nodes.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from common.errors import BadRequest, Unavailable
from common.ops import KINDS, Op
from daemon.replication import forwarding
from federation import requests as mail_requests
from federation.messages import PEER, Message, decode_msg
from federation.wire import Codec, WireError

INT = st.integers(min_value=-(2**63), max_value=2**63 - 1)
TEXT = st.text(max_size=12)
PLAIN = st.recursive(
    st.none() | st.booleans() | INT | TEXT | st.floats(allow_nan=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)
KIND = st.sampled_from([*sorted(KINDS), "link.put"])  # and a newer version's kind, kept
OPS = st.builds(Op, origin=TEXT, seq=INT, hlc=INT, kind=KIND, key=TEXT,
                body=st.dictionaries(TEXT, PLAIN, max_size=4), epoch=INT)


def strategy(tp: Any) -> st.SearchStrategy[Any]:
    """Values of a field type, read from the hint as the codec reads it."""
    if tp is Any:
        return PLAIN
    if tp is Op:
        return OPS
    simple = {str: TEXT, int: INT, bool: st.booleans()}
    if tp in simple:
        return simple[tp]
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return st.one_of(*(st.none() if a is type(None) else strategy(a) for a in args))
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return st.lists(strategy(args[0]), max_size=4).map(tuple)
    if origin is tuple:
        return st.tuples(*(strategy(a) for a in args))
    if origin is list:
        return st.lists(strategy(args[0]), max_size=4)
    if origin is dict:
        return st.dictionaries(strategy(args[0]), strategy(args[1]), max_size=4)
    raise AssertionError(f"no strategy for {tp!r}: teach this test the new field type")


def instances(cls: type) -> st.SearchStrategy[Any]:
    hints = typing.get_type_hints(cls)
    return st.builds(cls, **{f.name: strategy(hints[f.name]) for f in dataclasses.fields(cls)})


def through_msgpack(raw: Any) -> Any:
    return msgpack.unpackb(msgpack.packb(raw, use_bin_type=True), raw=False)


PEER_KINDS = typing.get_args(Message)
REQUEST_KINDS = typing.get_args(mail_requests.MailRequest)
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def test_registries_cover_their_unions() -> None:
    assert set(PEER.by_class) == set(PEER_KINDS) and len(PEER.by_tag) == len(PEER_KINDS)
    assert set(forwarding.REQUESTS.by_class) == set(REQUEST_KINDS)
    assert set(forwarding.RESULTS) == set(REQUEST_KINDS)


@pytest.mark.parametrize("cls", PEER_KINDS, ids=lambda c: c.__name__)
@FAST
@given(data=st.data())
def test_every_peer_message_round_trips(cls: type, data: st.DataObject) -> None:
    msg = data.draw(instances(cls))
    raw = through_msgpack(msg.to_wire())
    assert raw[0] == cls.TAG  # type: ignore[attr-defined]
    assert decode_msg(raw) == msg
    assert cls.from_wire(raw) == msg  # type: ignore[attr-defined]


@pytest.mark.parametrize("cls", REQUEST_KINDS, ids=lambda c: c.__name__)
@FAST
@given(data=st.data())
def test_every_mailbox_request_and_its_result_round_trip(cls: type, data: st.DataObject) -> None:
    req = data.draw(instances(cls))
    assert forwarding.decode_request(through_msgpack(forwarding.encode_request(req))) == req
    result = data.draw(strategy(forwarding.RESULTS[cls]))
    raw = through_msgpack(forwarding.encode_result(result))
    assert forwarding.decode_result(raw, cls) == result


def test_forwarded_requests_keep_the_map_form_older_nodes_send() -> None:
    # What nodes sent before the codec was derived: {type, fields=asdict(req)},
    # and before sent_at_ms existed, without it.
    old = {"type": "MailCancel", "fields": {"mailbox": "mbox:w/p", "message_ids": ["m1", "m2"],
                                            "by_workspace": "w", "by_project": "p"}}
    assert forwarding.decode_request(old) == mail_requests.MailCancel(
        mailbox="mbox:w/p", message_ids=("m1", "m2"), by_workspace="w", by_project="p")
    pop = mail_requests.MailPop(mailbox="mbox:w/p", request_id="r", claimer={"claimer_agent": "x"},
                        sent_at_ms=5)
    assert forwarding.encode_request(pop) == {"type": "MailPop",
                                              "fields": dataclasses.asdict(pop)}


# -- malformed input ------------------------------------------------------------

POISON = {1: 2}  # fits no field type: not a scalar, not a list, not a map with str keys


@pytest.mark.parametrize("cls", PEER_KINDS, ids=lambda c: c.__name__)
@FAST
@given(data=st.data())
def test_a_malformed_field_of_any_peer_message_is_a_value_error(
        cls: type, data: st.DataObject) -> None:
    raw = data.draw(instances(cls)).to_wire()
    names = [f.name for f in dataclasses.fields(cls)]
    i = data.draw(st.integers(0, len(names) - 1))
    raw[1 + i] = POISON
    with pytest.raises(WireError, match=names[i]):
        decode_msg(raw)
    assert PEER.by_class[cls].required == len(names)  # peer messages have no optional fields
    with pytest.raises(ValueError, match="fields"):
        decode_msg(raw[:-1])
    with pytest.raises(ValueError, match="fields"):
        decode_msg([*raw, "extra"])


@pytest.mark.parametrize("cls", REQUEST_KINDS, ids=lambda c: c.__name__)
@FAST
@given(data=st.data())
def test_a_malformed_field_of_any_mailbox_request_is_a_bad_request(
        cls: type, data: st.DataObject) -> None:
    wire = forwarding.encode_request(data.draw(instances(cls)))
    name = data.draw(st.sampled_from(sorted(wire["fields"])))
    with pytest.raises(BadRequest, match=name):
        forwarding.decode_request({**wire, "fields": {**wire["fields"], name: POISON}})
    with pytest.raises(BadRequest, match="unknown fields"):
        forwarding.decode_request({**wire, "fields": {**wire["fields"], "bogus": 1}})
    with pytest.raises(BadRequest, match="missing mailbox"):
        forwarding.decode_request({**wire, "fields": {k: v for k, v in wire["fields"].items()
                                                      if k != "mailbox"}})
    with pytest.raises(Unavailable):
        forwarding.decode_result({"value": POISON}, cls)


@pytest.mark.parametrize("raw", [
    None, [], {}, 7, ["nope"], [3], {"type": "MailSend"}, ["ack"], ["ack", [["a"]]],
    ["ack", [["a", "1"]]], ["ack", [["a", True]]], ["rep", [], "yes"], ["sync", [], "f"],
    ["prep", "m", "1", {}], ["acc", "m", 1, [["a", 1, 1, "Bogus Kind!", "k", 0, {}]]],
    ["acc", "m", 1, [[7, 1, 1, "msg.send", "k", 0, {}]]], ["acc", "m", 1, [["a", 1, 1]]],
    ["acc", "m", 1, [["a", 1, 1, "msg.send", "k", 0, []]]], ["accd", "m", True, []],
])
def test_malformed_peer_messages_name_their_fault(raw: object) -> None:
    with pytest.raises(WireError):
        decode_msg(raw)


@pytest.mark.parametrize("raw", [None, [], "MailSend", {"type": "Claims", "fields": {}},
                                 {"type": "MailSend", "fields": []}, {"type": "_Round"}])
def test_unknown_or_shapeless_mailbox_requests_are_bad_requests(raw: object) -> None:
    with pytest.raises(BadRequest):
        forwarding.decode_request(raw)


@pytest.mark.parametrize("raw", [None, 3, {"hops": 1}, {"req": None, "hops": "2"},
                                 {"req": None, "hops": -1}])
def test_malformed_forward_envelopes_are_bad_requests(raw: object) -> None:
    with pytest.raises(BadRequest):
        forwarding.decode_forward(raw)


@settings(max_examples=300, deadline=None)
@given(raw=st.one_of(PLAIN, st.tuples(st.sampled_from(sorted(PEER.by_tag)),
                                      st.lists(PLAIN, max_size=4)).map(lambda t: [t[0], *t[1]])))
def test_arbitrary_data_is_a_message_or_a_value_error(raw: Any) -> None:
    try:
        msg = decode_msg(raw)
    except ValueError:
        return
    assert decode_msg(through_msgpack(msg.to_wire())) == msg


def test_a_field_type_without_a_converter_fails_when_the_codec_is_built() -> None:
    @dataclasses.dataclass(frozen=True)
    class Odd:
        when: complex

    with pytest.raises(TypeError, match="no wire converter"):
        Codec(Odd, "odd")


def test_the_owners_real_answers_to_every_request_kind_pass_the_result_codec() -> None:
    # RESULTS is written down beside the codec; this holds it to what the
    # core (federation/claim.py) actually answers, through real msgpack.
    from common.ops import mailbox_key
    from tests.federation.cluster import Cluster

    mb = mailbox_key("w", "p")
    cl = Cluster(3)
    owner = cl.cores["n0"].owner_for(mb, cl.now)
    body = {"id": "m1", "to_workspace": "w", "to_project": "p", "to_agent": None,
            "from_workspace": "w", "from_project": "q", "subject": "s", "body": "b"}
    requests = [
        mail_requests.MailSend(mb, body),
        mail_requests.MailHold(mb, "m1", holder={"holder_session": "s1", "holder_agent": "web"}),
        mail_requests.MailRelease(mb, "m1", content={"subject": "s2", "body": "b2"},
                          holder={"holder_session": "s1"}),
        mail_requests.MailPop(mb, request_id="r1", claimer={"claimer_session": "s1"}),
        mail_requests.MailPop(mb, request_id="r2"),  # nothing pending
        mail_requests.MailSend(mb, {**body, "id": "m2"}),
        mail_requests.MailCancel(mb, ("m2",), by_workspace="w", by_project="q"),
        mail_requests.MailSend(mb, {**body, "id": "m3", "approval_required": True}),
        mail_requests.MailDecide(mb, "m3", True, decider={"by_user": "ann"}, reason="ok"),
        mail_requests.MailPop(mb, request_id="r3", claimer={"claimer_session": "s2"},
                              lease_ms=60_000, token="t1"),
        mail_requests.MailRenew(mb, "m3", "t1", lease_ms=30_000),
        mail_requests.MailComplete(mb, "m3", "t1", body={"result": "done", "note": "ok"}),
        mail_requests.MailExpire(mb),
        mail_requests.MailPurge(mb, {"id": "pg1", "workspace": "w", "project": "p",
                                     "scope": "project", "by_user": None, "reason": None}),
    ]
    assert {type(r) for r in requests} == set(REQUEST_KINDS)
    for token, req in enumerate(requests):
        cl.call(owner, "mailbox_request", token, req)
        cl.deliver()
        answer = cl.replies[token]
        assert not isinstance(answer, Exception), (req, answer)
        wire = through_msgpack(forwarding.encode_result(answer))
        decoded = forwarding.decode_result(wire, type(req))
        assert through_msgpack(forwarding.encode_result(decoded)) == wire, req
