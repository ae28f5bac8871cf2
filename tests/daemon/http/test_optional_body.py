"""Endpoints whose JSON body is optional (``POST /api/v1/cluster``, ...) refuse an
integer literal past Python's digit limit with a 400, like every other body
(found by the route fuzz: it was a 500)."""

from __future__ import annotations


async def test_a_number_too_long_is_a_400(client) -> None:  # type: ignore[no-untyped-def]
    body = b'{"priority": ' + b"9" * 5000 + b"}"
    resp = await client.post("/api/v1/cluster", data=body,
                             headers={"Content-Type": "application/json"})
    assert resp.status == 400, await resp.text()
    assert (await resp.json()) == {"error": "JSON number too long", "code": "bad_request"}
