"""Background write load against a real cluster, with every acknowledgement recorded."""

from __future__ import annotations

import threading
import time

from tests.cluster.harness import Cluster


class Load:
    """Writers sending distinct notifies through the given nodes; acks are recorded."""

    def __init__(self, c: Cluster, nodes: list[str], per_thread: int = 2) -> None:
        self.c = c
        self.acked: list[tuple[float, str, str]] = []  # (ack time, coordinator, title)
        self.failed = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._n = 0
        self.threads = [threading.Thread(target=self._run, args=(nid,), daemon=True)
                        for nid in nodes for _ in range(per_thread)]
        for t in self.threads:
            t.start()

    def _title(self, nid: str) -> str:
        with self._lock:
            self._n += 1
            return f"{nid}-{self._n}"

    def _run(self, nid: str) -> None:
        while not self._stop.is_set():
            title = self._title(nid)
            try:
                code, _ = self.c.call(nid, "POST", "/api/v1/notify",
                                      {"target_agent_id": "bob", "title": title,
                                       "payload": f"body of {title}"},
                                      headers={"X-Agent-Id": "alice"}, timeout=5)
            except OSError:
                code = 0
            with self._lock:
                if code in (200, 201):
                    self.acked.append((time.monotonic(), nid, title))
                else:
                    self.failed += 1
            if code not in (200, 201):
                time.sleep(0.05)  # the node is restarting or out of quorum: do not spin

    def stop(self) -> None:
        self._stop.set()
        for t in self.threads:
            t.join(20)
