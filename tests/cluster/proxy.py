"""A TCP proxy per directed link, so a test can cut, delay or blackhole the
traffic from one node to another (one-way partitions included).

Node i reaches node j only through ``Link(i, j)``; the test flips its mode:

* ``pass``: bytes flow both ways;
* ``refuse``: new connections are closed at once and open ones are cut
  (a crashed peer, fast failure);
* ``blackhole``: connections are accepted and read, but nothing is forwarded
  or answered (a paused or partitioned peer, slow failure: timeouts);
* ``delay``: every chunk waits ``delay_ms`` before it is forwarded.

A link may carry more than one route (a listening port and the port it
forwards to): a node with lanes is reached on one port per lane, and
cutting the link cuts every one of them.

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
    # (listening port, target port) of every route after the first (a lane's)
    extra: list[tuple[int, int]] = field(default_factory=list)
    _servers: list[asyncio.base_events.Server] = field(default_factory=list)
    _conns: set[asyncio.StreamWriter] = field(default_factory=set)


class ProxyNet:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.links: dict[tuple[str, str], Link] = {}
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def _call(self, coro):  # type: ignore[no-untyped-def]
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=10)

    def add(self, src: str, dst: str, target_port: int, *, port: int = 0,
            extra: list[tuple[int, int]] | None = None) -> Link:
        """The link ``src`` -> ``dst``: listening on ``port`` (0: any free port)
        and forwarding to ``target_port``, plus every ``(listen, target)`` of
        ``extra``, all cut and healed together."""
        link = Link(src, dst, target_port, port=port, extra=list(extra or []))
        try:
            self._call(self._start(link))
        except BaseException:
            self._call(self._stop(link))
            raise
        self.links[(src, dst)] = link
        return link

    async def _stop(self, link: Link) -> None:
        for server in link._servers:
            server.close()
            await server.wait_closed()
        link._servers.clear()

    async def _start(self, link: Link) -> None:
        link._servers.append(await self._serve(link, link.port, link.target_port))
        link.port = link._servers[0].sockets[0].getsockname()[1]
        for listen, target in link.extra:
            link._servers.append(await self._serve(link, listen, target))

    async def _serve(self, link: Link, port: int, target_port: int) -> asyncio.base_events.Server:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            if link.mode == REFUSE:
                writer.close()
                return
            link._conns.add(writer)
            try:
                up_r, up_w = await asyncio.open_connection("127.0.0.1", target_port)
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

        return await asyncio.start_server(handle, "127.0.0.1", port)

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
                await self._stop(link)

        with contextlib.suppress(Exception):
            self._call(shutdown())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self.loop.close()
