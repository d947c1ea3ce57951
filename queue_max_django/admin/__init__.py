"""The queue's pages in the Django admin: a dashboard, the dead letters and the other states' lists, a page
per job, and the actions on them (views.py), registered for the unmanaged ``Job`` model of models.py; and the
Schedules page (schedules.py), for the unmanaged ``Schedule`` model.

listing.py chooses the jobs of a page, actions.py changes them, dashboard.py gathers the dashboard's numbers
and display.py formats jobs for people.
"""

from __future__ import annotations

from django.contrib import admin

from ..models import Job, Schedule
from .schedules import ScheduleAdmin
from .views import JobAdmin

admin.site.register(Job, JobAdmin)
admin.site.register(Schedule, ScheduleAdmin)

__all__ = ["JobAdmin", "ScheduleAdmin"]
