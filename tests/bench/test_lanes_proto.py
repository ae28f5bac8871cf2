"""The lanes prototype (bench/lanes_proto.py, docs/lanes.md): its frames, and
two real lane processes where a notify sent to the lane that does not own
the recipient's inbox is handed over and lands on the owner only."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from pathlib import Path
from typing import Any

import msgpack
import pytest

from bench.lanes_proto import _LEN, HandoffClient, _Framed, _lane_proc
from bench.procs import free_ports, running_all
from common.lanes import lane_of
from common.ops import inbox_key


class _Recorder(_Framed):
    def __init__(self) -> None:
        super().__init__()
        self.frames: list[Any] = []

    def frame(self, obj: Any) -> None:
        self.frames.append(obj)


def _wire(obj: Any) -> bytes:
    payload = msgpack.packb(obj, use_bin_type=True)
    return _LEN.pack(len(payload)) + payload


def test_frames_split_at_any_byte() -> None:
    stream = b"".join(_wire([i, "notify", {"n": "x" * i}]) for i in range(50))
    for step in (1, 3, 7, len(stream)):
        r = _Recorder()
        for at in range(0, len(stream), step):
            r.data_received(stream[at:at + step])
        assert [f[0] for f in r.frames] == list(range(50))
        assert r.frames[49][2] == {"n": "x" * 49}


def test_a_closed_link_fails_every_waiting_call() -> None:
    async def run() -> None:
        client = HandoffClient()

        class _Sink:
            def write(self, data: bytes) -> None: ...
            def is_closing(self) -> bool:
                return False

        client.transport = _Sink()  # type: ignore[assignment]
        calls = [client.call("notify", [i]) for i in range(3)]
        client.connection_lost(None)
        for c in calls:
            with pytest.raises(ConnectionError):
                await c

    asyncio.run(run())


def _http(method: str, url: str, body: Any = None, agent: str = "") -> Any:
    req = urllib.request.Request(url, method=method,
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", "X-Agent-Id": agent})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


@pytest.mark.slow
def test_a_notify_on_the_wrong_lane_lands_on_the_owner(tmp_path: Path) -> None:
    shared = free_ports(1)[0]
    lanes = [_lane_proc(tmp_path, "t", i, 2, "key", shared) for i in range(2)]
    with running_all(lanes):
        for target in ("agent-a", "agent-b", "agent-c", "agent-d"):
            owner = lane_of(inbox_key(target), 2)
            other = lanes[1 - owner]
            sent = _http("POST", f"http://127.0.0.1:{other.health_port}/api/v1/notify",
                         {"target_agent_id": target, "title": "t", "agent_id": "sender"},
                         agent="sender")
            inbox = "/api/v1/inbox?consistency=local&agent_id=" + target
            at_owner = _http("GET", f"http://127.0.0.1:{lanes[owner].health_port}{inbox}",
                             agent=target)
            at_other = _http("GET", f"http://127.0.0.1:{other.health_port}{inbox}",
                             agent=target)
            assert [m["id"] for m in at_owner["messages"]] == [sent["id"]]
            assert at_other["messages"] == []
        handed = [_http("GET", f"http://127.0.0.1:{p.health_port}/proto/stats") for p in lanes]
        assert sum(h.get("handed", 0) for h in handed) == 4
        assert sum(h.get("received", 0) for h in handed) == 4
