"""Deterministic cluster simulator for the federation core (VOPR style).

``python -m tests.sim --seeds 5000`` runs seeds; ``--seed N`` replays one.
See docs/federation.md ("Simulator") for what is faulted and what is checked.
"""
