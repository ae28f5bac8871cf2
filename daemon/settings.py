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
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from common import limits
from common.errors import BadRequest
from daemon.http.admission import AdmissionHook, parse_hooks
from daemon.http.stream_hub import StreamSettings
from daemon.identity.secrets import check_root_secret
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
    # Lane processes of this node (docs/lanes.md); 1: the node is one process.
    lanes: int = 1
    # Lane i listens on port + lane_port_offset * (i + 1) for its peers (and
    # for clients that go straight to it); only with more than one lane.
    lane_port_offset: int = limits.lane_port_offset_default
    # Which lane this process is, and the private directory of the lanes'
    # local sockets: set by the supervisor (daemon/lanes/supervisor.py) for
    # its lane processes, never by users.
    lane: int = 0
    lane_dir: str = ""

    @property
    def laned(self) -> bool:
        """True in a lane process of a node with more than one lane."""
        return self.lanes > 1

    def lane_port(self, lane: int) -> int:
        """The port lane ``lane`` of a member serving on ``port`` listens on for its peers."""
        return lane_port(self.port, lane, self.lane_port_offset)

    @property
    def peer_port(self) -> int:
        """Where this process's peers reach it: the lane's own port, or the node's."""
        return self.lane_port(self.lane) if self.laned else self.port


def lane_port(port: int, lane: int, offset: int) -> int:
    """Lane ``lane`` of a member whose client port is ``port``: its own port."""
    return port + offset * (lane + 1)


@dataclass(frozen=True, slots=True)
class TlsSettings:
    """HTTPS for this node's listener and mutual TLS to and from its peers
    (:mod:`daemon.runtime.tls`). ``ca`` lists the PEM files (each may be a bundle)
    of the cluster CAs this node trusts for peers and client certificates;
    two during a CA rotation. Relative paths in a TOML file are resolved
    against the file's directory."""

    cert: str | None = None
    key: str | None = None
    ca: tuple[str, ...] = ()

    @property
    def enabled(self) -> bool:
        return self.cert is not None


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
    # What a member that starts with no database does (federation/bootstrap.py):
    # "auto" (default): asks the other members; it is seeded from one that
    # holds the cluster's data, waits while any is silent, and bootstraps
    # only together with all of them, each new too. "existing": never
    # bootstraps, waits to be seeded. "new": bootstraps at once (the override
    # for a cluster whose other members are gone for good).
    initial_state: str = "auto"
    # Which cluster this member belongs to; stored in its database at the
    # first start. "": derived from the member ids (bootstrap.derived_cluster_id).
    cluster_id: str = ""
    # Accept http:// peers that are not loopback (--insecure-plaintext-peers).
    insecure_plaintext_peers: bool = False
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
class StaticKey:
    """One key written in the node's TOML (``[[auth.static_keys]]``): a user's
    key with its grants, for a cluster without replicated identity records
    (and for tests). ``grants`` entries read ``WORKSPACE/PROJECT:read|write``
    (``WORKSPACE/*`` for every project of the workspace)."""

    secret: str
    user: str
    agent: str | None = None
    root: bool = False
    grants: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class AuthSettings:
    # "anonymous": the agent is the claimed X-Agent-Id; "keys": every request
    # but GET /health carries a key (docs/security.md).
    mode: str = "anonymous"
    # api key -> agent id (the legacy form): a root key bound to that agent.
    # A presented key proves identity in either mode; X-Agent-Id must match.
    api_keys: Mapping[str, str] = field(default_factory=dict)
    # Legacy switch: true means keys mode.
    require_api_key: bool = False
    static_keys: tuple[StaticKey, ...] = ()
    root_username: str | None = None  # what from_owner_user says for a root key
    # A root key created at start if absent (AI_MEMORY_ROOT_KEY, or the file
    # [auth].bootstrap_root_key_file names); see daemon/identity/bootstrap.py.
    bootstrap_root_key: str | None = field(default=None, repr=False)
    # Serve anonymous mode on a non-loopback address anyway (--insecure-anonymous).
    insecure_anonymous: bool = False

    def __post_init__(self) -> None:
        if self.require_api_key and self.mode == "anonymous":
            object.__setattr__(self, "mode", "keys")
        if self.mode not in ("anonymous", "keys"):
            raise BadRequest(f"auth mode must be anonymous or keys, not {self.mode!r}")

    @property
    def keys_mode(self) -> bool:
        return self.mode == "keys"


@dataclass(frozen=True, slots=True)
class MailSettings:
    default_workspace: str = "default"
    default_project: str | None = None
    admission: tuple[AdmissionHook, ...] = ()  # deciding hooks, daemon/http/admission.py


@dataclass(frozen=True, slots=True)
class NotifySettings:
    tier_ttl_secs: Mapping[str, int | None] = field(
        default_factory=lambda: dict(limits.tier_ttl_secs)
    )


@dataclass(frozen=True, slots=True)
class Settings:
    server: ServerSettings = ServerSettings()
    tls: TlsSettings = TlsSettings()
    store: StoreSettings = StoreSettings()
    cluster: ClusterSettings = ClusterSettings()
    auth: AuthSettings = AuthSettings()
    mail: MailSettings = MailSettings()
    notify: NotifySettings = NotifySettings()
    webhooks: WebhookSettings = field(default_factory=WebhookSettings)
    streams: StreamSettings = field(default_factory=StreamSettings)
    log_level: str = "info"
    log_format: str = "text"  # "text" or "json" (one object per line), see daemon/runtime/logs.py
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
                               "initial_state", "auto")),
        cluster_id=str(pick("cluster_id", "CLUSTER_ID", c_cluster, "cluster_id", "")).strip(),
        insecure_plaintext_peers=_truthy(pick(
            "insecure_plaintext_peers", "INSECURE_PLAINTEXT_PEERS", c_cluster,
            "insecure_plaintext_peers", False)),
    )
    if cluster.initial_state not in ("auto", "new", "existing"):
        raise BadRequest("--initial-cluster-state must be auto, new or existing")
    if len(cluster.cluster_id) > limits.cluster_id_max_chars or any(
            not (ch.isalnum() or ch in "-_.") for ch in cluster.cluster_id):
        raise BadRequest(f"cluster id must be at most {limits.cluster_id_max_chars} letters, "
                         "digits, '-', '_' or '.'")
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


def _tls_settings(pick: Pick, conf: Mapping[str, Any], base: Path | None) -> TlsSettings:
    c_tls = conf.get("tls", {})

    def path(flag: str, env_name: str, key: str) -> Any:
        value = pick(flag, env_name, {}, key, None)
        if value is not None:  # a flag or the environment: as given
            return [value] if isinstance(value, str) else value
        value = c_tls.get(key)
        if value is None:
            return None
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
            raise BadRequest(f"[tls] {key} must be a path or a list of paths")
        return [str(base / i) if base is not None else i for i in items]

    cert, key = path("tls_cert", "TLS_CERT", "cert"), path("tls_key", "TLS_KEY", "key")
    ca = path("tls_ca", "TLS_CA", "ca") or []
    if isinstance(ca, tuple | list) and len(ca) == 1 and "," in ca[0]:
        ca = [c for c in ca[0].split(",") if c.strip()]  # --tls-ca A,B
    for name, value in (("cert", cert), ("key", key)):
        if value is not None and len(value) != 1:
            raise BadRequest(f"[tls] {name} is one path")
    if (cert is None) != (key is None):
        raise BadRequest("TLS needs both a certificate and its key (--tls-cert and --tls-key, "
                         "or [tls] cert and key)")
    return TlsSettings(cert=cert[0] if cert else None, key=key[0] if key else None,
                       ca=tuple(str(c).strip() for c in ca))


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
    conf_dir = Path(path).resolve().parent if path else None

    def pick(flag: str, env_name: str, section: Mapping[str, Any], key: str, default: Any) -> Any:
        if flag in flags:
            return flags[flag]
        value = _env(env, env_name)
        if value is not None:
            return value
        return section.get(key, default)

    host = str(pick("host", "HOST", c_server, "host", "127.0.0.1"))
    port = int(pick("port", "PORT", c_server, "port", 9077))
    server = _server_settings(pick, c_server, env, host, port)
    db_path = str(
        flags.get("db") or env.get("AI_MEMORY_DB") or conf.get("store", {}).get("db") or "ai-memory.db"
    )
    peers = parse_peers(pick("quorum_peers", "QUORUM_PEERS", c_cluster, "peers", None))
    node_id = str(pick("node_id", "NODE_ID", c_cluster, "node_id", f"{host}:{port}"))
    peers = tuple(p for p in peers if p.node_id != node_id)
    cluster = _cluster_settings(pick, c_cluster, node_id, peers)
    ttl = _tier_ttl(c_notify)
    auth = replace(_auth_settings(pick, c_auth),
                   bootstrap_root_key=_bootstrap_root_key(c_auth, env))
    webhooks = _webhook_settings(conf, env)
    return Settings(
        server=server,
        tls=_tls_settings(pick, conf, conf_dir),
        store=StoreSettings(db_path=db_path),
        cluster=cluster,
        auth=auth,
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


def _server_settings(pick: Pick, c_server: Mapping[str, Any], env: Mapping[str, str],
                     host: str, port: int) -> ServerSettings:
    raw = pick("lanes", "LANES", c_server, "lanes", None)
    try:
        lanes = 1 if raw is None else int(raw)
        offset = int(c_server.get("lane_port_offset", limits.lane_port_offset_default))
        lane = int(env.get("AI_MEMORY_LANE_INDEX") or 0)  # set by the supervisor only
    except (TypeError, ValueError):
        raise BadRequest("lanes and [server] lane_port_offset must be whole numbers") from None
    if not 1 <= lanes <= limits.lanes_max:
        raise BadRequest(f"--lanes must be between 1 and {limits.lanes_max}, not {lanes}")
    if lanes > 1 and not 1 <= offset * lanes + port <= 65535:
        raise BadRequest(f"lane ports ({port} + {offset} x lane) do not fit below 65536: "
                         "pick another [server] lane_port_offset or fewer lanes")
    if lanes > 1 and offset < 1:
        raise BadRequest("[server] lane_port_offset must be positive")
    if not 0 <= lane < lanes:
        raise BadRequest(f"lane {lane} is not one of this node's {lanes} lanes")
    return ServerSettings(host=host, port=port, lanes=lanes, lane_port_offset=offset, lane=lane,
                          lane_dir=env.get("AI_MEMORY_LANE_DIR") or "")


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def _auth_settings(pick: Pick, c_auth: Mapping[str, Any]) -> AuthSettings:
    require = _truthy(c_auth.get("require_api_key", False))
    mode = pick("auth", "AUTH", c_auth, "mode", None)
    if mode is not None and str(mode) == "anonymous" and require:
        raise BadRequest("[auth] require_api_key = true needs keys mode, not anonymous")
    mode = str(mode) if mode is not None else ("keys" if require else "anonymous")
    statics = []
    for i, entry in enumerate(c_auth.get("static_keys", [])):
        try:
            statics.append(StaticKey(
                secret=str(entry["secret"]), user=str(entry["user"]),
                agent=str(entry["agent"]) if entry.get("agent") else None,
                root=bool(entry.get("root", False)),
                grants=tuple(str(g) for g in entry.get("grants", ()))))
        except (KeyError, TypeError, AttributeError):
            raise BadRequest(f"[[auth.static_keys]] entry {i} needs secret and user") from None
    root_username = c_auth.get("root_username")
    return AuthSettings(
        mode=mode,
        api_keys={str(k): str(v) for k, v in dict(c_auth.get("api_keys", {})).items()},
        require_api_key=require, static_keys=tuple(statics),
        root_username=str(root_username) if root_username else None,
        insecure_anonymous=_truthy(pick("insecure_anonymous", "INSECURE_ANONYMOUS", c_auth,
                                        "insecure_anonymous", False)))


def is_loopback_host(host: str) -> bool:
    """True when ``host`` names only this machine (a loopback address or localhost)."""
    import ipaddress

    if host.strip("[]").lower() in ("localhost", "localhost.localdomain", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name: it may resolve to anything


def check_exposure(settings: Settings) -> None:
    """Refuse what would leave a node open: anonymous mode on a non-loopback
    address (unless the operator insisted), keys mode with unsigned peers."""
    check_links(settings)
    auth, host = settings.auth, settings.server.host
    if auth.keys_mode and settings.cluster.peers and not settings.cluster.secret:
        raise BadRequest("keys mode with peers needs a cluster secret (--cluster-secret or "
                         "[cluster] secret): unsigned peer requests would bypass every key")
    if auth.keys_mode or auth.insecure_anonymous or is_loopback_host(host):
        return
    raise BadRequest(
        f"refusing to serve anonymous mode on {host}: without keys anyone who can reach this "
        "address may claim to be any agent and read or pop any project's mail. Use --auth keys "
        "(with [auth] keys), bind to 127.0.0.1, or pass --insecure-anonymous if this network "
        "is trusted (docs/security.md)")


def _on_this_machine(host: str, own: str) -> bool:
    """A peer address whose traffic never leaves this machine: loopback, the
    unspecified address, or the very address this node listens on (several
    nodes of `cluster up` on one host)."""
    import ipaddress

    if is_loopback_host(host) or host.strip("[]") == own.strip("[]"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        return False


def check_links(settings: Settings) -> None:
    """Refuse peer links that would cross a network in clear, and TLS set up
    by halves (see docs/security.md, "TLS")."""
    c, tls = settings.cluster, settings.tls
    plain = [p for p in c.peers if p.url.startswith("http://")
             and not _on_this_machine(urlsplit(p.url).hostname or "", settings.server.host)]
    if plain and not c.insecure_plaintext_peers:
        raise BadRequest(
            f"refusing plaintext peer {plain[0].node_id}={plain[0].url}: peer requests would "
            "cross the network unencrypted. Use https:// peer URLs with [tls] cert, key and ca "
            "(`ai-memory cluster init` mints them), or pass --insecure-plaintext-peers "
            "([cluster] insecure_plaintext_peers = true) if this network is trusted")
    https = [p for p in c.peers if p.url.startswith("https://")]
    if https and not tls.enabled:
        raise BadRequest(f"peer {https[0].node_id} is https: this node needs its own member "
                         "certificate for mutual TLS (--tls-cert/--tls-key or [tls] cert/key)")
    if tls.enabled and c.peers and not tls.ca:
        raise BadRequest("TLS with peers needs the cluster CA (--tls-ca or [tls] ca) to verify "
                         "the peers' certificates")


def _bootstrap_root_key(c_auth: Mapping[str, Any], env: Mapping[str, str]) -> str | None:
    secret = _env(env, "ROOT_KEY")
    path = c_auth.get("bootstrap_root_key_file")
    if secret is None and path:
        try:
            secret = Path(str(path)).read_text("utf-8")
        except OSError as exc:
            raise BadRequest(f"cannot read [auth].bootstrap_root_key_file {path!r}: {exc}") from None
    return None if secret is None else check_root_secret(secret)


def _log_format(value: str) -> str:
    if value not in ("text", "json"):
        raise BadRequest(f"log format must be text or json, not {value!r}")
    return value


__all__ = ["Member", "Settings", "StaticKey", "TlsSettings", "check_exposure", "check_links",
           "load_settings", "parse_peers"]
