from __future__ import annotations

import msgpack
import pytest

from common.ops import Op
from federation.messages import (
    Accept,
    Accepted,
    Ack,
    Prepare,
    Promise,
    PromiseNack,
    Rejected,
    Replicate,
    SyncOffer,
    decode_msg,
)

OP = Op(origin="a", seq=3, hlc=123 << 16, kind="msg.send", key="mbox:w/p",
        body={"id": "m1", "body": "héllo", "to_agent": None}, epoch=1025)

ALL = [
    Replicate(ops=(OP,), ack=True),
    Replicate(ops=(), ack=False),
    Ack(op_ids=(("a", 3), ("b", 1))),
    SyncOffer(vv={"a": 3, "b": 9}, fingerprint="f00"),
    Prepare(mailbox="mbox:w/p", epoch=2049, vv={"a": 3}),
    Promise(mailbox="mbox:w/p", epoch=2049, ops=(OP,)),
    PromiseNack(mailbox="mbox:w/p", promised=3074),
    Accept(mailbox="mbox:w/p", epoch=2049, ops=(OP, OP)),
    Accepted(mailbox="mbox:w/p", epoch=2049, op_ids=(("a", 3),)),
    Rejected(mailbox="mbox:w/p", promised=4097),
]


@pytest.mark.parametrize("msg", ALL, ids=lambda m: type(m).__name__)
def test_round_trip_through_msgpack(msg: object) -> None:
    raw = msgpack.unpackb(msgpack.packb(msg.to_wire(), use_bin_type=True), raw=False)  # type: ignore[attr-defined]
    assert decode_msg(raw) == msg


@pytest.mark.parametrize("raw", [
    None, [], ["nope"], ["ack"], ["ack", [["a"]]], ["ack", [["a", "1"]]],
    ["rep", [], "yes"], ["sync", [], "f"], ["prep", "m", "1", {}],
    ["acc", "m", 1, [["a", 1, 1, "Bogus Kind!", "k", 0, {}]]],
    ["acc", "m", 1, [["a", 1, 1, "nodot", "k", 0, {}]]],
    ["acc", "m", 1, [["a", 1, 1, "x." + "y" * 70, "k", 0, {}]]],
    ["accd", "m", True, []],
])
def test_malformed_messages_raise_value_error(raw: object) -> None:
    with pytest.raises(ValueError):
        decode_msg(raw)


def test_an_op_of_a_kind_from_a_newer_version_decodes_and_is_kept() -> None:
    raw = ["rep", [["a", 1, 5, "link.put", "link:1", 0, {"id": "1"}]], True]
    msg = decode_msg(raw)
    assert msg.ops[0].kind == "link.put" and msg.ops[0].body == {"id": "1"}  # type: ignore[union-attr]
    assert msg.to_wire() == raw
