"""Request models and response shapes of the memories, notify/inbox and
agents APIs.

Request models validate at the boundary (pydantic, strict for JSON bodies,
lenient for query strings) so a service only ever sees well-formed input;
the ``*_json`` functions turn store rows (int-millisecond timestamps) into
the wire shapes the ai-memory SDK parses (RFC3339 UTC strings).
"""
