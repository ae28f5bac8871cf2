"""The public HTTP boundary the handlers of ``daemon/api/`` stand on: the
app keys (``appkeys``), who is calling (``auth``), the one translation of
errors to HTTP (``errors``), refusing work under load (``backpressure``),
the deciding admission hooks of project mail (``admission``) and the hub
that feeds the push streams (``stream_hub``). The app itself, which puts
them around the routes, is ``daemon/api/app.py``."""
