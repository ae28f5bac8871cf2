"""The MCP tests' fake node is the shared scripted daemon of ``tests/fakes.py``."""

from tests.fakes import DROP, FakeNode, Recorded, Scripted

__all__ = ["DROP", "FakeNode", "Recorded", "Scripted"]
