"""Child process for test_durability: writes ops forever, printing each
acknowledged op id as soon as ``apply_ops`` returns, until it is killed."""

from __future__ import annotations

import asyncio
import sys

from common import ops as K
from common.ops import Op
from store.db import Store


async def writer(store: Store, origin: str) -> None:
    seq = 0
    while True:
        seq += 1
        op = Op(origin, seq, seq, K.NOTE_NEW, K.inbox_key("bob"),
                {"id": f"{origin}-{seq}", "from": origin, "to": "bob", "title": "t",
                 "payload": "x" * 200, "priority": 5, "tier": "long", "created_at_ms": seq,
                 "expires_at_ms": None})
        await store.apply_ops([op], 0)
        sys.stdout.write(f"{origin} {seq}\n")
        sys.stdout.flush()


async def main(path: str, writers: int) -> None:
    store = await Store.open(path, "child")
    await asyncio.gather(*(writer(store, f"w{i}") for i in range(writers)))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
