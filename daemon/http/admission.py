"""Deciding admission hooks for project mail (``message_send``).

The project-messaging document lets an operator put a policy in front of
mail: deciding hooks run before a message is inserted and may refuse it;
observers run only after a successful commit. Observers are ordinary webhook
subscriptions (event ``message_send``, scope and actor only). This module is
the deciding half.

Hooks come from the node's TOML, one ``[[mail.admission]]`` table each:

=============  ===========================================================
``url``        http(s) endpoint; checked by the webhook SSRF guard, also at
               every call (the resolved address must be allowed)
``secret``     HMAC key; the request carries the webhook signature headers
``timeout_ms`` per call (default ``limits.admission_timeout_ms``)
``on_error``   ``reject`` (default: fail closed, the send gets a 503) or
               ``allow`` (fail open) when the hook errs or times out
``workspace``, ``project``
               only sends to this recipient (either may be left out)
=============  ===========================================================

The hook receives ``{"event": "message_send", "phase": "admission",
"message": {...}}`` with exactly what would be stored (after secret
scrubbing and caps) and answers 200 with ``{"decision": "allow"}``,
``{"decision": "reject", "reason": "..."}`` or ``{"decision": "pending",
"reason": "..."}``. Any other answer is an error. The first rejection
refuses the send: 403 with code ``admission_rejected`` and the hook's
reason; nothing is written. ``pending`` (unless a later hook rejects) queues
the message awaiting an approver (:mod:`common.lifecycle`); :meth:`check`
returns the hook's reason for it. A saved edit cannot be held: there,
``pending`` refuses like a rejection. With no matching hook, sends are
unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from common import limits
from common.errors import BadRequest, Forbidden, Unavailable
from common.randomid import uuid4
from daemon.webhooks.signing import delivery_headers
from daemon.webhooks.ssrf import AddressPolicy, GuardedResolver, RefusedAddress, check_literal


@dataclass(frozen=True, slots=True)
class AdmissionHook:
    url: str
    secret: str
    timeout_ms: int = limits.admission_timeout_ms
    on_error: str = "reject"
    workspace: str | None = None
    project: str | None = None

    def __post_init__(self) -> None:
        if not self.url.startswith(("http://", "https://")):
            raise BadRequest(f"admission hook url {self.url!r} must be http(s)")
        if not self.secret:
            raise BadRequest("an admission hook needs a secret")
        if self.on_error not in ("reject", "allow"):
            raise BadRequest("admission on_error must be 'reject' or 'allow'")
        if not 1 <= self.timeout_ms <= limits.admission_timeout_max_ms:
            raise BadRequest(
                f"admission timeout_ms must be 1..{limits.admission_timeout_max_ms}")

    def matches(self, workspace: str, project: str) -> bool:
        return (self.workspace in (None, workspace)) and (self.project in (None, project))


@dataclass(frozen=True, slots=True)
class Held:
    """A hook answered ``pending``: the message waits for an approver."""

    reason: str | None
    hook: str


def parse_hooks(raw: Any) -> tuple[AdmissionHook, ...]:
    if not raw:
        return ()
    if not isinstance(raw, list) or len(raw) > limits.admission_hooks_max:
        raise BadRequest(f"[[mail.admission]] takes at most {limits.admission_hooks_max} hooks")
    try:
        return tuple(AdmissionHook(**dict(item)) for item in raw)
    except TypeError as exc:
        raise BadRequest(f"bad [[mail.admission]] entry: {exc}") from None


class Admission:
    def __init__(self, hooks: tuple[AdmissionHook, ...], policy: AddressPolicy,
                 metrics: Any, now_ms: Callable[[], int]) -> None:
        self.hooks = hooks
        self.now_ms = now_ms  # the node's clock: signatures carry the node's time
        self.policy = policy
        self.metrics = metrics
        self._session: aiohttp.ClientSession | None = None
        for hook in hooks:
            check_literal(hook.url, policy)  # refuse a literal bad address at start

    async def start(self) -> None:
        if self.hooks:
            connector = aiohttp.TCPConnector(resolver=GuardedResolver(self.policy),
                                            limit=limits.admission_connections_max)
            self._session = aiohttp.ClientSession(connector=connector)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def check(self, message: dict[str, Any], *, may_hold: bool = False) -> Held | None:
        """Raise unless every hook matching the recipient allows ``message``
        or (with ``may_hold``) holds it for approval: then :class:`Held`."""
        hooks = [h for h in self.hooks
                 if h.matches(str(message["to_workspace"]), str(message["to_project"]))]
        held: Held | None = None
        for hook in hooks:
            decision, reason = await self._ask(hook, message)
            self.metrics.inc("admission_decisions_total", decision=decision)
            if decision == "pending" and may_hold:
                held = held or Held(reason or None, hook.url)
                continue
            if decision in ("reject", "pending"):
                exc = Forbidden(f"send refused by admission policy: {reason or 'no reason given'}",
                                hook=hook.url)
                exc.code = "admission_rejected"
                raise exc
            if decision == "error":
                if hook.on_error == "reject":
                    raise Unavailable(f"admission hook unavailable ({reason}); send not accepted",
                                      retry_after=1.0, hook=hook.url)
        return held

    async def _ask(self, hook: AdmissionHook, message: dict[str, Any]) -> tuple[str, str]:
        assert self._session is not None
        body = json.dumps({"event": "message_send", "phase": "admission", "message": message},
                          sort_keys=True, separators=(",", ":")).encode()
        headers = delivery_headers(hook.secret, body, event="message_send.admission",
                                   delivery_id=uuid4(), now_ms=self.now_ms(),
                                   user_agent="ai-memory-admission")
        try:
            async with self._session.post(
                    hook.url, data=body, headers=headers, allow_redirects=False,
                    timeout=aiohttp.ClientTimeout(total=hook.timeout_ms / 1000)) as resp:
                raw = await resp.content.read(limits.admission_reply_max_bytes)
                if resp.status != 200:
                    return "error", f"HTTP {resp.status}"
        except (TimeoutError, aiohttp.ClientError, RefusedAddress, OSError) as exc:
            return "error", type(exc).__name__
        try:
            reply = json.loads(raw)
            decision = reply["decision"]
        except (ValueError, KeyError, TypeError):
            return "error", "unreadable reply"
        if decision not in ("allow", "reject", "pending"):
            return "error", f"unknown decision {decision!r}"
        reason = reply.get("reason")
        return decision, str(reason)[:500] if reason else ""
