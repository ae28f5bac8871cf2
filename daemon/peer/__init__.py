"""Talking to the other members: signed requests (``auth``), the client that
sends them (``client``), batches as frames on one WebSocket per peer
(``channel``) and the per-peer queue that builds the batches (``link``)."""
