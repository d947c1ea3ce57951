"""Run by test_page.py in a subprocess with the example's settings: the page, the button and the JSON view
through Django's test client, and the batch run in-process by ``run_queued()`` until it is finished.
Prints one JSON object."""

from __future__ import annotations

import json
import os
import time

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_site.settings")
django.setup()

from django.core.management import call_command  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import setup_test_environment  # noqa: E402

from queue_max_django.conf import get_queue  # noqa: E402
from queue_max_django.testing import run_queued  # noqa: E402

setup_test_environment()
call_command("migrate", interactive=False, verbosity=0)
client = Client()
report: dict[str, object] = {"empty_page": client.get("/").status_code}
report["get_enqueue"] = client.get("/enqueue/").status_code
response = client.post("/enqueue/")
report["post"] = [response.status_code, response.headers.get("Location")]
report["before"] = client.get("/jobs.json").json()
page = client.get("/")
report["page"] = [page.status_code, page.content.decode()]
deadline = time.monotonic() + 60
while time.monotonic() < deadline:  # rate-limited and scheduled jobs become runnable over a few seconds
    run_queued()
    stats = get_queue().stats()
    if stats["pending"] + stats["scheduled"] + stats["running"] == 0:
        break
    time.sleep(0.1)
report["after"] = client.get("/jobs.json").json()
print(json.dumps(report))
