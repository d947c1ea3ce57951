"""The worker runtime of ``manage.py queue_worker``: a supervisor process (``supervisor.py``) starts worker
processes (``process.py``: threads that claim and run jobs, heartbeats, timeouts), forked by a fork server
(``forkserver.py``, ``launch.py``; ``startup.py`` is what comes before) or spawned, and runs the periodic
scheduler (``scheduler.py``). See docs/reference/commands.md and docs/howto/deploy.md."""

from .options import WorkerOptionError, WorkerOptions
from .supervisor import Supervisor, run_worker

__all__ = ["Supervisor", "WorkerOptionError", "WorkerOptions", "run_worker"]
