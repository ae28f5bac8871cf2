"""``python -m cli`` runs the ``ai-memory`` command (``cluster up`` starts nodes this way)."""

from cli.main import main

main()
