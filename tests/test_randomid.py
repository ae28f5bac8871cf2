"""Buffered random ids: uuid4-shaped, unique, fresh after a fork."""

from __future__ import annotations

import os
import uuid

from common import randomid


def test_uuid4_shape_and_uniqueness() -> None:
    ids = [randomid.uuid4() for _ in range(5000)]
    assert len(set(ids)) == len(ids)
    assert all(uuid.UUID(i).version == 4 for i in ids)
    assert len(randomid.token_hex(12)) == 24


def test_a_forked_child_does_not_reuse_the_parents_bytes() -> None:
    randomid.uuid4()  # fill the parent's buffer
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.write(w, randomid.uuid4().encode())
        os._exit(0)
    os.close(w)
    child = os.read(r, 64).decode()
    os.close(r)
    os.waitpid(pid, 0)
    assert child != randomid.uuid4()


def test_incarnation_ids_order_by_birth_and_old_ids_have_none() -> None:
    early, late = randomid.incarnation_id(1_000), randomid.incarnation_id(2_000)
    assert early != randomid.incarnation_id(1_000)  # random beyond the time
    assert randomid.incarnation_born_ms(early) == 1_000
    assert randomid.incarnation_born_ms(late) == 2_000
    assert randomid.incarnation_id(5, "00000000000000ab") == "000000000005-00000000000000ab"
    for unordered in ("", "3f" * 16, "n0-1", "000000000005-xyz", "000000000005-" + "A" * 16):
        assert randomid.incarnation_born_ms(unordered) is None
