"""``manage.py queue_demo``: the whole product in one command, from a fresh clone.

It migrates the database, creates the demo admin user, enqueues a realistic mix of jobs
(``example_app.batch``), runs the real worker (``manage.py queue_worker --burst``, in a subprocess) while it
shows the progress, then prints the store's figures, this run's dead letters, and the commands to go on
with. Run it again at will: each run enqueues and reports its own batch; earlier jobs stay in the store.

It also shows a job enqueued inside ``transaction.atomic()`` going away with the rolled-back transaction,
and one that commits with it: the same on both stores (LMDB stores a job when its transaction commits; the
PostgreSQL store, ``EXAMPLE_POSTGRES_URL`` in the settings, writes it in the transaction).
"""

from __future__ import annotations

import collections
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from queue_max_django.conf import get_config, get_queue, store_class
from queue_max_django.engine import Job

from ...batch import Entry, enqueue_batch
from ...tasks import send_welcome_email

ADMIN_USERNAME = "admin"
ADMIN_PASSWORD = "admin"  # a local demo login, printed on purpose
WORKER_TIMEOUT = 120.0  # seconds: far more than the batch needs; a worker that takes longer is a bug
STATES = ("pending", "scheduled", "running", "done", "failed")


class Command(BaseCommand):
    help = (
        "Migrate, create the demo admin user, enqueue a mix of jobs, run the worker in burst mode until they "
        "are all done or dead-lettered, and print the stats, the dead letters and what to run next."
    )

    # The checks run after ``migrate`` (handle): on PostgreSQL, before it, the store's tables are missing.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--processes", type=int, default=2, help="worker processes (default 2)")
        parser.add_argument("--threads", type=int, default=4, help="threads per worker process (default 4)")
        parser.add_argument("--seed", type=int, help="seed of the batch's random sizes")

    def handle(self, *args: Any, **options: Any) -> None:
        started = time.monotonic()
        self._heading("1. The database")
        call_command("migrate", interactive=False, verbosity=0)
        self.stdout.write(f"Migrated {settings.DATABASES['default']['NAME']}")
        self.check(databases=["default"])  # the system checks: settings, and the store's tables now made
        self._admin_user()

        self._heading("2. Enqueue a batch")
        store = store_class(get_config())
        self.stdout.write(f"Store: {get_queue().path} ({store.kind})")
        entries = enqueue_batch(seed=options["seed"])
        entries.append(self._in_a_transaction())
        for kind, count in collections.Counter(entry.kind for entry in entries).items():
            self.stdout.write(f"  {count:3d} x {kind}")
        self.stdout.write(f"Enqueued {len(entries)} jobs.")

        self._heading("3. Run the worker until the batch is finished")
        worker = [
            "queue_worker",
            "--burst",
            "--burst-wait=5",  # stay for retries and scheduled jobs due within 5 s
            f"--processes={options['processes']}",
            f"--threads={options['threads']}",
        ]
        self.stdout.write(f"$ {self._manage()} {' '.join(worker)}")
        self._run_worker(worker, entries)

        self._heading("4. What is in the store")
        call_command("queue_stats", stdout=self.stdout)
        jobs = self._jobs(entries)
        self._summary(entries, jobs)
        self._dead_letters(entries, jobs)
        unfinished = [
            job_id for job_id, job in jobs.items() if job is None or job.state not in ("done", "failed")
        ]

        self._heading("5. Go on")
        manage = self._manage()
        self.stdout.write("Start the web server (the batch page and the admin):")
        self.stdout.write(f"    {manage} runserver")
        self.stdout.write("Start a worker, in another terminal (Ctrl-C stops it gracefully):")
        self.stdout.write(f"    {manage} queue_worker")
        self.stdout.write("Then open:")
        self.stdout.write("    http://127.0.0.1:8000/         enqueue a batch and watch it run")
        login = f"{ADMIN_USERNAME} / {ADMIN_PASSWORD}"
        self.stdout.write(
            f"    http://127.0.0.1:8000/admin/   the queue's pages in the admin (login {login})"
        )
        self.stdout.write(f"Demo finished in {time.monotonic() - started:.1f} s.")
        if unfinished:
            raise CommandError(f"{len(unfinished)} job(s) of the batch did not finish: {unfinished[:10]}")

    # ------------------------------------------------------------------ steps

    def _admin_user(self) -> None:
        """The demo's superuser, with the printed password again (a second run resets it)."""
        user_model = get_user_model()
        user, _ = user_model.objects.get_or_create(
            username=ADMIN_USERNAME, defaults={"email": "admin@example.com"}
        )
        user.is_staff = user.is_superuser = True
        user.set_password(ADMIN_PASSWORD)
        user.save()
        self.stdout.write(f"Admin user: {ADMIN_USERNAME} / password: {ADMIN_PASSWORD}")

    def _in_a_transaction(self) -> Entry:
        """Two ``.delay()`` calls inside ``transaction.atomic()``: the job of the rolled-back block is not
        stored, the committed one is (and the worker runs it). -> its entry."""
        queue = get_queue()
        total = queue.stats()["total"]

        class RolledBack(Exception):
            pass

        try:
            with transaction.atomic():
                dropped = send_welcome_email.delay("rolled-back@example.com")
                raise RolledBack
        except RolledBack:
            pass
        if queue.stats()["total"] != total or dropped.is_committed:
            raise CommandError(f"a job enqueued in a rolled-back transaction is stored: {dropped!r}")
        with transaction.atomic():
            kept = send_welcome_email.delay("committed@example.com")
            waiting = repr(kept)
        self.stdout.write(f"In transaction.atomic(), rolled back: {dropped!r}")
        self.stdout.write(f"In transaction.atomic(), committed: {waiting}, then job {kept.id}")
        return Entry("email (committed in a transaction)", kept.job_id)

    def _run_worker(self, arguments: list[str], entries: list[Entry]) -> None:
        log_path = Path(settings.STATE_DIR) / "worker.log"
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": os.environ.get("DJANGO_SETTINGS_MODULE", "example_site.settings"),
        }
        command = [sys.executable, str(Path(settings.BASE_DIR) / "manage.py"), *arguments]
        progress = Progress(self.stdout, len(entries))
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
            deadline = time.monotonic() + WORKER_TIMEOUT
            try:
                while proc.poll() is None:
                    progress.show(self._counts(entries))
                    if time.monotonic() > deadline:
                        proc.kill()
                        raise CommandError(
                            f"the worker did not finish within {WORKER_TIMEOUT:.0f} s ({log_path})"
                        )
                    time.sleep(0.2)
            except KeyboardInterrupt:
                proc.terminate()  # the worker finishes its running jobs, then exits
                proc.wait(30)
                raise
        progress.show(self._counts(entries), final=True)
        if proc.returncode != 0:
            tail = log_path.read_text(encoding="utf-8", errors="replace")[-3000:]
            raise CommandError(
                f"queue_worker exited with status {proc.returncode}; its log ({log_path}):\n{tail}"
            )
        self.stdout.write(f"The worker exited with status 0 (its log: {log_path}).")

    def _summary(self, entries: list[Entry], jobs: dict[int, Job | None]) -> None:
        self._heading("This run's jobs")
        states: dict[str, collections.Counter[str]] = {}
        retries: collections.Counter[str] = collections.Counter()
        for entry in entries:
            job = jobs[entry.job_id]
            states.setdefault(entry.kind, collections.Counter())[job.state if job else "gone"] += 1
            retries[entry.kind] += job.retries if job else 0
        width = max(len(kind) for kind in states)
        self.stdout.write(f"{'KIND':<{width}}  DONE  DEAD LETTERS  RETRIES")
        for kind, counts in states.items():
            self.stdout.write(
                f"{kind:<{width}}  {counts['done']:4d}  {counts['failed']:12d}  {retries[kind]:7d}"
            )
        done = sum(counts["done"] for counts in states.values())
        failed = sum(counts["failed"] for counts in states.values())
        if done + failed == len(entries):
            self.stdout.write(f"All {len(entries)} jobs finished: {done} done, {failed} dead letters.")
        else:
            self.stdout.write(
                f"{done} done, {failed} dead letters, {len(entries) - done - failed} NOT finished."
            )

    def _dead_letters(self, entries: list[Entry], jobs: dict[int, Job | None]) -> None:
        self._heading("This run's dead letters")
        dead = [job for job in jobs.values() if job is not None and job.state == "failed"]
        if not dead:
            self.stdout.write("(none)")
        for job in dead:
            self.stdout.write(
                f"{job.job_id}  {job.name}  {job.attempts} attempt(s)  {job.error_type}: {job.error}"
            )
        self.stdout.write(
            f"All dead letters, this run's and earlier ones: {self._manage()} queue_list --status failed "
            "(retry them with queue_retry --all, or from the admin)."
        )

    # ------------------------------------------------------------------ helpers

    def _jobs(self, entries: list[Entry]) -> dict[int, Job | None]:
        queue = get_queue()
        return {entry.job_id: queue.job(entry.job_id) for entry in entries}

    def _counts(self, entries: list[Entry]) -> dict[str, int]:
        counts = dict.fromkeys((*STATES, "retries"), 0)
        for job in self._jobs(entries).values():
            if job is not None:
                counts[job.state] += 1
                counts["retries"] += job.retries
        return counts

    def _manage(self) -> str:
        """How to run this manage.py from the current directory, as the user typed it."""
        manage = os.path.relpath(Path(settings.BASE_DIR) / "manage.py")
        prefix = "".join(
            f"{name}={shlex.quote(os.environ[name])} "
            for name in ("EXAMPLE_STATE_DIR", "EXAMPLE_POSTGRES_URL")
            if os.environ.get(name)
        )
        return f"{prefix}uv run python {shlex.quote(manage)}"

    def _heading(self, text: str) -> None:
        self.stdout.write("")
        self.stdout.write(self.style.MIGRATE_HEADING(text))


class Progress:
    """One line that updates itself on a terminal; elsewhere (a log, a pipe) a line when something changed,
    at most once a second."""

    def __init__(self, out: Any, total: int) -> None:
        self.out = out
        self.total = total
        self.started = time.monotonic()
        self.last_line = ""
        self.last_print = 0.0
        stream: TextIO | None = getattr(out, "_out", None)
        self.tty = bool(stream is not None and stream.isatty())

    def show(self, counts: dict[str, int], *, final: bool = False) -> None:
        finished = counts["done"] + counts["failed"]
        width = 30
        filled = width * finished // max(self.total, 1)
        bar = "#" * filled + "." * (width - filled)
        line = (
            f"[{bar}] {finished}/{self.total}  done {counts['done']}  dead {counts['failed']}  "
            f"running {counts['running']}  waiting {counts['pending']}  scheduled {counts['scheduled']}  "
            f"retries {counts['retries']}  {time.monotonic() - self.started:4.1f} s"
        )
        now = time.monotonic()
        if self.tty:
            self.out.write("\r" + line, ending="\n" if final else "")
            self.out.flush()
        elif final or (
            line.split("  ")[:-1] != self.last_line.split("  ")[:-1] and now - self.last_print >= 1.0
        ):
            self.out.write(line)
            self.last_print = now
        self.last_line = line
