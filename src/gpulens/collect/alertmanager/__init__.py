"""Alertmanager's webhook: what it POSTs to a receiver (`webhook.parse_webhook`, pure) and a
small receiver that serves it on a local address (`receiver.WebhookReceiver`)."""

from gpulens.collect.alertmanager.receiver import WebhookReceiver
from gpulens.collect.alertmanager.webhook import (
    Alert,
    WebhookError,
    WebhookMessage,
    gpu_alert,
    parse_webhook,
)

__all__ = [
    "Alert",
    "WebhookError",
    "WebhookMessage",
    "WebhookReceiver",
    "gpu_alert",
    "parse_webhook",
]
