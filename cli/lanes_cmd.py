"""``ai-memory lanes resize``: change a node's lane count offline.

Run on every member of the stopped cluster, on each member's own files
(the daemon's ``--config`` or ``--db``, as ``serve`` takes them): first
``--check`` on every member (the fingerprints must be equal: the members
hold the same ops), then ``--to N --expect FINGERPRINT``, then start every
member with ``--lanes N``. The whole procedure is in docs/lanes.md
("Changing the lane count"); the rewrite is :mod:`daemon.lanes.resize`.
"""

from __future__ import annotations

from typing import Any

import click

from cli.output import note, print_json


@click.group("lanes")
def lanes() -> None:
    """A node's lanes (docs/lanes.md)."""


@lanes.command("resize")
@click.option("--to", "to", type=int, default=None,
              help="The new lane count (omit with --check).")
@click.option("--config", "config", default=None, type=click.Path(exists=True, dir_okay=False),
              help="The node's TOML config, as `serve --config` takes it.")
@click.option("--db", default=None, help="The node's database path (env AI_MEMORY_DB), as "
                                         "`serve --db` takes it.")
@click.option("--check", is_flag=True,
              help="Print this member's fingerprint and change nothing (an interrupted "
                   "resize of this node is finished first).")
@click.option("--expect", default=None, metavar="FINGERPRINT",
              help="Refuse unless this member's fingerprint is this (every member's --check).")
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
def resize(to: int | None, config: str | None, db: str | None, check: bool,
           expect: str | None, as_json: bool) -> None:
    """Rewrite this stopped member's lane files for --to lanes.

    Every member of the cluster, stopped and settled, runs it on its own
    files; the old files are kept in <db>.before-resize-<time>/."""
    import daemon.lanes.resize as rs
    from daemon.settings import load_settings

    settings = load_settings({"config": config, "db": db})
    if rs.finish_interrupted(settings):
        note("finished a resize of this node that had stopped during its swap")
    if check:
        if to is not None or expect is not None:
            raise click.UsageError("--check changes nothing: give it without --to and --expect")
        found = rs.fingerprint(settings)
        if as_json:
            print_json(found)
            return
        click.echo(f"{settings.store.db_path}: {found['lanes']} lane(s), "
                   f"fingerprint {found['digest']}")
        note("run --check on every member: the fingerprints must be equal before a resize")
        return
    if to is None:
        raise click.UsageError("give --to N (or --check)")
    out: dict[str, Any] = rs.resize(settings, to, expect=expect)
    if as_json:
        print_json(out)
        return
    click.echo(f"{settings.store.db_path}: {out['from']} lane(s) -> {out['to']}, fingerprint "
               f"{out['fingerprint']}; {out['moved_ids']} ids kept off the lane they name")
    note(f"the old files are in {out['old_files']}")
    note(f"start the node with --lanes {to} ([server] lanes = {to}, AI_MEMORY_LANES={to}), "
         "and every other member once it is resized too")
