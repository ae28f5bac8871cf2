"""``python -m daemon.mcp`` is ``ai-memory mcp``."""

from cli.mcp_cmd import mcp

mcp(prog_name="python -m daemon.mcp")
