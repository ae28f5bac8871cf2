"""What every command shares: the daemon's address and the caller's identity.

The root group fills one :class:`CliState` from ``--url``, ``--agent-id``,
``--api-key``, ``--key`` and ``--ca-cert`` (or ``AI_MEMORY_URL``, ``AI_MEMORY_AGENT_ID``,
``AI_MEMORY_API_KEY``, ``AI_MEMORY_KEY``, ``AI_MEMORY_CA_CERT``); commands receive it with ``@pass_state`` and ask it
for an :class:`~cli.client.ApiClient`. A command that takes its own
``--agent-id`` (``inbox``) passes it to :meth:`CliState.client`, which wins
over the global one.
"""

from __future__ import annotations

from dataclasses import dataclass

import click

from cli.client import DEFAULT_URL, ApiClient


@dataclass(slots=True)
class CliState:
    url: str = DEFAULT_URL
    agent_id: str | None = None
    api_key: str | None = None
    key: str | None = None  # --key / AI_MEMORY_KEY, sent as Authorization: Bearer
    ca_cert: str | None = None  # --ca-cert / AI_MEMORY_CA_CERT: the cluster CA for https

    def client(self, agent_id: str | None = None, url: str | None = None) -> ApiClient:
        return ApiClient(url or self.url, agent_id=agent_id or self.agent_id, api_key=self.api_key,
                         key=self.key, ca_cert=self.ca_cert)


pass_state = click.make_pass_decorator(CliState, ensure=True)
