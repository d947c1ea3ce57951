"""queue_health against a real worker: healthy while it runs and reports, unhealthy (a CommandError: status 1
from manage.py) once it has stopped and left the registry."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from tests.worker.conftest import Site, wait_for


# The registry and lag reads are proven on both stores by tests/django/test_command_health.py; this proves a
# real worker's heartbeat is what they see (a worker's start costs seconds on a loaded machine).
@pytest.mark.store_neutral
def test_a_running_worker_is_healthy_and_a_stopped_one_is_not(site: Site) -> None:
    worker = site.start(
        "--processes", "1", "--threads", "1", "--queue", "mail", "--no-scheduler", "--worker-id", "probed"
    )  # fmt: skip
    with site.queue() as queue:
        (info,) = wait_for(queue.workers, what=f"the worker to report; log:\n{worker.output()}")
        assert info.queues == ("mail",)
        out = io.StringIO()
        with override_settings(QUEUE_MAX=site.settings()):
            call_command("queue_health", "--queue", "mail", "--heartbeat-within", "30", stdout=out)
        assert out.getvalue().startswith("OK: 1 live worker(s), the newest heartbeat ")
        for replica in (("--worker-id", "probed"), ("--this-host",)):  # one replica's liveness probe
            out = io.StringIO()
            with override_settings(QUEUE_MAX=site.settings()):
                call_command("queue_health", *replica, "--processes", "1", stdout=out)
            assert out.getvalue().startswith("OK: 1 live worker(s) of "), replica

        worker.signal()
        assert worker.wait() == 0, worker.output()
        with override_settings(QUEUE_MAX=site.settings()), pytest.raises(CommandError) as gone:
            call_command("queue_health", "--queue", "mail", stdout=io.StringIO())  # status 1 from manage.py
        assert str(gone.value) == (
            "unhealthy: no worker is registered in this store (is queue_worker running?)"
        )
        with override_settings(QUEUE_MAX=site.settings()), pytest.raises(CommandError) as gone:
            call_command("queue_health", "--worker-id", "probed", stdout=io.StringIO())
        assert str(gone.value) == (
            "unhealthy: no worker process of worker 'probed' is registered (is queue_worker running with "
            "--worker-id probed?)"
        )
