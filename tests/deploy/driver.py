"""The client host's agent: a JSON-lines server run inside the client namespace.

How it works: the test starts ``ip netns exec CLIENT python tests/deploy/driver.py
[--ca-cert FILE]`` once and writes one JSON request a line to its stdin; the
driver answers one JSON line each on stdout. Only this process (and the CLI
the test runs in the same namespace) can reach the hosts, since the hosts'
network is private to the namespaces. Requests:

- ``http``: one call with httpx (what the SDK rides on), answered with status and body;
- ``sdk_notify`` / ``sdk_inbox``: the official SDK (``ai_memory.AiMemoryClient``);
- ``pop_many``: concurrent pops of one mailbox through several hosts at once;
- ``cert_serial``: the serial of the certificate a host presents to a new connection;
- ``workload_start`` / ``workload_stop``: a background workload (SDK notifies
  and project mail sent and popped through random hosts) that records every
  acknowledged notify and send and every pop's outcome, kept running across
  the faults and returned when stopped.

Why a long-lived driver: a Python start with httpx and the SDK costs about
half a second, and faults are timed in seconds. TLS is one switch: with
``--ca-cert`` every client verifies the hosts against the cluster CA
(httpx ``verify=``, as the SDK documents); without it they speak plain HTTP.
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import ssl
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlsplit

import httpx
from ai_memory import AiMemoryClient
from cryptography import x509

VERIFY: bool | str = True
TIMEOUT = 5.0
_local = threading.local()  # one httpx client per thread: kept-alive connections


def http(method: str, url: str, key: str, body: Any = None, params: dict | None = None,
         headers: dict | None = None, timeout: float = TIMEOUT) -> tuple[int, Any]:
    """One request; (0, error text) when no answer came."""
    hdrs = {"Authorization": f"Bearer {key}", **(headers or {})}
    if getattr(_local, "client", None) is None:
        _local.client = httpx.Client(verify=VERIFY, timeout=TIMEOUT)
    try:
        r = _local.client.request(method, url, json=body, params=params, headers=hdrs,
                                  timeout=timeout)
        try:
            return r.status_code, r.json()
        except ValueError:
            return r.status_code, r.text
    except httpx.HTTPError as exc:
        return 0, f"{type(exc).__name__}: {exc}"


def cert_serial(url: str) -> str:
    """The serial (hex) of the certificate ``url``'s host presents to a new
    connection, verified against the CA like every other client here."""
    parts = urlsplit(url)
    ctx = ssl.create_default_context(cafile=VERIFY if isinstance(VERIFY, str) else None)
    with socket.create_connection((parts.hostname, parts.port), timeout=TIMEOUT) as raw, \
            ctx.wrap_socket(raw, server_hostname=parts.hostname) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return format(x509.load_der_x509_certificate(der).serial_number, "X")


def sdk(url: str, key: str, agent: str) -> AiMemoryClient:
    return AiMemoryClient(url, api_key=key, agent_id=agent, timeout=TIMEOUT, verify=VERIFY)


def pop_once(url: str, key: str, ws: str, project: str, request_id: str) -> tuple[int, Any]:
    return http("POST", url + "/api/v1/messages/pop", key,
                {"workspace": ws, "project": project, "request_id": request_id})


def pop_until_decided(url: str, key: str, ws: str, project: str, request_id: str,
                      deadline: float) -> dict | None:
    """Retry one pop with the same request id until it is decided (docs/api.md: a
    503 leaves the outcome unknown, so a new id could strand a claimed message)."""
    while True:
        code, body = pop_once(url, key, ws, project, request_id)
        if code == 200:
            return body
        if time.monotonic() > deadline:
            raise TimeoutError(f"pop {request_id} undecided at {url}: {code} {body}")
        time.sleep(0.2)


class Workload:
    """SDK notifies and project mail through random hosts, with every outcome recorded."""

    def __init__(self, spec: dict) -> None:
        self.spec = spec
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.records: list[dict] = []
        self.open_pops: list[dict] = []  # pops whose outcome was not known when stopped
        self.threads = [threading.Thread(target=self._notifier, args=(i,), daemon=True)
                        for i in range(spec["notifiers"])]
        self.threads.append(threading.Thread(target=self._sender, daemon=True))
        self.threads += [threading.Thread(target=self._popper, args=(url,), daemon=True)
                         for url in spec["urls"]]

    def _record(self, rec: dict) -> None:
        rec["t"] = time.time()
        with self.lock:
            self.records.append(rec)

    def _notifier(self, n: int) -> None:
        s, rnd = self.spec, random.Random()
        clients = {url: sdk(url, s["key"], s["sender"]) for url in s["urls"]}
        i = 0
        while not self.stop.is_set() and i < s["max_notifies"] // s["notifiers"]:
            url = rnd.choice(s["urls"])
            to = rnd.choice(s["recipients"])
            body = f"w{n}-{i}-{uuid.uuid4().hex[:8]}"
            i += 1
            try:
                sent = clients[url].notify({"to": to, "subject": "load", "body": body})
                self._record({"kind": "notify", "ok": True, "to": to, "body": body,
                              "id": sent.get("id"), "url": url})
            except Exception as exc:  # any failure: not acknowledged
                self._record({"kind": "notify", "ok": False, "to": to, "body": body,
                              "url": url, "err": f"{type(exc).__name__}: {exc}"[:200]})
            time.sleep(s["gap"])
        for c in clients.values():
            c.close()

    def _sender(self) -> None:
        s, rnd, i = self.spec, random.Random(), 0
        while not self.stop.is_set():
            url = rnd.choice(s["urls"])
            body, idem = f"mail-{i}-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
            i += 1
            code, out = http("POST", url + "/api/v1/messages", s["key"],
                             {"to_workspace": s["ws"], "to_project": s["to_project"],
                              "from_workspace": s["ws"], "from_project": s["from_project"],
                              "body": body}, headers={"Idempotency-Key": idem})
            ok = code == 201
            self._record({"kind": "send", "ok": ok, "body": body, "url": url,
                          "id": out.get("message_id") if ok else None,
                          "err": None if ok else f"{code} {out}"[:200]})
            time.sleep(s["gap"] * 2)

    def _popper(self, url: str) -> None:
        s = self.spec
        request_id = None
        while not self.stop.is_set():
            request_id = request_id or f"pop-{uuid.uuid4().hex}"
            code, out = pop_once(url, s["key"], s["ws"], s["to_project"], request_id)
            if code == 200:
                msg = out.get("message")
                if msg:
                    self._record({"kind": "pop", "id": msg["id"], "url": url,
                                  "body": msg["body"], "request_id": request_id})
                request_id = None  # decided: the next pop takes a new id
                if not msg:
                    time.sleep(s["gap"])
            else:  # outcome unknown: retry this same id
                time.sleep(0.2)
        if request_id:
            with self.lock:
                self.open_pops.append({"url": url, "request_id": request_id})

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def finish(self) -> dict:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=TIMEOUT + 5)
        return {"records": self.records, "open_pops": self.open_pops}


WORKLOAD: Workload | None = None


def handle(req: dict) -> Any:
    global WORKLOAD
    op = req["op"]
    if op == "http":
        code, body = http(req["method"], req["url"], req["key"], req.get("body"),
                          req.get("params"), req.get("headers"), req.get("timeout", TIMEOUT))
        return {"status": code, "body": body}
    if op == "sdk_notify":
        with sdk(req["url"], req["key"], req["agent"]) as c:
            return c.notify({"to": req["to"], "subject": req["subject"], "body": req["body"]})
    if op == "sdk_inbox":
        with sdk(req["url"], req["key"], req["agent"]) as c:
            return c.inbox(agent_id=req["agent"], unread_only=False, limit=500)
    if op == "pop_many":  # one pop through each url at the same instant
        deadline = time.monotonic() + req.get("deadline", 20)
        with ThreadPoolExecutor(len(req["urls"])) as pool:
            futs = [pool.submit(pop_until_decided, url, req["key"], req["ws"], req["project"],
                                f"pop-{uuid.uuid4().hex}", deadline) for url in req["urls"]]
            return [{"url": url, "answer": f.result()} for url, f in zip(req["urls"], futs, strict=True)]
    if op == "pop_decide":  # settle a pop left open by the workload, same request id
        return pop_until_decided(req["url"], req["key"], req["ws"], req["project"],
                                 req["request_id"], time.monotonic() + req.get("deadline", 20))
    if op == "cert_serial":  # the serial of the certificate a host presents now
        return cert_serial(req["url"])
    if op == "workload_start":
        WORKLOAD = Workload(req["spec"])
        WORKLOAD.start()
        return {"started": True}
    if op == "workload_stop":
        assert WORKLOAD is not None
        out, WORKLOAD = WORKLOAD.finish(), None
        return out
    raise ValueError(f"unknown op {op!r}")


def main() -> None:
    global VERIFY
    ap = argparse.ArgumentParser()
    ap.add_argument("--ca-cert", help="the cluster CA: verify every host against it (TLS)")
    VERIFY = ap.parse_args().ca_cert or True
    for line in sys.stdin:
        try:
            out = {"ok": True, "result": handle(json.loads(line))}
        except Exception as exc:  # reported to the test, which decides
            out = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
