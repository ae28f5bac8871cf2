"""Walking README.md's shell blocks as a newcomer would: helpers.

:func:`sh_blocks` reads the ```sh blocks in order, with the line each starts
on. :func:`walk_script` joins them into one bash script, as one terminal
would run them (an ``export`` in one block holds in the next), with the
README's ports turned into the test cluster's; it stops at the first
command that fails and names its README line. :func:`tool_dir` makes the
programs the README runs: ``ai-memory`` (this checkout's CLI) and a
``claude`` that does what ``claude mcp add`` leads to, starting the MCP
server it was given and listing its tools.
"""

from __future__ import annotations

import os
import re
import shlex
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
README_PORTS = (9077, 9078, 9079)
MARK = ">>> README line "


@dataclass(frozen=True, slots=True)
class Block:
    line: int  # the README line of the block's first command
    text: str
    section: str  # the heading it is under

    def runs(self, program: str) -> bool:
        return any(re.match(rf"\s*(\S+=\S+\s+)*{re.escape(program)}\b", line)
                   for line in self.text.splitlines())


def sh_blocks(text: str) -> list[Block]:
    blocks: list[Block] = []
    lines = text.splitlines()
    section = ""
    i = 0
    while i < len(lines):
        if lines[i].startswith("## "):
            section = lines[i][3:].strip()
        if lines[i].strip() == "```sh":
            body: list[str] = []
            start = i + 2
            i += 1
            while lines[i].strip() != "```":
                body.append(lines[i])
                i += 1
            blocks.append(Block(start, "\n".join(body) + "\n", section))
        i += 1
    return blocks


def with_ports(text: str, base: int) -> str:
    for offset, port in enumerate(README_PORTS):
        text = text.replace(f"127.0.0.1:{port}", f"127.0.0.1:{base + offset}")
    return text


def walk_script(blocks: list[Block], base: int) -> str:
    parts = ["set -eE -o pipefail",
             "trap 'echo \"README walk: failed at README line $BLOCK: $BASH_COMMAND\"' ERR"]
    for block in blocks:
        parts += [f"BLOCK={block.line}", f"echo '{MARK}{block.line}'", with_ports(block.text, base)]
    parts.append("echo 'README walk: done'")
    return "\n".join(parts) + "\n"


def failed_at(log: str) -> int | None:
    """The README line of the block that failed, if one did."""
    found = re.search(r"README walk: failed at README line (\d+)", log)
    return int(found.group(1)) if found else None


def outputs(log: str) -> dict[int, str]:
    """What each block printed, by its README line."""
    out: dict[int, str] = {}
    for chunk in log.split(MARK)[1:]:
        number, _, text = chunk.partition("\n")
        out[int(number)] = text
    return out


CLAUDE_STUB = '''
import asyncio, json, os, sys
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

args = sys.argv[1:]
assert args[:3] == ["mcp", "add", "ai-memory"] and "--" in args, args
command = args[args.index("--") + 1:]

async def main() -> list[str]:
    params = StdioServerParameters(command=command[0], args=command[1:], env=dict(os.environ))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        return [tool.name for tool in (await session.list_tools()).tools]

tools = asyncio.run(asyncio.wait_for(main(), 60))
with open(os.environ["CLAUDE_STUB_OUT"], "w") as fh:
    json.dump({"command": command, "tools": tools}, fh)
print(f"added ai-memory ({len(tools)} tools)")
'''


def tool_dir(where: Path) -> Path:
    """A directory with ``ai-memory`` and ``claude`` for the walk's PATH."""
    where.mkdir(parents=True, exist_ok=True)
    py = shlex.quote(sys.executable)
    programs = {
        "ai-memory": f'#!/bin/sh\nPYTHONPATH={shlex.quote(str(ROOT))} exec {py} -m cli "$@"\n',
        "claude": f"#!{sys.executable}\n{CLAUDE_STUB}",
    }
    for name, text in programs.items():
        path = where / name
        path.write_text(text)
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return where


def walk_env(tools: Path, home: Path, base: int, stub_out: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AI_MEMORY_")}
    env.update(PATH=f"{tools}{os.pathsep}{env.get('PATH', '')}", HOME=str(home),
               XDG_STATE_HOME=str(home / ".local" / "state"), PYTHONPATH=str(ROOT),
               CLAUDE_STUB_OUT=str(stub_out), AI_MEMORY_URL=f"http://127.0.0.1:{base}")
    return env
