"""Benchmark harness for an ai-memory cluster (``python -m bench``).

Layout, one noun per module: ``workloads`` (what a client sends),
``loadgen`` (load-generator processes: closed, open and count loops),
``stats`` (samples and nearest-rank summaries), ``echo`` (the ceiling
server), ``procs`` (starting and always stopping servers), ``phases`` (the
measured phases), ``profiles`` (quick/full sizes), ``targets`` (PASS/MISS),
``report`` and ``plots`` (outputs), ``nats_compare`` (optional JetStream
side by side), ``runner`` (one run in order) and ``hotpath`` (py-spy
profile of the nodes under one workload). See docs/performance.md.
"""
