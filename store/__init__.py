"""Persistence: one SQLite file per node.

``ops`` is the op model and merge-rule table; ``merge`` the pure in-memory
reference replica; ``records`` the row shapes and ranks both share;
``seen`` the version-vector tracker; ``db.Store`` the SQLite implementation,
built from ``schema`` (migrations), ``writer`` (group commit), ``apply``
(merge upserts), ``reader`` (read pool) and ``queries`` (read SQL).
"""
