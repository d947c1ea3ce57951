"""The add/edit form of a schedule kept in the store: a task chosen from the registered ones, the arguments
as JSON, an interval or a cron expression with its time zone, the queue, priority and misfire policy. Its
``schedule`` builds the ``StoredSchedule`` through ``scheduling.editing.build``: every check is that one."""

from __future__ import annotations

import json
import zoneinfo
from functools import cache
from typing import Any

from django import forms

from ..engine.schedulestate import StoredSchedule
from ..periodic import DEFAULT_MISFIRE_GRACE_TIME
from ..running.registry import registry
from ..scheduling import editing
from ..tasks import Task


@cache
def _zones() -> list[tuple[str, str]]:
    return [("", "UTC")] + [(zone, zone) for zone in sorted(zoneinfo.available_timezones()) if zone != "UTC"]


def _tasks() -> list[tuple[str, str]]:
    return [("", "---------")] + [
        (name, f"{name}{task._signature}")
        for name in registry.names()
        if isinstance(task := registry.get(name), Task)
    ]


class JSONText(forms.CharField):
    def __init__(self, kind: type, **kwargs: Any) -> None:
        self.kind = kind
        super().__init__(
            widget=forms.Textarea(attrs={"rows": 2, "cols": 60, "class": "vLargeTextField"}), **kwargs
        )

    def clean(self, value: Any) -> Any:
        text = super().clean(value).strip()
        if not text:
            return self.kind()
        try:
            found = json.loads(text)
        except ValueError as exc:
            raise forms.ValidationError(f"Not JSON: {exc}") from None
        if not isinstance(found, self.kind):
            raise forms.ValidationError(f"Give a JSON {'list' if self.kind is list else 'object'}.")
        return found


class ScheduleForm(forms.Form):
    name = forms.CharField(max_length=200, help_text="Unique; cannot be changed later.")
    task = forms.ChoiceField(choices=_tasks, help_text="A registered task, with its signature.")
    args = JSONText(
        list, required=False, initial="[]", help_text='Positional arguments, a JSON list: ["a", 1]'
    )
    kwargs = JSONText(
        dict, required=False, initial="{}", help_text='Named arguments, a JSON object: {"to": "ops"}'
    )
    interval = forms.FloatField(required=False, min_value=0, help_text="Every so many seconds; or a cron:")
    cron = forms.CharField(
        required=False, max_length=200, help_text='Five fields: "*/15 * * * *", or "@daily".'
    )
    tz = forms.ChoiceField(
        choices=_zones, required=False, label="Time zone", help_text="The cron's wall clock."
    )
    queue = forms.CharField(required=False, max_length=100, help_text="Empty: the task's own queue.")
    priority = forms.IntegerField(required=False, help_text="-100 to 100; empty: the task's own priority.")
    misfire_grace_time = forms.FloatField(
        initial=DEFAULT_MISFIRE_GRACE_TIME,
        help_text="Seconds a missed tick is still enqueued after it was due.",
    )
    coalesce = forms.BooleanField(
        required=False, help_text="Of several missed ticks, enqueue only the latest."
    )
    enabled = forms.BooleanField(required=False, initial=True)

    def __init__(self, *args: Any, editing_name: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if editing_name is not None:
            self.fields["name"].disabled = True
            self.fields["name"].initial = editing_name

    @classmethod
    def initial_of(cls, kept: StoredSchedule) -> dict[str, Any]:
        return {
            "name": kept.name, "task": kept.task, "args": json.dumps(kept.args),
            "kwargs": json.dumps(kept.kwargs), "interval": kept.interval, "cron": kept.cron or "",
            "tz": kept.tz or "", "queue": kept.queue or "", "priority": kept.priority,
            "misfire_grace_time": kept.misfire_grace_time, "coalesce": kept.coalesce, "enabled": kept.enabled,
        }  # fmt: skip

    def schedule(self, by: str, served: frozenset[str] | None) -> StoredSchedule | None:
        """The checked schedule, or None with the problem added to the form's errors."""
        if not self.is_valid():
            return None
        data = self.cleaned_data
        try:
            return editing.build(
                data["name"], data["task"], args=data["args"], kwargs=data["kwargs"],
                interval=data["interval"], cron=data["cron"] or None, tz=data["tz"] or None,
                queue=data["queue"] or None, priority=data["priority"],
                misfire_grace_time=data["misfire_grace_time"], coalesce=data["coalesce"],
                enabled=data["enabled"], by=by, served=served,
            )  # fmt: skip
        except editing.ScheduleError as exc:
            self.add_error(None, str(exc))
            return None
