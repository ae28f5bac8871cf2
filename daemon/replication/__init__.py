"""Carrying out the pure core of ``federation/`` with awaits: its effects
(``effect_runner``), anti-entropy pushes (``anti_entropy``), the R-quorum
pull before reads (``read_quorum``), mailbox requests routed to the owner
(``mailbox_router``) and their wire form (``forwarding``), and a member's
first start: settling with the others (``joining``) and being seeded from a
peer's backup (``seeding``)."""
