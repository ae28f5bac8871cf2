"""Which sends the entry node checks against the store before the owner
decides (federation/routing.py): only ids that can repeat."""

from __future__ import annotations

import uuid

from common.randomid import uuid4, uuid7
from daemon.schemas.ids import RECORD_NAMESPACE
from federation.requests import MailSend
from federation.routing import is_retryable_id, needs_decided_check


def _send(mid: object) -> MailSend:
    return MailSend(mailbox="mbox:w/p", body={"id": mid})


def test_fresh_ids_skip_the_store_lookup() -> None:
    # What the send service mints (uuid7) and what older builds minted (uuid4)
    # name one send each: looking them up would be a read per send for nothing
    # (it halved 1-node send+pop when ids became uuid7 and this said "uuid4 only").
    for mid in (uuid7(), uuid4()):
        assert not is_retryable_id(mid)
        assert needs_decided_check(_send(mid)) is None


def test_ids_that_can_repeat_are_looked_up() -> None:
    keyed = str(uuid.uuid5(RECORD_NAMESPACE, "msg:w/p:key-1"))  # an Idempotency-Key's id
    for mid in (keyed, "imported-id-1", "", 42):
        assert is_retryable_id(mid)
    assert needs_decided_check(_send(keyed)) == keyed


def test_only_sends_are_checked() -> None:
    assert needs_decided_check(object()) is None
