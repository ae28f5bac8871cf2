"""A TCP proxy per directed link, so a test can cut, delay or blackhole the
traffic from one node to another (one-way partitions included).

Node i reaches node j only through ``Link(i, j)``; the test flips its mode:

* ``pass``: bytes flow both ways;
* ``refuse``: new connections are closed at once and open ones are cut
  (a crashed peer, fast failure);
* ``blackhole``: connections are accepted and read, but nothing is forwarded
  or answered (a paused or partitioned peer, slow failure: timeouts);
* ``delay``: every chunk waits ``delay_ms`` before it is forwarded.

The proxies run on their own event loop in a daemon thread, so both sync
and async tests can use them.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from dataclasses import dataclass, field

PASS, REFUSE, BLACKHOLE, DELAY = "pass", "refuse", "blackhole", "delay"


@dataclass
class Link:
    src: str
    dst: str
    target_port: int
    port: int = 0
    mode: str = PASS
    delay_ms: int = 0
    _server: asyncio.base_events.Server | None = None
    _conns: set[asyncio.StreamWriter] = field(default_factory=set)


class ProxyNet:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.links: dict[tuple[str, str], Link] = {}
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def _call(self, coro):  # type: ignore[no-untyped-def]
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=10)

    def add(self, src: str, dst: str, target_port: int) -> Link:
        link = Link(src, dst, target_port)
        self._call(self._start(link))
        self.links[(src, dst)] = link
        return link

    async def _start(self, link: Link) -> None:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            if link.mode == REFUSE:
                writer.close()
                return
            link._conns.add(writer)
            try:
                up_r, up_w = await asyncio.open_connection("127.0.0.1", link.target_port)
            except OSError:
                link._conns.discard(writer)
                writer.close()
                return
            link._conns.add(up_w)

            async def pump(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
                try:
                    while True:
                        data = await r.read(65536)
                        if not data:
                            break
                        while link.mode == BLACKHOLE:  # noqa: ASYNC110 - mode flips from another thread
                            await asyncio.sleep(0.05)
                        if link.mode == REFUSE:
                            break
                        if link.mode == DELAY and link.delay_ms:
                            await asyncio.sleep(link.delay_ms / 1000)
                        w.write(data)
                        await w.drain()
                except (ConnectionError, OSError):
                    pass
                finally:
                    with contextlib.suppress(Exception):
                        w.close()

            await asyncio.gather(pump(reader, up_w), pump(up_r, writer))
            link._conns.discard(writer)
            link._conns.discard(up_w)

        link._server = await asyncio.start_server(handle, "127.0.0.1", 0)
        link.port = link._server.sockets[0].getsockname()[1]

    def set(self, src: str, dst: str, mode: str, delay_ms: int = 0) -> None:
        link = self.links[(src, dst)]

        async def apply() -> None:
            link.mode, link.delay_ms = mode, delay_ms
            if mode == REFUSE:
                for w in list(link._conns):
                    with contextlib.suppress(Exception):
                        w.close()
                link._conns.clear()

        self._call(apply())

    def isolate(self, node: str, mode: str = BLACKHOLE) -> None:
        """Cut every link to and from ``node``."""
        for (src, dst) in self.links:
            if node in (src, dst):
                self.set(src, dst, mode)

    def heal(self) -> None:
        for (src, dst) in self.links:
            self.set(src, dst, PASS)

    def close(self) -> None:
        async def shutdown() -> None:
            for link in self.links.values():
                for w in list(link._conns):
                    with contextlib.suppress(Exception):
                        w.close()
                if link._server is not None:
                    link._server.close()
                    await link._server.wait_closed()

        with contextlib.suppress(Exception):
            self._call(shutdown())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self.loop.close()
