"""Alertmanager's webhook payload (version 4) → typed records (pure parse).

Alertmanager POSTs one JSON object per notification of an alert group: `version`,
`groupKey`, `status` (firing | resolved), `receiver`, `groupLabels`, `commonLabels`,
`commonAnnotations`, `externalURL`, `alerts[]` (each: `status`, `labels`, `annotations`,
`startsAt`, `endsAt` (``0001-01-01T00:00:00Z`` while firing), `generatorURL`, `fingerprint`)
and, from 0.22, `truncatedAlerts`. Older senders leave out the per-alert `status`,
`fingerprint` and `generatorURL`: an alert then takes the message's status.

`gpu_alert` reads the labels a person needs off a gpulens alert: the job (`job_id` from the
agent's series, `hpc_job` from dcgm-exporter's; never `job`, which is Prometheus's scrape
job), the user, the GPU (`UUID`, else `gpu`) and the node (`Hostname`, else `instance`
without its port).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpulens.errors import CollectError

#: Alertmanager's "no end yet" time
ZERO_TIME = "0001-01-01T00:00:00Z"
JOB_LABELS: tuple[str, ...] = ("job_id", "hpc_job", "slurm_job_id", "jobid")
GPU_LABELS: tuple[str, ...] = ("UUID", "gpu_uuid", "gpu")
NODE_LABELS: tuple[str, ...] = ("Hostname", "hostname", "node", "host", "instance")


class WebhookError(CollectError):
    """A body that is not an Alertmanager webhook payload."""


@dataclass(frozen=True, slots=True)
class Alert:
    """One alert of a notification; times are ISO 8601 text as sent (`ends_at` None while
    firing)."""

    status: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    starts_at: str | None
    ends_at: str | None
    fingerprint: str | None = None
    generator_url: str | None = None

    @property
    def name(self) -> str:
        return self.labels.get("alertname", "")


@dataclass(frozen=True, slots=True)
class WebhookMessage:
    """One notification: the group's status, receiver and labels, and its alerts."""

    version: str
    status: str
    receiver: str
    group_key: str
    group_labels: Mapping[str, str] = field(default_factory=dict)
    common_labels: Mapping[str, str] = field(default_factory=dict)
    common_annotations: Mapping[str, str] = field(default_factory=dict)
    external_url: str = ""
    alerts: tuple[Alert, ...] = ()
    truncated_alerts: int = 0


def _strings(value: Any, what: str, source: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise WebhookError(f"{source}: {what} is not an object of labels (got {value!r:.60})")
    return {str(k): str(v) for k, v in value.items()}


def _time(value: Any) -> str | None:
    """The time as sent (Go's RFC 3339 with nanoseconds), None for the zero time."""
    if not isinstance(value, str) or not value or value == ZERO_TIME:
        return None
    return value


def parse_webhook(body: bytes | str | Mapping[str, Any], source: str = "webhook") -> WebhookMessage:
    """The message of one webhook body (WebhookError names what is wrong)."""
    if isinstance(body, bytes | str):
        try:
            doc = json.loads(body)
        except ValueError as exc:
            raise WebhookError(
                f"{source}: not JSON ({exc}); expected Alertmanager's webhook payload"
            ) from None
    else:
        doc = body
    if not isinstance(doc, Mapping) or not isinstance(doc.get("alerts"), list):
        raise WebhookError(
            f"{source}: no 'alerts' list; expected Alertmanager's webhook payload "
            "(version 4: status, receiver, groupLabels, alerts[])"
        )
    status = str(doc.get("status") or "")
    alerts = []
    for i, raw in enumerate(doc["alerts"]):
        if not isinstance(raw, Mapping):
            raise WebhookError(f"{source}: alerts[{i}] is not an object")
        alerts.append(
            Alert(
                status=str(raw.get("status") or status),
                labels=_strings(raw.get("labels"), f"alerts[{i}].labels", source),
                annotations=_strings(raw.get("annotations"), f"alerts[{i}].annotations", source),
                starts_at=_time(raw.get("startsAt")),
                ends_at=_time(raw.get("endsAt")),
                fingerprint=str(raw["fingerprint"]) if raw.get("fingerprint") else None,
                generator_url=str(raw["generatorURL"]) if raw.get("generatorURL") else None,
            )
        )
    truncated = doc.get("truncatedAlerts")
    return WebhookMessage(
        version=str(doc.get("version") or ""),
        status=status,
        receiver=str(doc.get("receiver") or ""),
        group_key=str(doc.get("groupKey") or ""),
        group_labels=_strings(doc.get("groupLabels"), "groupLabels", source),
        common_labels=_strings(doc.get("commonLabels"), "commonLabels", source),
        common_annotations=_strings(doc.get("commonAnnotations"), "commonAnnotations", source),
        external_url=str(doc.get("externalURL") or ""),
        alerts=tuple(alerts),
        truncated_alerts=truncated if isinstance(truncated, int) else 0,
    )


def _first(labels: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    for name in names:
        if labels.get(name):
            value = labels[name]
            if name == "instance":
                host, sep, port = value.rpartition(":")
                value = host if sep and port.isdigit() and host else value
            return value
    return None


def gpu_alert(alert: Alert) -> dict[str, Any]:
    """What a person reads of one alert: name, status, severity, rule, job, user, GPU, node,
    summary, since, and all labels and annotations."""
    labels = alert.labels
    return {
        "alertname": alert.name,
        "status": alert.status,
        "severity": labels.get("severity"),
        "rule_id": labels.get("rule_id"),
        "job": _first(labels, JOB_LABELS),
        "user": labels.get("user"),
        "gpu": _first(labels, GPU_LABELS),
        "gpu_index": labels.get("gpu"),
        "node": _first(labels, NODE_LABELS),
        "pod": labels.get("pod"),
        "namespace": labels.get("namespace"),
        "summary": alert.annotations.get("summary"),
        "starts_at": alert.starts_at,
        "ends_at": alert.ends_at,
        "labels": dict(labels),
        "annotations": dict(alert.annotations),
    }
