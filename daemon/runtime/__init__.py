"""What a node process runs on, below any request or peer: the one wall
clock (``clock``), structured logs (``logs``), metrics (``metrics``), the
owner of background tasks (``tasks``), TLS contexts (``tls``), systemd
readiness (``systemd``), the garbage collector's tuning (``collector``) and
the ``cluster status`` view (``status``)."""
