"""A TCP proxy per directed link, so a test can cut, delay or blackhole the
traffic from one node to another (one-way partitions included).

Node i reaches node j only through ``Link(i, j)``; the test flips its mode:

* ``pass``: bytes flow both ways;
* ``refuse``: new connections are closed at once and open ones are cut
  (a crashed peer, fast failure);
* ``blackhole``: connections are accepted and read, but nothing is forwarded
  or answered (a paused or partitioned peer, slow failure: timeouts);
* ``delay``: every chunk is forwarded ``delay_ms`` after it arrived (a
  slow link: latency, in order, without a cap on throughput).

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
                # Reading and forwarding are apart, so a delay is latency: each
                # chunk leaves delay_ms after it came, in order, however many
                # follow it (waiting out each chunk's delay in turn would
                # also cap the link at one chunk per delay). In the other
                # modes a chunk is forwarded before the next is read, so a
                # blackholed link pushes back on its sender as before.
                loop = asyncio.get_running_loop()
                due: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue()
                held = [0]  # chunks queued and not yet forwarded

                async def passed(data: bytes) -> bool:
                    """Forward ``data`` now; False once the link refuses."""
                    while link.mode == BLACKHOLE:  # noqa: ASYNC110 - mode flips from another thread
                        await asyncio.sleep(0.05)
                    if link.mode == REFUSE:
                        return False
                    w.write(data)
                    await w.drain()
                    return True

                async def forward() -> None:
                    while (item := await due.get()) is not None:
                        at, data = item
                        if at > loop.time():
                            await asyncio.sleep(at - loop.time())
                        if not await passed(data):
                            break
                        held[0] -= 1
                        due.task_done()

                sender = asyncio.ensure_future(forward())
                try:
                    while not sender.done():
                        data = await r.read(65536)
                        if not data:
                            break
                        late = link.delay_ms / 1000 if link.mode == DELAY else 0.0
                        if not late and not held[0]:  # nothing delayed ahead of it
                            if not await passed(data):
                                break
                            continue
                        held[0] += 1
                        due.put_nowait((loop.time() + late, data))
                        if not late:  # forwarded (or the forwarder stopped) first
                            joined = asyncio.ensure_future(due.join())
                            await asyncio.wait({joined, sender},
                                               return_when=asyncio.FIRST_COMPLETED)
                            joined.cancel()
                    due.put_nowait(None)
                    await sender
                except (ConnectionError, OSError):
                    pass
                finally:
                    if not loop.is_closed():
                        sender.cancel()
                    with contextlib.suppress(Exception):
                        w.close()

            try:
                await asyncio.gather(pump(reader, up_w), pump(up_r, writer))
            except asyncio.CancelledError:
                # The proxy's shutdown: end quietly (asyncio's server logs a
                # cancelled connection task as an error in its callback).
                return
            finally:
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
            # every connection's pumps end here, not as garbage of a closed loop
            pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

        with contextlib.suppress(Exception):
            self._call(shutdown())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self.loop.close()
