"""`gpulens digest`: report cards per team and per user (registered on the app by cli.py).

The cards are app/digest.py's; their Markdown, HTML and JSON are present/reports/digest.py's.
A dry run (the default) writes them to --out DIR (one .md and one .html per card, and
index.md) or prints the index and every card's Markdown; `--send` delivers them by SMTP
and/or webhook as the --recipients file says.
"""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from gpulens.errors import StoreError
from gpulens.present.console import app, err


class Period(StrEnum):
    day = "day"
    week = "week"


class DigestFormat(StrEnum):
    markdown = "markdown"
    json = "json"


@app.command()
def digest(
    period: Annotated[Period, typer.Option(help="Grade the last whole day or week.")] = Period.week,
    data_dir: Annotated[
        str | None, typer.Option(help="The store to read (a directory or s3://bucket/prefix).")
    ] = None,
    prometheus: Annotated[
        str | None, typer.Option(help="Read this Prometheus (Thanos, Mimir) instead of a store.")
    ] = None,
    until: Annotated[
        str | None,
        typer.Option(help="Grade the last whole period before this time (default now)."),
    ] = None,
    baselines: Annotated[
        int, typer.Option(help="Previous periods each card is compared with.", min=0)
    ] = 4,
    top: Annotated[int, typer.Option(help="Findings per card.", min=0)] = 3,
    recipients: Annotated[
        Path | None,
        typer.Option(help="TOML: SMTP, webhook, teams (members, email, webhook), users."),
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run/--send", help="Write the cards (default), or send them."),
    ] = True,
    out_dir: Annotated[
        Path | None, typer.Option("--out", help="Dry run: write the cards into this directory.")
    ] = None,
    format: Annotated[
        DigestFormat, typer.Option(help="Dry run without --out: what to print.")
    ] = DigestFormat.markdown,
    config: Annotated[Path | None, typer.Option(help="TOML configuration file.")] = None,
) -> None:
    """Report cards per team and per user: useful work, idle-allocated GPU-hours and their
    price, top findings with fixes, each against its own baseline and the fleet."""
    from gpulens.app import digest as run
    from gpulens.app.digest_config import load_recipients
    from gpulens.clock import SystemClock
    from gpulens.config import load_config
    from gpulens.errors import ConfigError
    from gpulens.present.reports import digest as render
    from gpulens.present.timespec import parse_when

    cfg = load_config(config, overrides={"data_dir": str(data_dir) if data_dir else None})
    if prometheus is not None and data_dir is not None:
        raise ConfigError("--prometheus and --data-dir both given: read one of them")
    who = load_recipients(recipients)
    now = SystemClock().now_ns()
    got = run.build(
        cfg,
        period.value,
        now,
        parse_when(until, now, "--until"),
        baselines,
        prometheus,
        who.members,
        top,
    )
    cards = [*([got.fleet] if got.fleet else []), *got.teams, *got.users]
    if dry_run:
        if out_dir is not None:
            try:
                out_dir.mkdir(parents=True, exist_ok=True)
                for card in cards:
                    stem = render.file_stem(card)
                    (out_dir / f"{stem}.md").write_text(render.markdown(card), encoding="utf-8")
                    (out_dir / f"{stem}.html").write_text(render.html_page(card), "utf-8")
                (out_dir / "index.md").write_text(
                    render.index_markdown(cards, got.notes), encoding="utf-8"
                )
                (out_dir / "cards.json").write_text(render.as_json(cards, got.notes), "utf-8")
            except OSError as exc:
                raise StoreError(
                    f"cannot write the report cards into {str(out_dir)!r} ({exc.strerror}): "
                    "choose another --out directory"
                ) from None
            err.print(f"wrote {len(cards)} report card(s) to {out_dir} (dry run: nothing sent)")
        elif format is DigestFormat.json:
            sys.stdout.write(render.as_json(cards, got.notes))
        else:
            sys.stdout.write(render.index_markdown(cards, got.notes))
            for card in cards:
                sys.stdout.write("\n" + render.markdown(card))
        return
    from gpulens.app.digest_send import Message, post_webhook, send_mail

    if who.smtp is None and who.webhook is None and not _any_webhook(who):
        raise ConfigError(
            "--send: the --recipients file names no [smtp] and no webhook; "
            "add them, or leave out --send for a dry run"
        )
    mails = []
    deliveries = []
    unsent = []
    for card in cards:
        if card.kind == "fleet":
            continue
        message = Message(
            render.subject(card), render.markdown(card), render.html_page(card), render.chat(card)
        )
        to = who.of(card.kind, card.name)
        name = f"{card.kind} {card.name}"
        if to.email and who.smtp is not None:
            mails.append((name, message, list(to.email)))
        if to.webhook is not None:
            deliveries.append(post_webhook(name, message, to.webhook))
        if not (to.email and who.smtp is not None) and to.webhook is None:
            unsent.append(name)
    if mails and who.smtp is not None:
        deliveries += send_mail(mails, who.smtp)
    for d in deliveries:
        if d.error:
            err.print(f"[red]not sent[/red] {d.card} by {d.channel} to {d.to}: {d.error}")
        else:
            err.print(f"sent {d.card} by {d.channel} to {d.to}", highlight=False)
    if unsent:
        err.print(f"no recipient for {len(unsent)} card(s): {', '.join(unsent)}")
    if any(d.error for d in deliveries):
        raise typer.Exit(1)


def _any_webhook(who: object) -> bool:
    teams = getattr(who, "teams", {})
    users = getattr(who, "users", {})
    return any(r.webhook is not None for r in (*teams.values(), *users.values()))
