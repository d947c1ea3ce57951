"""Running one claimed job, in any process (a worker thread, the immediate mode, ``testing.run_queued``).

- ``registry.py``: this process's tasks by name, which ``@task`` fills and the runner looks jobs up in.
- ``runner.py``: runs one ``@task`` job (``run_job``) and judges the attempt into a verdict; hands
  ``django.tasks`` jobs to ``backend.run_django_task_job``.
- ``completer.py``: the ``Verdict`` and the ``Completer`` that writes it, the one place a job ends.
- ``outcome.py``: what both runners share: the ``Outcome`` of a run, the last resort's error, the event loop
  of coroutine tasks, the immediate mode's claim.
- ``cancels.py``: cancelling a running job above the store: this process's cancel requests, and how a
  cancelled job ends (before it starts, or after it returned).
"""
