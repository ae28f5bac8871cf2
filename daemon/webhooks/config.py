"""Per-node webhook settings.

The node's :class:`daemon.settings.Settings` carries this as its
``webhooks`` section (``[webhooks]`` in the TOML). Production defaults refuse
loopback and private targets; tests and local hooks on 127.0.0.1 switch
``allow_loopback_webhooks`` on.
"""

from __future__ import annotations

from dataclasses import dataclass

from common import limits


@dataclass(frozen=True, slots=True)
class WebhookSettings:
    allow_loopback_webhooks: bool = False  # 127.0.0.0/8, ::1 (tests, hooks on the same host)
    allow_private_webhooks: bool = False  # RFC 1918, fc00::/7, 100.64/10 (hooks inside a LAN)
    timeout_secs: float = limits.webhook_timeout_secs
    retry_max: int = limits.webhook_retry_max
    backoff_base_secs: float = limits.webhook_backoff_base_secs
    backoff_max_secs: float = limits.webhook_backoff_max_secs
    outbox_max: int = limits.webhook_outbox_max
    dead_letter_max: int = limits.webhook_dead_letter_max
    concurrency: int = limits.webhook_concurrency_max
    db_path: str | None = None  # default: "<node db>.webhooks.sqlite"

    def __post_init__(self) -> None:
        if self.timeout_secs <= 0 or self.backoff_base_secs <= 0 or self.backoff_max_secs <= 0:
            raise ValueError("webhook timeout and backoff must be positive")
        if self.retry_max < 1 or self.concurrency < 1 or self.outbox_max < 1:
            raise ValueError("webhook retry_max, concurrency and outbox_max must be at least 1")
        if self.dead_letter_max < 0:
            raise ValueError("webhook dead_letter_max must not be negative")


def side_db_path(node_db_path: str, settings: WebhookSettings) -> str:
    """Where subscriptions and the outbox live: a SQLite file beside the node's."""
    if settings.db_path:
        return settings.db_path
    if node_db_path == ":memory:" or node_db_path.startswith("file::memory:"):
        return ":memory:"
    return f"{node_db_path}.webhooks.sqlite"
