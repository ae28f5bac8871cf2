"""The ports the services take: what of a node each service uses, as Protocols.

A service in :mod:`daemon.services` never names :class:`daemon.node.Node`.
Its first argument is typed by one of the narrow protocols below, and a
``Node`` satisfies every one of them structurally, so a handler still passes
``request.app[NODE]``; a test or a tool can pass anything else that has the
same few members. The protocols say, in one place, which part of the node a
domain reaches:

* :class:`StoreReads` -- the read queries of :class:`store.db.Store` that the
  services run (writes never go to the store directly: they are quorum
  writes);
* :class:`QuorumWriter` -- ``write``: stamp, persist, send, wait for W;
* :class:`ReadBarrier` -- ``read_barrier``: the R-quorum pull before a read;
* :class:`MailboxRouter` -- ``mailbox``: a mailbox request run at its owner;
* :class:`Clock` -- ``now_ms``, the node's one clock.

Then one protocol per domain combines what that domain needs
(:class:`RecordPorts` for memories, links, agents, notify, search, sync and
namespace subscriptions; :class:`AdminPorts`; :class:`MailPorts`;
:class:`PeerPorts`; :class:`StatusPorts`; :class:`StreamPorts`;
:class:`BackupPorts`). Members the node holds as attributes are read-only
properties here, so the node's concrete types (``Store``, ``Settings``)
satisfy the narrower ones.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from common.ops import Op
from common.vocab import Consistency
from daemon.settings import Settings
from store.reader import ReadPool

Row = dict[str, Any]
Items = list[tuple[str, str, dict[str, Any]]]


# -- the store's reads -------------------------------------------------------------
class MemoryReads(Protocol):
    @property
    def reads(self) -> ReadPool:
        """The read-only pool for the cross-record queries of :mod:`store.search`."""
        ...

    async def get_memory(self, memory_id: str, *, now_ms: int) -> Row | None: ...
    async def list_memories(self, *, namespace: str | None = None, tier: str | None = None,
                            tags: list[str] | None = None, min_priority: int | None = None,
                            agent_id: str | None = None, limit: int, offset: int = 0,
                            now_ms: int) -> list[Row]: ...
    async def memories_since(self, since_ms: int, *, limit: int, now_ms: int) -> list[Row]: ...


class NotifyReads(Protocol):
    async def inbox(self, agent_id: str, *, unread_only: bool, limit: int,
                    min_priority: int | None = None, since_ms: int | None = None,
                    tier: str | None = None, thread_id: str | None = None,
                    now_ms: int) -> list[Row]: ...
    async def notifications(self, ids: Iterable[str]) -> list[Row]: ...
    async def list_agents(self) -> list[Row]: ...
    async def get_agent(self, agent_id: str) -> Row | None: ...


class NoticeReads(Protocol):
    """What the notices count of an agent's notifications (:mod:`daemon.services.notices`)."""

    async def inbox_count(self, agent_id: str, *, unread_only: bool, now_ms: int) -> int: ...
    async def unread_senders(self, agent_id: str, *, now_ms: int,
                             limit: int) -> list[tuple[str, int]]: ...


class SessionReads(Protocol):
    """What a mailbox scope resolves through (:func:`daemon.services.scope.resolve`)."""

    async def get_session(self, session_id: str) -> Row | None: ...
    async def last_active_project(self) -> tuple[str, str] | None: ...


class MailReads(SessionReads, NoticeReads, Protocol):
    async def project_exists(self, workspace: str, project: str) -> bool: ...
    async def project_harnesses(self, workspace: str, project: str) -> set[str]: ...
    async def list_projects(self) -> list[Row]: ...
    async def message(self, msg_id: str) -> Row | None: ...
    async def mailbox_pending(self, workspace: str, project: str, *, limit: int,
                              agent: str | None = None, with_held: bool = False,
                              thread_id: str | None = None) -> list[Row]: ...
    async def mailbox_pending_count(self, workspace: str, project: str,
                                    agent: str | None = None) -> int: ...
    async def mailbox_messages(self, workspace: str, project: str, *, limit: int,
                               offset: int = 0, thread_id: str | None = None) -> list[Row]: ...
    async def outbox(self, from_workspace: str, from_project: str, *, limit: int,
                     pending_only: bool = True, with_held: bool = False,
                     thread_id: str | None = None) -> list[Row]: ...
    async def sent_messages(self, from_workspace: str, from_project: str, *, limit: int,
                            offset: int = 0, thread_id: str | None = None) -> list[Row]: ...
    async def mailbox_editing(self, workspace: str, project: str, *,
                              limit: int) -> list[Row]: ...
    async def mailbox_awaiting(self, workspace: str, project: str, *,
                               limit: int) -> list[Row]: ...
    async def due_lease_mailboxes(self, before_ms: int,
                                  limit: int = 100) -> list[tuple[str, str]]: ...


class StreamReads(Protocol):
    """The replay queries of the push streams (:mod:`daemon.services.streams`)."""

    async def notes_not_covered(self, agent_id: str, cursor: dict[str, int], *,
                                after: tuple[int, str, int] | None, limit: int,
                                now_ms: int) -> list[Row]: ...
    async def messages_not_covered(self, workspace: str, project: str, cursor: dict[str, int],
                                   *, after: tuple[int, str, int] | None, limit: int,
                                   agent: str | None = None) -> list[Row]: ...
    async def completions_not_covered(self, workspace: str, project: str,
                                      cursor: dict[str, int], *,
                                      after: tuple[int, str, int] | None,
                                      limit: int) -> list[Row]: ...
    async def requeues_not_covered(self, workspace: str, project: str,
                                   cursor: dict[str, int], *,
                                   after: tuple[int, str, int] | None, limit: int,
                                   agent: str | None = None) -> list[Row]: ...
    async def notifications(self, ids: Iterable[str]) -> list[Row]: ...


class LogReads(Protocol):
    """The op log's figures and the pulls a peer makes."""

    async def stats(self) -> dict[str, Any]: ...
    async def incarnation(self) -> str: ...
    async def ops_missing(self, vv: dict[str, int], limit: int,
                          bytes_max: int | None = None,
                          upto: Mapping[str, int] | None = None) -> list[Op]: ...
    async def ops_for_key(self, key: str, vv: dict[str, int] | None = None) -> list[Op]: ...
    async def collected_floor(self) -> dict[str, int]: ...


class RecordReads(MemoryReads, NotifyReads, Protocol):
    """The record reads (memories, links, agents, notifications)."""


class PurgeReads(MailReads, RecordReads, Protocol):
    """What a purge reads (:mod:`daemon.services.purge`)."""

    async def memory_ids_under(self, namespace: str, *, limit: int) -> list[str]: ...
    async def mailbox_projects(self, workspace: str) -> list[str]: ...
    async def purge_marks(self) -> list[Row]: ...


class StoreReads(PurgeReads, StreamReads, LogReads, Protocol):
    """Every store read a service runs; :class:`store.db.Store` is one."""


# -- the node's verbs --------------------------------------------------------------
class Clock(Protocol):
    def now_ms(self) -> int: ...


class QuorumWriter(Protocol):
    async def write(self, items: Items) -> list[Op]:
        """Returns the stamped ops once W members hold them (else QuorumNotMet)."""
        ...


class ReadBarrier(Protocol):
    async def read_barrier(self, key: str, consistency: Consistency = ...) -> None: ...


class MailboxRouter(Protocol):
    async def mailbox(self, req: Any) -> Any:
        """Run a mailbox request (send, pop, cancel, hold, release) at its owner."""
        ...


class LaneCalls(Protocol):
    """A node's other lanes (daemon/lanes/), for the few reads that span them."""

    def lane_elsewhere(self, key: str) -> int | None:
        """The lane that keeps ``key`` if not this one (None: here, or no lanes)."""
        ...

    async def lane_call(self, lane: int, name: str, payload: Any) -> Any: ...

    async def every_other_lane(self, name: str, payload: Any) -> list[Any]:
        """``lane_call`` on every other lane, their answers ([] without lanes)."""
        ...


class AdmissionCheck(Protocol):
    """:class:`daemon.http.admission.Admission`: None (allowed) or a hold for
    approval (``reason``), or it raises."""

    async def check(self, message: dict[str, Any], *, may_hold: bool = False) -> Any: ...


# -- one protocol per domain -------------------------------------------------------
class RecordPorts(Clock, QuorumWriter, ReadBarrier, LaneCalls, Protocol):
    """Memories, links, agents, notify, search, sync, namespace subscriptions."""

    @property
    def store(self) -> RecordReads: ...
    @property
    def settings(self) -> Settings: ...


class AdminPorts(RecordPorts, Protocol):
    @property
    def store(self) -> AdminReads: ...
    @property
    def node_id(self) -> str: ...
    def status(self) -> dict[str, Any]: ...


class AdminReads(RecordReads, LogReads, Protocol):
    pass


class MailPorts(Clock, QuorumWriter, ReadBarrier, MailboxRouter, LaneCalls, Protocol):
    @property
    def store(self) -> MailReads: ...
    @property
    def settings(self) -> Settings: ...
    @property
    def admission(self) -> AdmissionCheck | None: ...


class PurgePorts(Clock, QuorumWriter, ReadBarrier, MailboxRouter, LaneCalls, Protocol):
    @property
    def store(self) -> PurgeReads: ...
    @property
    def settings(self) -> Settings: ...


class ForwardTaker(Protocol):
    def take_forwards(self, peer: str, msgs: list[Any], incarnation: str = "") -> list[Any]: ...


class Settler(Protocol):
    async def settle(self) -> None: ...


class ForeignPush(Protocol):
    def on_foreign_push(self, peer: str, msg: Any, now_ms: int) -> Iterable[Any]: ...
    @property
    def collect_floor(self) -> dict[str, int]: ...


class PeerPorts(Clock, Protocol):
    @property
    def store(self) -> LogReads: ...
    @property
    def settings(self) -> Settings: ...
    @property
    def router(self) -> ForwardTaker: ...
    @property
    def runner(self) -> Settler: ...
    @property
    def core(self) -> ForeignPush: ...

    async def receive(self, peer: str, msgs: list[Any], incarnation: str = "") -> list[Any]: ...
    async def run(self, effects: Any, *, reply_peer: str | None = None,
                  replies: list[Any] | None = None) -> None: ...


class StatusPorts(Protocol):
    @property
    def store(self) -> LogReads: ...
    @property
    def peer_protocols(self) -> Mapping[str, Any]: ...
    def status(self) -> dict[str, Any]: ...


class Counter(Protocol):
    def inc(self, name: str, amount: float = 1, **labels: str) -> None: ...


class BackupPorts(Protocol):
    @property
    def settings(self) -> Settings: ...
    @property
    def node_id(self) -> str: ...
    @property
    def metrics(self) -> Counter: ...


class StreamPorts(Protocol):
    @property
    def store(self) -> StreamReads: ...
