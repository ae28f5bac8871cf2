"""The public HTTP boundary around the handlers of ``daemon/api/``: the
aiohttp app and its keys (``app``, ``appkeys``), who is calling
(``auth``), the one translation of errors to HTTP (``errors``), refusing
work under load (``backpressure``), the deciding admission hooks of project
mail (``admission``) and the hub that feeds the push streams
(``stream_hub``)."""
