"""Buffered random ids: uuid4- and uuid7-shaped, unique, fresh after a fork;
uuid7 ids order by their time."""

from __future__ import annotations

import os
import time
import uuid

from common import randomid


def test_uuid4_shape_and_uniqueness() -> None:
    ids = [randomid.uuid4() for _ in range(5000)]
    assert len(set(ids)) == len(ids)
    assert all(uuid.UUID(i).version == 4 for i in ids)
    assert len(randomid.token_hex(12)) == 24


def test_uuid7_shape_time_and_order() -> None:
    ids = [randomid.uuid7(1_700_000_000_000 + i // 10) for i in range(5000)]
    assert len(set(ids)) == len(ids)
    parsed = [uuid.UUID(i) for i in ids]
    assert all(u.version == 7 and u.variant == uuid.RFC_4122 for u in parsed)
    assert all(u.int >> 80 == 1_700_000_000_000 + n // 10 for n, u in enumerate(parsed))
    # Ordered by millisecond as text too (what SQLite's TEXT index compares).
    firsts = [ids[n] for n in range(0, 5000, 10)]
    assert firsts == sorted(firsts)
    assert max(ids[:10]) < min(ids[10:20])
    for odd, expect in ((-5, 0), (1 << 60, (1 << 48) - 1), (12.9, 12)):  # clamped, not wrapped
        assert uuid.UUID(randomid.uuid7(odd)).int >> 80 == expect  # type: ignore[arg-type]
    now = randomid.uuid7()
    assert abs((uuid.UUID(now).int >> 80) - int(time.time() * 1000)) < 5_000


def test_uuid7_with_a_given_tail_is_that_tail_with_version_and_variant() -> None:
    tail = bytes(range(10))
    a, b = randomid.uuid7(1_234, tail), randomid.uuid7(1_234, tail)
    assert a == b  # deterministic: what the simulator's seeded ids need
    u = uuid.UUID(a)
    assert (u.version, u.variant, u.int >> 80) == (7, uuid.RFC_4122, 1_234)
    # The tail, but for the version and variant bits.
    got = u.bytes[6:]
    assert (got[0] & 0x0F, got[1], got[2] & 0x3F, got[3:]) == (
        tail[0] & 0x0F, tail[1], tail[2] & 0x3F, tail[3:])
    assert randomid.uuid7(1_234, bytes(10)) != randomid.uuid7(1_234, b"\xff" * 10)
    for bad in (b"", bytes(9), bytes(11)):
        try:
            randomid.uuid7(1, bad)
        except ValueError:
            continue
        raise AssertionError(f"tail of {len(bad)} bytes accepted")


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
