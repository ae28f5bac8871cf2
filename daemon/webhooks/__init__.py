"""Subscriptions and signed webhook delivery (``memory_subscribe``).

Every op this node applies -- written here or replicated from a peer -- is
offered to :class:`daemon.webhooks.service.Webhooks`, which turns the ones
that matter into events, writes one outbox row per matching subscription,
and delivers the rows with signed POSTs, retrying with capped backoff until
they succeed or are dead-lettered. ``DESIGN.md`` next to this file has the
flow, the guarantees and the settings. This package init stays import-free
so ``daemon/settings.py`` can import :mod:`daemon.webhooks.config` cheaply.
"""
