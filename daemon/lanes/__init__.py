"""Lanes: one node as several processes, each owning a partition of the keys (docs/lanes.md).

* :mod:`daemon.lanes.layout` -- pure: a lane's ports, database, peers and settings;
* :mod:`daemon.lanes.supervisor` -- ``ai-memory serve`` with more than one lane:
  starts, watches and stops the lane processes;
* :mod:`daemon.lanes.rules` and :mod:`daemon.lanes.table` -- which lane serves each request;
* :mod:`daemon.lanes.split` -- which lanes the items of a write go to;
* :mod:`daemon.lanes.hop` -- the local link: a request or a write handed to a sibling lane;
* :mod:`daemon.lanes.router` -- the middleware that hands requests over and fans reads out.
"""
