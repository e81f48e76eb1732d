"""Sending report cards: a mail by SMTP (multipart: plain text and HTML), or a JSON payload to
a Slack- or Teams-compatible incoming webhook. Each delivery is attempted once; a failure is
recorded against its card and the others still go (`Delivery`)."""

from __future__ import annotations

import smtplib
import ssl
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from typing import Any

import httpx

from gpulens.app.digest_config import Smtp, Webhook


@dataclass(frozen=True, slots=True)
class Message:
    """One card, rendered: a subject line, plain text (Markdown), HTML, and the text of a
    chat message (no tables; the plain text when empty)."""

    subject: str
    text: str
    html: str
    chat: str = ""


@dataclass(frozen=True, slots=True)
class Delivery:
    """What happened to one card on one channel: `error` empty when it went."""

    card: str
    channel: str  # "smtp" or "webhook"
    to: str
    error: str = ""


def mail(message: Message, smtp: Smtp, to: Sequence[str]) -> EmailMessage:
    """The multipart/alternative mail of `message` (text first, then HTML)."""
    out = EmailMessage()
    out["Subject"] = message.subject
    out["From"] = smtp.sender
    out["To"] = ", ".join(to)
    out["Date"] = formatdate(localtime=False)
    out["Message-ID"] = make_msgid(domain=smtp.sender.rpartition("@")[2] or None)
    out.set_content(message.text)
    out.add_alternative(message.html, subtype="html")
    return out


def send_mail(
    messages: Sequence[tuple[str, Message, Sequence[str]]],
    smtp: Smtp,
    timeout_s: float = 30.0,
    context: ssl.SSLContext | None = None,
) -> list[Delivery]:
    """(card, message, recipients) over one SMTP connection (STARTTLS and login when set)."""
    done: list[Delivery] = []
    try:
        with smtplib.SMTP(smtp.host, smtp.port, timeout=timeout_s) as server:
            server.ehlo()
            if smtp.starttls:
                server.starttls(context=context or ssl.create_default_context(cafile=smtp.ca_file))
                server.ehlo()
            if smtp.user:
                server.login(smtp.user, smtp.password or "")
            for card, message, to in messages:
                try:
                    server.send_message(mail(message, smtp, to))
                    done.append(Delivery(card, "smtp", ", ".join(to)))
                except smtplib.SMTPException as exc:
                    done.append(Delivery(card, "smtp", ", ".join(to), _why(exc)))
    except (OSError, smtplib.SMTPException) as exc:
        why = f"{smtp.host}:{smtp.port}: {_why(exc)}"
        sent = {d.card for d in done}
        done += [
            Delivery(card, "smtp", ", ".join(to), why)
            for card, _m, to in messages
            if card not in sent
        ]
    return done


def _why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:300]


def payload(message: Message, fmt: str) -> dict[str, Any]:
    """The webhook body: Slack's ``{"text"}`` (mrkdwn) or a Teams MessageCard."""
    text = message.chat or message.text
    if fmt == "teams":
        return {
            "@type": "MessageCard",
            "@context": "https://schema.org/extensions",
            "summary": message.subject,
            "title": message.subject,
            "text": text,
        }
    return {"text": f"*{message.subject}*\n{text}"}


def post_webhook(
    card: str,
    message: Message,
    hook: Webhook,
    post: Callable[..., httpx.Response] | None = None,
    timeout_s: float = 30.0,
) -> Delivery:
    """POST the card's payload to the webhook; a status other than 2xx is a failed delivery."""
    send = post or httpx.post
    try:
        response = send(hook.url, json=payload(message, hook.format), timeout=timeout_s)
    except httpx.HTTPError as exc:
        return Delivery(card, "webhook", hook.url, _why(exc))
    if not 200 <= response.status_code < 300:
        body = response.text[:200]
        return Delivery(card, "webhook", hook.url, f"HTTP {response.status_code}: {body}")
    return Delivery(card, "webhook", hook.url)
