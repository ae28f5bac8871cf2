"""When `cluster up` restarts a node, when it reports one, and when it gives up.

Pure functions over a node's recent history, so the rules are tested without
processes (the supervisor, :mod:`cli.supervisor`, only applies them):

- Every exit the supervisor did not ask for is followed by a restart, after
  a wait that doubles with each exit in a row (``first``, 2x, 4x, ...) up to
  ``cap``. A node that stayed up ``reset_after`` seconds since its last
  start begins again at ``first``. Nothing else is touched: the other nodes
  keep running whatever happens to one.
- A node that exits ``report_after`` times in a row "keeps failing": the
  supervisor prints the last lines of its output then, and again every
  ``report_every`` exits after that, while still restarting it.
- The command ends only when the cluster cannot have started at all: no node
  ever answered its health check and every node failed its first
  ``give_up_after`` starts in a row (a bad ``--exe``, an unusable data
  directory, a flag the daemon refuses). Restarting would only repeat the
  same error N times a minute; once any node has served, or while any node
  is still running, `cluster up` never gives up.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from common import limits


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    first: float = limits.cluster_up_restart_backoff_first_secs
    cap: float = limits.cluster_up_restart_backoff_max_secs
    reset_after: float = limits.cluster_up_restart_reset_secs
    report_after: int = limits.cluster_up_report_after_failures
    report_every: int = limits.cluster_up_report_every_failures
    give_up_after: int = limits.cluster_up_give_up_failures


@dataclass(frozen=True, slots=True)
class Exit:
    """What to do after a node exited unasked."""

    failures: int  # exits in a row, this one included
    delay: float  # seconds to wait before the restart
    report: bool  # print the tail of its output: it keeps failing


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """What the give-up rule needs to know of one node."""

    ever_healthy: bool
    running: bool
    failures: int


def restart_delay(failures: int, first: float = limits.cluster_up_restart_backoff_first_secs,
                  cap: float = limits.cluster_up_restart_backoff_max_secs) -> float:
    """Wait before restart number ``failures`` (1-based): doubles, capped."""
    if failures < 1:
        return 0.0
    return float(min(cap, first * 2 ** min(failures - 1, 64)))


def after_exit(policy: RestartPolicy, failures_before: int, uptime: float) -> Exit:
    """The decision for a node that exited after ``uptime`` seconds of life."""
    failures = 1 if uptime >= policy.reset_after else failures_before + 1
    over = failures - policy.report_after
    report = over >= 0 and over % max(1, policy.report_every) == 0
    return Exit(failures, restart_delay(failures, policy.first, policy.cap), report)


def give_up(policy: RestartPolicy, nodes: Iterable[NodeRecord]) -> bool:
    """True when no node ever served and every one failed its first starts in a row."""
    records = list(nodes)
    return bool(records) and all(
        not n.ever_healthy and not n.running and n.failures >= policy.give_up_after
        for n in records)
