"""Seeding a member that lost its disk (daemon/replication/seeding.py), against a real
donor node over loopback: the donor takes ``Reseeding`` before it hands
out its copy, so it no longer takes GC floors over the offer of the
member's lost disk (docs/federation.md, "A member that lost its disk")."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from daemon.api.app import build_app
from daemon.peer.client import PeerClient
from daemon.replication.seeding import seed_from_peers
from daemon.settings import ClusterSettings, Member, Settings, StoreSettings
from daemon.wiring import build_node
from federation.messages import SyncOffer
from store.backup import read_incarnation

SECRET = "s3cret-for-seeding"
DEAD = "http://127.0.0.1:9"


async def test_the_donor_drops_the_lost_disks_floor_before_it_gives_its_copy(
        tmp_path: Path, aiohttp_server) -> None:  # type: ignore[no-untyped-def]
    donor = await build_node(Settings(
        store=StoreSettings(db_path=str(tmp_path / "n1.db")),
        cluster=ClusterSettings(node_id="node1", secret=SECRET, initial_state="new",
                                peers=(Member("node2", DEAD), Member("node3", DEAD)))))
    await donor.start()
    try:
        server = await aiohttp_server(build_app(donor))
        url = str(server.make_url("")).rstrip("/")
        # node2's previous process offered what its (now lost) disk held.
        old = PeerClient("node2", {"node1": url}, SECRET, now_s=time.time)
        await old.start()
        try:
            await old.call("node1", "/peer/v1/msgs",
                           [SyncOffer({"node2": 7}, donor.core._fingerprint).to_wire()])
        finally:
            await old.close()
        assert donor.core.peer_vv.get("node2") == {"node2": 7}
        seeded = Settings(
            store=StoreSettings(db_path=str(tmp_path / "n2.db")),
            cluster=ClusterSettings(node_id="node2", secret=SECRET,
                                    peers=(Member("node1", url), Member("node3", DEAD))))
        assert await seed_from_peers(seeded) == "node1"
        assert "node2" not in donor.core.peer_vv  # no GC floor over the lost disk's offer
        assert donor.core.status(donor.now_ms())["peers"]["node2"]["reseeding"] is True
        with sqlite3.connect(seeded.store.db_path) as conn:
            assert read_incarnation(conn)
    finally:
        await donor.stop()
