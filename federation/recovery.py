"""Recovery: a member that lost its disk, and the fence against its old process.

Two pieces of state the core (:class:`federation.core.NodeCore`) keeps
beside the protocol, each with the rules that read and change it. Both are
pure: no clock (time is ``now_ms``), no I/O, and the one random draw (a
round id) comes from the core's seeded ``rng``.

* :class:`Recovery` -- this member's own recovery. A member whose store was
  created empty or restored, or that finds a peer holding more of its own
  ops than it does, asks every other member for its state
  (``RecoveryQuery``, first after a grace that lets its previous process's
  messages land, then every ``limits.recovery_query_interval_ms``). It is
  done once every answer of the current round is in and its version vector
  covers each, ours held past a gap included; then it raises its promises
  to the highest any member knows and fills with ``op.gap`` the ids of its
  own ops that no member holds (docs/federation.md, "A member that lost
  its disk"). Until then it gives no promise or accept and serves nothing.
* :class:`IncarnationFence` -- which process of each peer this node answers
  to. Once it has answered a peer's ``RecoveryQuery`` it holds the member to
  the incarnation that asked, so a message of an older process (one that
  could reuse an op id the new one takes) is dropped, and a late query of a
  replaced disk does not move the member back.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from common import limits
from common.errors import MemberRecovering
from common.randomid import incarnation_born_ms
from federation.messages import Message, RecoveryQuery, RecoveryState
from federation.versions import VersionVector


def _round_id(rng: random.Random) -> str:
    return f"{rng.getrandbits(64):016x}"


class Recovery:
    """This member's own recovery: the round its queries carry, what each
    peer answered in it, and when to ask next."""

    def __init__(self, rng: random.Random, grace_ms: int) -> None:
        self.grace_ms = grace_ms
        self.answers: dict[str, RecoveryState] = {}  # what each peer held when asked
        self.next_query_ms: int | None = None
        self.round = _round_id(rng)  # this process's queries

    def restart(self, rng: random.Random) -> None:
        """Begin again: a new round, no answers, the grace before the first query."""
        self.answers.clear()
        self.next_query_ms = None
        self.round = _round_id(rng)

    def finish(self) -> None:
        self.answers.clear()

    def waiting_for(self, peers: Sequence[str]) -> list[str]:
        return [p for p in peers if p not in self.answers]

    def refusal(self, peers: Sequence[str], now_ms: int) -> MemberRecovering:
        """The answer to a client while recovering, with when to come back."""
        missing = self.waiting_for(peers)
        why = (f"waiting for the state of {', '.join(missing)}" if missing
               else "catching up with the other members")
        # Before its first query the member waits out the grace: a client
        # told to come back in 1 s would be refused again until then.
        first = self.next_query_ms
        wait_ms = (self.grace_ms if first is None else max(0, first - now_ms))
        return MemberRecovering(
            f"this member is recovering (its database is new or restored): {why}",
            retry_after=round(1.0 + wait_ms / 1000, 1))

    def record(self, peer: str, state: RecoveryState) -> bool:
        """Keep ``peer``'s answer if it is to this round's query."""
        if state.round != self.round:
            return False
        self.answers[peer] = state
        return True

    def complete(self, seen: VersionVector, me: str, peers: Sequence[str]) -> bool:
        """Is every peer's answer in, and every op it named held here?"""
        if any(p not in self.answers for p in peers):
            return False
        if not all(seen.covers(self.answers[p].vv) for p in peers):
            return False
        # Ours, held by a peer past a gap (an accept of ours that reached
        # only it, say): not covered by its vector, but it may be the one
        # copy of an acknowledged claim besides the one we lost. Wait for it.
        return all((me, seq) in seen for p in peers for seq in self.answers[p].held_yours)

    def merged_promises(self) -> dict[str, int]:
        """Per mailbox, the highest epoch any answer names."""
        merged: dict[str, int] = {}
        for state in self.answers.values():
            for key, epoch in state.promises.items():
                merged[key] = max(merged.get(key, 0), int(epoch))
        return merged

    def lost_seqs(self, seen: VersionVector, me: str) -> tuple[list[int], int]:
        """The seqs of our own ops that no member holds (lost with our disk,
        never acknowledged), and the highest seq of ours any member holds."""
        known: set[int] = set()
        top = seen.max_seq(me)
        for state in self.answers.values():
            top = max(top, state.vv.get(me, 0), *state.held_yours)
            known.update(state.held_yours)
        floor = max([0, *(s.vv.get(me, 0) for s in self.answers.values())])
        lost = [seq for seq in range(floor + 1, top + 1)
                if (me, seq) not in seen and seq not in known]
        return lost, top

    def query_due(self, now_ms: int) -> bool:
        """Is it time to (re)send the query? Starts the grace on first call."""
        if self.next_query_ms is None:
            # Let what the member's previous process still had in flight land
            # (or be dropped) before the others describe what they hold.
            self.next_query_ms = now_ms + self.grace_ms
        if now_ms < self.next_query_ms:
            return False
        self.next_query_ms = now_ms + limits.recovery_query_interval_ms
        return True


class IncarnationFence:
    """Per peer, the incarnation this node answers to and the ones it replaced."""

    def __init__(self) -> None:
        self._current: dict[str, str] = {}  # per member, of its last RecoveryQuery
        self._retired: dict[str, dict[str, None]] = {}  # per member, replaced incarnations

    def current(self, peer: str) -> str:
        """The incarnation ``peer`` is held to ("" when none yet)."""
        return self._current.get(peer, "")

    def stale(self, peer: str, incarnation: str, msg: Message) -> bool:
        """Is ``msg`` from a process of ``peer`` that an answered
        ``RecoveryQuery`` replaced? After answering one, this node holds
        the member to the incarnation that asked: the answer told the new
        process which of its op ids this node holds, and the new process
        numbers its ops after every id the answers name. An op of the old
        process accepted after that could share an id with a new op, and
        the two copies of the id would differ for good (a lost write, or a
        lost claim). So every message of another incarnation is dropped
        from then on: replication, accepts, promises, acks, offers. A query
        from a new incarnation is the one message let through: it moves
        the member on (:meth:`moves_on`, :meth:`adopt`)."""
        current = self._current.get(peer)
        if not current or incarnation == current:
            return False
        if isinstance(msg, RecoveryQuery):
            # A newer disk announcing itself is let through, unless its
            # envelope contradicts it (the core then checks it is newer).
            return msg.incarnation != incarnation
        return True

    def moves_on(self, peer: str, incarnation: str) -> bool:
        """May a ``RecoveryQuery`` of ``incarnation`` make it the member's
        current one? Not if it was replaced already, nor if it was made
        before the current one (:func:`common.randomid.incarnation_born_ms`):
        then it is a late query of a disk lost before, and taking it would
        fence the live process off instead. Ids of the older, unordered
        form cannot be told apart by age: an ordered one wins over them,
        and between two of them the latest query wins, as before."""
        if incarnation in self._retired.get(peer, {}):
            return False
        current = self._current.get(peer)
        if not current or not incarnation or incarnation == current:
            return True
        born, now = incarnation_born_ms(incarnation), incarnation_born_ms(current)
        if born is None or now is None:
            return now is None
        return (born, incarnation) > (now, current)

    def adopt(self, peer: str, incarnation: str) -> bool:
        """Hold ``peer`` to ``incarnation`` from now on, retiring the one it
        replaces; False when it was the current one already."""
        current = self._current.get(peer)
        if current == incarnation:
            return False
        # From here on, what its previous processes still have in flight is
        # dropped (stale): the answer to this query is the last word on
        # which of its op ids they used.
        if current is not None and incarnation:
            self._retire(peer, current)
        self._current[peer] = incarnation
        return True

    def _retire(self, peer: str, incarnation: str) -> None:
        retired = self._retired.setdefault(peer, {})
        retired[incarnation] = None
        while len(retired) > limits.retired_incarnations_max:
            del retired[next(iter(retired))]  # the oldest retired first
