"""What the app tells about its jobs besides their rows: metrics, traces and the log of lost jobs.

- ``metrics.py``: the store's figures as Prometheus metrics (the ``metrics`` extra); ``views.py`` serves
  them (``queue_max_django.urls``); ``checks.py`` is the system check that the extra is installed where
  the view is routed.
- ``tracing.py``: OpenTelemetry spans for enqueueing and running jobs (the ``otel`` extra).
- ``lostjobs.py``: the log line of a job lost with its worker, written by the recovery that takes it back.
- ``serving.py``: which queues no live worker takes jobs from (the admin dashboard's and ``queue_health``'s
  warning).
"""
