"""``ai-memory install-hooks``: the hook and MCP entries a harness needs.

It prints (or with ``--write`` merges into the harness's own files) the
entries for Claude Code, Codex or Kimi: the SessionStart / UserPromptSubmit
hooks (``ai-memory hook ...``, :mod:`cli.hooks`) and the ``mcp-bridge`` MCP
server. Both name every node (:mod:`cli.node_urls`: ``--url`` given once
per node or comma-separated, else the members of the cluster at the global
``--url``), so a node that is down costs neither the tools nor the notice.
On an https cluster the global ``--ca-cert`` (``AI_MEMORY_CA_CERT``) is
written into every entry, so hooks and bridge verify the nodes whatever
the harness's environment holds; so is the global ``--agent-id``
(``AI_MEMORY_AGENT_ID``), the agent whose unread notifications the hooks'
and the bridge channel's notices count. Merging keeps what the files
already hold and adds no entry twice.
"""

from __future__ import annotations

import json
import shlex
import shutil
import tomllib
from pathlib import Path
from typing import Any

import click

from cli.client import DEFAULT_URL
from cli.hooks import HARNESSES
from cli.node_urls import node_urls
from cli.output import note
from cli.state import CliState, pass_state
from common.errors import BadRequest


def _exe() -> str:
    return shutil.which("ai-memory") or "ai-memory"


def plan(harness: str, base: Path, urls: tuple[str, ...],
         exe: str, ca_cert: str | None = None,
         agent_id: str | None = None) -> list[tuple[Path, str, Any]]:
    """What to add where: (file, "json"|"toml", entries) for one harness.
    ``ca_cert``: the cluster CA the entries trust (an https cluster), named
    in every command so the harness's environment need not carry it;
    ``agent_id``: the agent whose unread notifications the notices count,
    named the same way."""
    url = ",".join(urls)
    trust = ["--ca-cert", str(Path(ca_cert).resolve())] if ca_cert else []
    who = ["--agent-id", agent_id] if agent_id else []
    bridge = {"command": exe, "args": ["mcp-bridge", "--url", url, *trust, *who]}
    cli = shlex.join([exe, *trust, *who])
    start = f"{cli} hook session-start --harness {harness} --url {url}"
    on_prompt = f"{cli} hook prompt --harness {harness} --url {url}"
    if harness == "claude-code":
        hooks_cc: dict[str, Any] = {"hooks": {
            "SessionStart": [{"hooks": [{"type": "command", "command": start}]}],
            "UserPromptSubmit": [{"hooks": [{"type": "command", "command": on_prompt}]}],
        }}
        return [(base / ".claude" / "settings.json", "json", hooks_cc),
                (base / ".mcp.json", "json", {"mcpServers": {"ai-memory": bridge}})]
    if harness == "codex":
        hooks: dict[str, Any] = {"hooks": {
            "SessionStart": [{"matcher": "startup|resume|clear",
                              "hooks": [{"type": "command", "command": start, "timeout": 10}]}],
            "UserPromptSubmit": [{"hooks": [{"type": "command", "command": on_prompt,
                                             "timeout": 10}]}],
        }}
        toml = ("\n[mcp_servers.ai-memory]\n"
                f"command = {json.dumps(exe)}\n"
                f"args = {json.dumps(bridge['args'])}\n"
                'env_vars = ["CODEX_THREAD_ID"]\n')
        return [(base / ".codex" / "hooks.json", "json", hooks),
                (base / ".codex" / "config.toml", "toml",
                 {"mcp_servers.ai-memory": toml, "features.codex_hooks": "\n[features]\ncodex_hooks = true\n"})]
    # kimi drops SessionStart output: its first prompt hook starts the session
    first = f"{cli} hook session-start --harness kimi --once --url {url}"
    toml_hook = f'\n[[hooks]]\nevent = "UserPromptSubmit"\ncommand = {json.dumps(first)}\ntimeout = 10\n'
    return [(base / ".kimi" / "config.toml", "toml", {"hooks": toml_hook}),
            (base / ".kimi" / "mcp.json", "json", {"mcpServers": {"ai-memory": bridge}})]


def _merge_json(existing: Any, add: Any) -> Any:
    """``add`` merged into ``existing``: objects key by key, hook lists without repeats."""
    if isinstance(existing, dict) and isinstance(add, dict):
        out = dict(existing)
        for k, v in add.items():
            out[k] = _merge_json(existing[k], v) if k in existing else v
        return out
    if isinstance(existing, list) and isinstance(add, list):
        return existing + [item for item in add if item not in existing]
    return add


def _has_toml(data: dict[str, Any], dotted: str, text: str) -> bool:
    if dotted == "hooks":
        hooks = data.get("hooks")
        command = text.split("command = ", 1)[1].split("\n", 1)[0]
        return isinstance(hooks, list) and any(
            json.dumps(h.get("command")) == command for h in hooks if isinstance(h, dict))
    node: Any = data
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def write_plan(entries: list[tuple[Path, str, Any]]) -> list[str]:
    """Merge every entry into its file; the lines to tell the user."""
    said: list[str] = []
    for path, kind, add in entries:
        path.parent.mkdir(parents=True, exist_ok=True)
        text = path.read_text() if path.exists() else ""
        if kind == "json":
            try:
                existing = json.loads(text) if text.strip() else {}
            except ValueError as exc:
                raise BadRequest(f"{path} is not JSON ({exc}); fix it or add the entries by hand") from None
            merged = _merge_json(existing, add)
            if merged != existing:
                path.write_text(json.dumps(merged, indent=2) + "\n")
                said.append(f"updated {path}")
            else:
                said.append(f"{path} already has the entries")
            continue
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise BadRequest(f"{path} is not TOML ({exc}); fix it or add the entries by hand") from None
        for dotted, block in add.items():
            if _has_toml(data, dotted, block):
                said.append(f"{path} already has {dotted}")
            elif "." in dotted and dotted.split(".")[0] in data and dotted != "mcp_servers.ai-memory":
                said.append(f"{path}: add `{dotted.split('.', 1)[1]} = true` to its "
                            f"[{dotted.split('.')[0]}] table by hand")
            else:
                text = text + ("" if not text or text.endswith("\n") else "\n") + block
                said.append(f"added {dotted} to {path}")
        path.write_text(text)
    return said


@click.command("install-hooks")
@click.option("--harness", type=click.Choice(HARNESSES), required=True)
@click.option("--url", "urls", multiple=True,
              help="A node the entries use; repeat (or separate with commas) for every node. "
                   "Default: every member of the cluster at the global --url.")
@click.option("--write", is_flag=True, help="Merge the entries into the files instead of printing.")
@click.option("--dir", "base", default=None, type=click.Path(file_okay=False),
              help="Project directory (claude-code, codex; default: here) or home (kimi; "
                   "default: ~).")
@click.option("--exe", default=None, help="The ai-memory executable the entries run.")
@pass_state
def install_hooks(state: CliState, harness: str, urls: tuple[str, ...], write: bool,
                  base: str | None, exe: str | None) -> None:
    """Print (or --write) the hook and MCP entries a harness needs for ai-memory.

    The entries name every node, so the bridge and the hooks fail over: the
    ones given with --url, else the members of the cluster at the global
    --url (asked for them now). Where the list came from is said on stderr.
    """
    root = Path(base) if base else (Path.home() if harness == "kimi" else Path.cwd())
    nodes = node_urls(urls, state.url or DEFAULT_URL, key=state.key, api_key=state.api_key)
    note(f"the entries use {', '.join(nodes.urls)}: {nodes.source}")
    entries = plan(harness, root, nodes.urls, exe or _exe(), state.ca_cert, state.agent_id)
    if write:
        for line in write_plan(entries):
            click.echo(line)
        return
    for path, kind, add in entries:
        click.echo(f"# {path}")
        if kind == "json":
            click.echo(json.dumps(add, indent=2))
        else:
            click.echo("".join(add.values()).strip())
        click.echo("")
