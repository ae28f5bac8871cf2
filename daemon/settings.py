"""One validated, frozen settings object per node.

Sources, strongest first: command-line flags, ``AI_MEMORY_*`` environment
variables, a TOML file (``--config``), defaults. :func:`load_settings` is the
only place that reads the environment; everything else receives a
:class:`Settings`.

Peers are given as ``--quorum-peers`` entries, each ``URL`` or ``ID=URL``.
A bare URL's node id is its ``host:port``; a node's own id defaults to
``HOST:PORT`` of the address it serves, so a cluster started with plain URLs
(as upstream harnesses do) agrees on ids without extra flags.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from common import limits
from common.errors import BadRequest
from daemon.admission import AdmissionHook, parse_hooks
from daemon.streams import StreamSettings
from daemon.webhooks.config import WebhookSettings


@dataclass(frozen=True, slots=True)
class Member:
    node_id: str
    url: str


@dataclass(frozen=True, slots=True)
class ServerSettings:
    host: str = "127.0.0.1"
    port: int = 9077
    shutdown_grace_secs: float = 5.0


@dataclass(frozen=True, slots=True)
class StoreSettings:
    db_path: str = "ai-memory.db"


@dataclass(frozen=True, slots=True)
class ClusterSettings:
    node_id: str = "127.0.0.1:9077"
    peers: tuple[Member, ...] = ()
    write_quorum: int | None = None  # None: majority of members
    quorum_timeout_ms: int = limits.quorum_timeout_ms_default
    catchup_interval_secs: float = limits.catchup_interval_secs_default
    secret: str | None = None  # shared secret that signs peer requests
    # "existing" (default): a database created empty at start means this member
    # may have lost one, so it recovers from the others before it votes.
    # "new": bootstrapping a cluster; an empty database is a new member.
    initial_state: str = "existing"
    # Derived once (it is read on every peer request), not a setting.
    _members: tuple[str, ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        members = tuple(sorted({self.node_id, *(p.node_id for p in self.peers)}))
        object.__setattr__(self, "_members", members)

    @property
    def enabled(self) -> bool:
        return bool(self.peers)

    @property
    def member_ids(self) -> tuple[str, ...]:
        return self._members

    @property
    def w(self) -> int:
        n = len(self.member_ids)
        return self.write_quorum if self.write_quorum is not None else n // 2 + 1


@dataclass(frozen=True, slots=True)
class AuthSettings:
    # api key -> agent id. When set, X-API-Key proves identity and X-Agent-Id
    # must match the key's agent (or be absent).
    api_keys: Mapping[str, str] = field(default_factory=dict)
    require_api_key: bool = False


@dataclass(frozen=True, slots=True)
class MailSettings:
    default_workspace: str = "default"
    default_project: str | None = None
    admission: tuple[AdmissionHook, ...] = ()  # deciding hooks, daemon/admission.py


@dataclass(frozen=True, slots=True)
class NotifySettings:
    tier_ttl_secs: Mapping[str, int | None] = field(
        default_factory=lambda: dict(limits.tier_ttl_secs)
    )


@dataclass(frozen=True, slots=True)
class Settings:
    server: ServerSettings = ServerSettings()
    store: StoreSettings = StoreSettings()
    cluster: ClusterSettings = ClusterSettings()
    auth: AuthSettings = AuthSettings()
    mail: MailSettings = MailSettings()
    notify: NotifySettings = NotifySettings()
    webhooks: WebhookSettings = field(default_factory=WebhookSettings)
    streams: StreamSettings = field(default_factory=StreamSettings)
    log_level: str = "info"
    log_format: str = "text"  # "text" or "json" (one object per line), see daemon/logs.py
    # Fault-injection knob for tests and drills: this node's clock runs this
    # many ms ahead (negative: behind). Only from AI_MEMORY_DEBUG_CLOCK_OFFSET_MS.
    clock_offset_ms: int = 0

    @property
    def version(self) -> str:
        from common import __version__

        return __version__


def parse_peer(entry: str) -> Member:
    entry = entry.strip()
    if "=" in entry and not entry.startswith("http"):
        node_id, url = entry.split("=", 1)
    else:
        node_id, url = "", entry
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadRequest(f"peer {entry!r} is not an http(s) URL")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return Member(node_id=node_id.strip() or f"{parts.hostname}:{port}", url=url.rstrip("/"))


def parse_peers(raw: str | list[str] | tuple[str, ...] | None) -> tuple[Member, ...]:
    if not raw:
        return ()
    items = raw.split(",") if isinstance(raw, str) else list(raw)
    return tuple(parse_peer(i) for i in items if i.strip())


def _env(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(f"AI_MEMORY_{name}")
    return value if value not in (None, "") else None


Pick = Callable[[str, str, Mapping[str, Any], str, Any], Any]


def _cluster_settings(pick: Pick, c_cluster: Mapping[str, Any], node_id: str,
                      peers: tuple[Member, ...]) -> ClusterSettings:
    wq = pick("quorum_writes", "QUORUM_WRITES", c_cluster, "write_quorum", None)
    cluster = ClusterSettings(
        node_id=node_id,
        peers=peers,
        write_quorum=int(wq) if wq is not None else None,
        quorum_timeout_ms=int(
            pick("quorum_timeout_ms", "QUORUM_TIMEOUT_MS", c_cluster, "quorum_timeout_ms",
                 limits.quorum_timeout_ms_default)
        ),
        catchup_interval_secs=float(
            pick("catchup_interval_secs", "CATCHUP_INTERVAL_SECS", c_cluster,
                 "catchup_interval_secs", limits.catchup_interval_secs_default)
        ),
        secret=pick("cluster_secret", "CLUSTER_SECRET", c_cluster, "secret", None),
        initial_state=str(pick("initial_cluster_state", "INITIAL_CLUSTER_STATE", c_cluster,
                               "initial_state", "existing")),
    )
    if cluster.initial_state not in ("new", "existing"):
        raise BadRequest("--initial-cluster-state must be new or existing")
    n = len(cluster.member_ids)
    if cluster.write_quorum is not None and not 1 <= cluster.write_quorum <= n:
        raise BadRequest(f"--quorum-writes must be between 1 and {n} (members: {n})")
    if cluster.quorum_timeout_ms <= 0 or cluster.catchup_interval_secs <= 0:
        raise BadRequest("quorum timeout and catch-up interval must be positive")
    return cluster


def _tier_ttl(c_notify: Mapping[str, Any]) -> dict[str, int | None]:
    ttl = dict(limits.tier_ttl_secs)
    for tier, secs in c_notify.get("tier_ttl_secs", {}).items():
        if tier not in ttl:
            raise BadRequest(f"unknown tier {tier!r} in [notify].tier_ttl_secs")
        ttl[tier] = None if secs in (None, 0, "never") else int(secs)
    return ttl


def _webhook_settings(conf: Mapping[str, Any], env: Mapping[str, str]) -> WebhookSettings:
    c_hooks = dict(conf.get("webhooks", {}))
    loopback = _env(env, "ALLOW_LOOPBACK_WEBHOOKS")
    if loopback is not None:
        c_hooks["allow_loopback_webhooks"] = loopback.lower() in ("1", "true", "yes", "on")
    try:
        return WebhookSettings(**c_hooks)
    except (TypeError, ValueError) as exc:
        raise BadRequest(f"bad [webhooks] settings: {exc}") from None


def _stream_settings(conf: Mapping[str, Any]) -> StreamSettings:
    try:
        return StreamSettings(**dict(conf.get("streams", {})))
    except (TypeError, ValueError) as exc:
        raise BadRequest(f"bad [streams] settings: {exc}") from None


def load_settings(
    flags: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    config_path: str | Path | None = None,
) -> Settings:
    """Merge flags > env > TOML > defaults into one validated Settings."""
    flags = {k: v for k, v in (flags or {}).items() if v is not None}
    env = os.environ if env is None else env
    conf: dict[str, Any] = {}
    path = config_path or flags.get("config") or _env(env, "CONFIG")
    if path:
        with open(path, "rb") as fh:
            conf = tomllib.load(fh)
    c_server = conf.get("server", {})
    c_cluster = conf.get("cluster", {})
    c_auth = conf.get("auth", {})
    c_mail = conf.get("mail", {})
    c_notify = conf.get("notify", {})

    def pick(flag: str, env_name: str, section: Mapping[str, Any], key: str, default: Any) -> Any:
        if flag in flags:
            return flags[flag]
        value = _env(env, env_name)
        if value is not None:
            return value
        return section.get(key, default)

    host = str(pick("host", "HOST", c_server, "host", "127.0.0.1"))
    port = int(pick("port", "PORT", c_server, "port", 9077))
    db_path = str(
        flags.get("db") or env.get("AI_MEMORY_DB") or conf.get("store", {}).get("db") or "ai-memory.db"
    )
    peers = parse_peers(pick("quorum_peers", "QUORUM_PEERS", c_cluster, "peers", None))
    node_id = str(pick("node_id", "NODE_ID", c_cluster, "node_id", f"{host}:{port}"))
    peers = tuple(p for p in peers if p.node_id != node_id)
    cluster = _cluster_settings(pick, c_cluster, node_id, peers)
    ttl = _tier_ttl(c_notify)
    keys = dict(c_auth.get("api_keys", {}))
    webhooks = _webhook_settings(conf, env)
    return Settings(
        server=ServerSettings(host=host, port=port),
        store=StoreSettings(db_path=db_path),
        cluster=cluster,
        auth=AuthSettings(api_keys=keys, require_api_key=bool(c_auth.get("require_api_key", False))),
        mail=MailSettings(
            default_workspace=str(c_mail.get("default_workspace", "default")),
            default_project=c_mail.get("default_project"),
            admission=parse_hooks(c_mail.get("admission")),
        ),
        notify=NotifySettings(tier_ttl_secs=ttl),
        webhooks=webhooks,
        streams=_stream_settings(conf),
        log_level=str(pick("log_level", "LOG_LEVEL", conf, "log_level", "info")),
        log_format=_log_format(str(pick("log_format", "LOG_FORMAT", conf, "log_format", "text"))),
        clock_offset_ms=int(_env(env, "DEBUG_CLOCK_OFFSET_MS") or 0),
    )


def _log_format(value: str) -> str:
    if value not in ("text", "json"):
        raise BadRequest(f"log format must be text or json, not {value!r}")
    return value


__all__ = ["Member", "Settings", "load_settings", "parse_peers"]
