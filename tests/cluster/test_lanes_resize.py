"""Changing the lane count offline (``ai-memory lanes resize``), the way an
operator does it: three real members in keys mode with two lanes hold mail in
every state, notifications read and unread, memories with links and grants,
users, keys, grants and a webhook subscription; the cluster settles and
stops; every member prints its fingerprint (equal), rewrites its own files
for three lanes, and starts with ``--lanes 3``. Every list reads as before,
a request that names only an id moved off the lane its id names finds it,
a claimed message is never handed out again, and the keys and grants hold.
(Fewer lanes, and none: the property test of tests/daemon/lanes/test_resize.py.)"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from common.lanes import lane_of, lane_of_id
from common.ops import inbox_key, mailbox_key
from daemon.lanes.layout import lane_db_path
from tests.cluster.harness import ROOT
from tests.cluster.lanes_harness import LaneCluster, ok
from tests.daemon.lanes.test_resize import op_ids_are_unique

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

WS = "rs"
PROJECTS = [f"p{i}" for i in range(6)]
AGENTS = [f"agent-{i}" for i in range(8)]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cli", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def settle(c: LaneCluster, timeout: float = 30.0) -> None:
    """Until every lane's version vector is the same on every member."""
    deadline = time.monotonic() + timeout
    seen: Any = None
    while time.monotonic() < deadline:
        seen = [[ok(c.call(nid, "GET", "/api/v1/cluster/status", lane=lane))["vv"]
                 for nid in c.ids] for lane in range(c.lanes)]
        if all(all(v == vvs[0] for v in vvs) for vvs in seen):
            return
        time.sleep(0.2)
    raise TimeoutError(f"the members did not settle: {seen}")


def send(c: LaneCluster, nid: str, frm: str, to: str, text: str) -> str:
    body = ok(c.call(nid, "POST", "/api/v1/messages", {
        "from_workspace": WS, "from_project": frm, "to_workspace": WS, "to_project": to,
        "body": text, "subject": text}), 201)
    return str(body["message_id"])


def pop(c: LaneCluster, nid: str, project: str) -> Any:
    return ok(c.call(nid, "POST", "/api/v1/messages/pop",
                     {"workspace": WS, "project": project, "request_id": f"pop-{time.time_ns()}"}
                     ))["message"]


def everything(c: LaneCluster, memory_ids: list[str]) -> dict[str, Any]:
    """What users read, through the client ports of every member."""
    out: dict[str, Any] = {}
    for nid in c.ids:
        for proj in PROJECTS:
            for box in ("inbox", "outbox"):
                got = ok(c.call(nid, "GET", f"/api/v1/messages?workspace={WS}&project={proj}"
                                            f"&box={box}&limit=200"))
                out[f"{nid} {proj} {box}"] = [
                    (m["id"], m["state"], m["subject"]) for m in got["messages"]]
        for agent in AGENTS:
            got = ok(c.call(nid, "GET", f"/api/v1/inbox?agent_id={agent}&limit=200",
                            headers={"X-Agent-Id": agent}))
            out[f"{nid} {agent}"] = sorted((m["id"], bool(m.get("read"))) for m in got["messages"])
        for mid in memory_ids:
            got = ok(c.call(nid, "GET", f"/api/v1/memories/{mid}"))
            out[f"{nid} {mid}"] = (got.get("memory") or got)["content"]
        links = ok(c.call(nid, "GET", f"/api/v1/links/{memory_ids[0]}"))
        out[f"{nid} links"] = sorted(json.dumps(x, sort_keys=True)
                                     for x in links.get("links", links))
        listed = ok(c.call(nid, "GET", "/api/v1/memories?limit=100"))
        out[f"{nid} memories"] = sorted(m["id"] for m in listed["memories"])
        out[f"{nid} users"] = sorted(u["name"] for u in ok(
            c.call(nid, "GET", "/api/v1/admin/users"))["users"])
    return out


def resize_every_member(c: LaneCluster, to: int) -> list[dict[str, Any]]:
    prints = []
    for nid in c.ids:
        done = cli("lanes", "resize", "--check", "--json", "--db", str(c.db(nid)))
        assert done.returncode == 0, done.stderr
        prints.append(json.loads(done.stdout)["digest"])
    assert len(set(prints)) == 1, prints  # settled members hold the same ops
    outs = []
    for nid in c.ids:
        done = cli("lanes", "resize", "--to", str(to), "--expect", prints[0], "--json",
                   "--db", str(c.db(nid)))
        assert done.returncode == 0, done.stderr
        outs.append(json.loads(done.stdout))
    return outs


def test_three_members_go_from_two_lanes_to_three_and_keep_everything(tmp_path: Path) -> None:
    c = LaneCluster(tmp_path, n=3, lanes=3)  # ports for three lanes; it starts with two
    c.lanes = 2
    try:
        c.start()
        for i, proj in enumerate(PROJECTS):
            ok(c.call(c.ids[i % 3], "POST", "/api/v1/sessions",
                      {"workspace": WS, "project": proj, "harness": "codex"}), 201)
        sent = {proj: [send(c, c.ids[j % 3], PROJECTS[(i + 1) % 6], proj, f"{proj}-{j}")
                       for j in range(4)] for i, proj in enumerate(PROJECTS)}
        sender = {m: PROJECTS[(i + 1) % 6] for i, proj in enumerate(PROJECTS) for m in sent[proj]}
        claimed = {proj: pop(c, "node2", proj)["id"] for proj in PROJECTS}
        cancelled = sent["p0"][3]
        ok(c.call("node3", "POST", "/api/v1/messages/cancel", {
            "workspace": WS, "project": sender[cancelled], "message_id": cancelled}))
        notes = {a: [ok(c.call(c.ids[j % 3], "POST", "/api/v1/notify",
                               {"target_agent_id": a, "title": f"{a}-{j}", "payload": "x"},
                               headers={"X-Agent-Id": "sender"}), 201)["id"] for j in range(2)]
                 for a in AGENTS}
        ok(c.call("node1", "POST", "/api/v1/inbox/read", {"agent_id": AGENTS[0], "ids": notes[AGENTS[0]][:1]},
                  headers={"X-Agent-Id": AGENTS[0]}))
        memory_ids = [ok(c.call(c.ids[i % 3], "POST", "/api/v1/memories", {
            "title": f"m{i}", "content": f"content {i}", "namespace": f"ns{i % 4}",
            "tier": "long"}), 201)["id"] for i in range(8)]
        ok(c.call("node1", "POST", "/api/v1/links", {
            "source_id": memory_ids[0], "target_id": memory_ids[1], "relation": "related_to"}),
            201)
        ok(c.call("node1", "POST", "/api/v1/admin/users", {"name": "ann"}), 201)
        ann = ok(c.call("node1", "POST", "/api/v1/admin/keys", {"user": "ann"}), 201)["key"]
        ok(c.call("node2", "POST", "/api/v1/admin/grants",
                  {"user": "ann", "workspace": WS, "project": "p1", "access": "write"}), 201)
        sub = ok(c.call("node1", "POST", "/api/v1/subscriptions", {
            "url": "https://93.184.215.14/hook", "events": ["memory_store"]}), 201)
        settle(c)
        before = everything(c, memory_ids)
        c.stop()

        outs = resize_every_member(c, 3)
        assert all(o["from"] == 2 and o["to"] == 3 for o in outs)
        own = ("promises", "webhook_subscriptions")  # each member's own
        assert len({json.dumps({k: v for k, v in o["rows"].items() if k not in own},
                               sort_keys=True) for o in outs}) == 1, outs
        assert len({o["moved_ids"] for o in outs}) == 1 and outs[0]["moved_ids"] > 0, outs
        assert all(Path(o["old_files"]).is_dir() for o in outs)
        for nid in c.ids:
            for lane in range(3):
                op_ids_are_unique(Path(lane_db_path(str(c.db(nid)), lane)))
        c.lanes = 3
        c.start()
        assert everything(c, memory_ids) == before
        started = {nid: c.log(nid).read_text().rfind("starting 3 lanes") for nid in c.ids}

        # Ids the change left off the lane they name are found by id alone.
        moved = [m for proj in PROJECTS for m in sent[proj] if m not in claimed.values()
                 and m != cancelled and lane_of_id(m, 3) != lane_of(mailbox_key(WS, proj), 3)]
        assert moved, sent
        ok(c.call("node2", "POST", "/api/v1/messages/cancel", {
            "workspace": WS, "project": sender[moved[0]], "message_id": moved[0]}))
        reply = ok(c.call("node3", "POST", "/api/v1/messages", {
            "from_workspace": WS, "from_project": "p4", "to_workspace": WS, "to_project": "p5",
            "body": "answer", "in_reply_to": moved[-1]}), 201)
        assert reply["message_id"]
        to, moved_note = next((a, n) for a in AGENTS for n in notes[a]
                              if lane_of_id(n, 3) != lane_of(inbox_key(a), 3))
        ok(c.call("node1", "POST", "/api/v1/notify", {
            "target_agent_id": "sender", "title": "re", "payload": "y", "reply_to": moved_note},
            headers={"X-Agent-Id": to}), 201)

        # Claims stay claimed: popping every mailbox dry hands out the rest, once.
        popped = []
        for proj in PROJECTS:
            while (m := pop(c, c.ids[len(popped) % 3], proj)) is not None:
                popped.append(m["id"])
        left = {m for proj in PROJECTS for m in sent[proj]} - set(claimed.values()) - {
            cancelled, moved[0]} | {reply["message_id"]}
        assert sorted(popped) == sorted(left), (popped, left)

        # Keys and grants as before; node1's subscription is on its every lane, the new one too.
        assert c.call("node1", "POST", "/api/v1/messages", {
            "from_workspace": WS, "from_project": "p1", "to_workspace": WS, "to_project": "p1",
            "body": "from ann"}, key=ann)[0] == 201
        assert c.call("node1", "POST", "/api/v1/messages", {
            "from_workspace": WS, "from_project": "p2", "to_workspace": WS, "to_project": "p1",
            "body": "not ann's"}, key=ann)[0] == 403
        for lane in range(3):
            subs = ok(c.call("node1", "GET", "/api/v1/subscriptions", lane=lane))
            assert [s["id"] for s in subs["subscriptions"]] == [sub["id"]], (lane, subs)
        for nid in c.ids:  # no member took another's op for one it lost
            assert "lost state" not in c.log(nid).read_text()[started[nid]:], nid
    except Exception:
        print(c.logs())
        raise
    finally:
        c.stop()
