"""Persistence: one SQLite file per node.

``ops`` is the op model and merge-rule table; ``in_memory`` the pure
in-memory reference replica (the simulator's store); ``records`` the row
shapes and ranks both share; ``seen`` the version-vector tracker;
``db.Store`` the SQLite implementation of the driver's storage contract,
with the domain reads of ``reads``, built from ``schema`` (migrations),
``writer`` (group commit), ``apply`` (merge upserts), ``reader`` (read
pool) and ``queries`` (read SQL).
"""
