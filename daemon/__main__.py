"""``python -m daemon`` is ``ai-memory serve``."""

from cli.serve import serve

serve(prog_name="python -m daemon")
