"""Tests get a store of their own (teststore.py), as they get a database of their own: ``manage.py test`` and
pytest-django on a small project of their own, in subprocesses, leave the development store as it was."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from queue_max_django import conf
from queue_max_django.conf import get_config, get_queue, teststore
from queue_max_django.engine import Queue
from tests.engine.locations import StoreLocation
from tests.testapp import tasks as t

ROOT = Path(__file__).resolve().parents[2]
BOUND = 120  # seconds: a subprocess that hangs fails the test within this

SETTINGS = """
import json, os
from pathlib import Path
BASE_DIR = Path(__file__).resolve().parent
SECRET_KEY = "test-store"
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "queue_max_django", "shop"]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": BASE_DIR / "db.sqlite3"}}
USE_TZ = True
if os.environ.get("PG_DATABASE"):  # the PostgreSQL store, in the default database
    DATABASES = {"default": json.loads(os.environ["PG_DATABASE"])}
    QUEUE_MAX = {"STORE": "postgresql"}
"""
MANAGE = """
import os, sys
if __name__ == "__main__":  # as Django's manage.py: a spawned process imports this module again
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "site_settings")
    from django.core.management import execute_from_command_line
    execute_from_command_line(sys.argv)
"""
TASKS = """
from queue_max_django import task

@task
def send_receipt(order_id):
    return order_id
"""
# One test module for both runners (a Django TestCase, which pytest-django runs too): it enqueues a job, sees
# it in the store the app uses, and a command started by the test (a new process) sees the same store.
TESTS = """
import json, os, subprocess, sys
from django.conf import settings
from django.test import SimpleTestCase
from queue_max_django.conf import get_config, get_queue
from shop.tasks import send_receipt

class ReceiptTests(SimpleTestCase):
    def test_delay_goes_to_the_test_store(self):
        result = send_receipt.delay(7)
        self.assertEqual(get_queue().job(result.job_id).payload, {"args": [7], "kwargs": {}})
        report = {"used": str(get_config().data_dir)}
        if os.environ.get("CHILD"):
            command = [sys.executable, "manage.py", "queue_stats", "--json"]
            out = subprocess.run(command, cwd=settings.BASE_DIR, capture_output=True, text=True, check=True)
            report["pending_seen_by_a_command"] = json.loads(out.stdout)["pending"]
        with open(os.environ["REPORT"], "w") as file:
            json.dump(report, file)
"""

PG_TESTS = """
import json, os
from django.db import connection
from django.test import TestCase
from queue_max_django.conf import get_queue
from shop.tasks import send_receipt

class ReceiptTests(TestCase):
    def test_delay_goes_to_the_test_database(self):
        result = send_receipt.delay(7)  # in the test's transaction: the store's tables are in this database
        with connection.cursor() as cursor:
            cursor.execute("SELECT current_database()")
            (used,) = cursor.fetchone()
        with open(os.environ["REPORT"], "w") as file:
            json.dump({"used": used, "job_id": result.id}, file)
"""

# Workers that a test starts work on the test run's store: one in the test's process
# (call_command("queue_worker"), whose worker processes are new interpreters) and one in a subprocess.
WORKER_TESTS = """
import json, os, subprocess, sys, threading
from django.conf import settings
from django.core.management import call_command
from django.test import TransactionTestCase
from queue_max_django.conf import get_queue, reset
from queue_max_django.engine.forks import open_stores
from shop.tasks import send_receipt

BURST = ["--burst", "--processes", "1", "--no-scheduler", "-v", "0"]

class WorkerTests(TransactionTestCase):
    def test_workers_run_the_test_s_jobs(self):
        states = {}
        job = send_receipt.delay(6)
        reset()  # no store open, no other thread: queue_worker forks its worker processes (fork server)
        states["forkable"] = not open_stores() and threading.active_count() == 1
        call_command("queue_worker", *BURST)
        states["forked"] = get_queue().job(job.job_id).state.value
        first = send_receipt.delay(7)  # with the store open here, the worker processes are spawned
        call_command("queue_worker", *BURST)
        states["spawned"] = get_queue().job(first.job_id).state.value
        second = send_receipt.delay(8)
        command = [sys.executable, "manage.py", "queue_worker", *BURST]
        subprocess.run(command, cwd=settings.BASE_DIR, check=True, timeout=90)
        states["subprocess"] = get_queue().job(second.job_id).state.value
        with open(os.environ["REPORT"], "w") as file:
            json.dump(states, file)
"""


def make_project(where: Path) -> Path:
    (where / "shop").mkdir(parents=True)
    for name, text in {
        "site_settings.py": SETTINGS,
        "manage.py": MANAGE,
        "shop/__init__.py": "",
        "shop/tasks.py": TASKS,
        "shop/tests.py": TESTS,
    }.items():
        (where / name).write_text(textwrap.dedent(text))
    with Queue(where / "queue_max_data") as dev:  # the development store, with a job of its own
        dev.put({"args": [1], "kwargs": {}}, name="shop.tasks.send_receipt")
    return where


def dev_total(project: Path) -> int:
    with Queue(project / "queue_max_data") as dev:
        return int(dev.stats()["total"])


def run(project: Path, command: list[str], **env: str) -> dict[str, object]:
    """Run ``command`` in the project; -> what its test reported."""
    report = project / "report.json"
    mine = (teststore.ENV_SWITCH, teststore.ENV_DIR, teststore.ENV_DATABASE)  # this run's, not the project's
    environ = {k: v for k, v in os.environ.items() if k not in mine}
    environ |= {"PYTHONPATH": f"{project}{os.pathsep}{ROOT}", "REPORT": str(report), **env}
    environ.pop("DJANGO_SETTINGS_MODULE", None)
    done = subprocess.run(
        command, cwd=project, env=environ, stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=BOUND,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    found: dict[str, object] = json.loads(report.read_text())
    return found


@pytest.mark.slow
@pytest.mark.store_neutral  # the LMDB store's directory; the PostgreSQL store is Django's test database
def test_manage_py_test_leaves_the_development_store_alone(tmp_path: Path) -> None:
    project = make_project(tmp_path / "project")
    test = [sys.executable, "manage.py", "test", "shop", "-v", "0"]
    report = run(project, test, CHILD="1")
    used = Path(str(report["used"]))
    assert used.name.startswith(teststore.PREFIX) and used != project / "queue_max_data"
    assert report["pending_seen_by_a_command"] == 1  # the command the test started used the test store
    assert not used.exists()  # removed at the end of the run
    assert dev_total(project) == 1  # only the job it had before (QUEUE_MAX_TEST_STORE=off makes it 2: the
    # switch itself is tested in-process, below, to spare CI a third Django process here)


@pytest.mark.slow
@pytest.mark.store_neutral
def test_pytest_django_leaves_the_development_store_alone(tmp_path: Path) -> None:
    project = make_project(tmp_path / "project")
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "pytest_django.plugin"]
    command += ["--ds", "site_settings", "--rootdir", str(project), "shop/tests.py"]
    report = run(project, command, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")  # pytest-django alone: quicker
    used = Path(str(report["used"]))
    assert used.name.startswith(teststore.PREFIX) and not used.exists()
    assert dev_total(project) == 1


@pytest.mark.store_neutral
def test_in_this_run_the_settings_directory_is_replaced_and_a_test_s_own_is_kept(tmp_path: Path) -> None:
    from django.conf import settings

    settings_dir = Path(
        settings.QUEUE_MAX["DATA_DIR"]
    )  # tests/settings.py's: this suite's "development" store
    conf.reset()
    used = get_config().data_dir
    assert used is not None and used != settings_dir and used.name.startswith(teststore.PREFIX)
    result = t.add.delay(1, 2)
    assert get_queue().job(result.job_id) is not None and any(used.iterdir())  # written there
    assert not settings_dir.exists()
    assert json.loads(os.environ[teststore.ENV_DIR]) == {"for": str(settings_dir), "dir": str(used)}
    with override_settings(QUEUE_MAX={"IMMEDIATE": True, "DATA_DIR": settings_dir}):
        assert get_config().data_dir == used  # the settings directory under another name: still replaced
    with override_settings(QUEUE_MAX={"DATA_DIR": tmp_path / "mine"}):
        assert get_config().data_dir == tmp_path / "mine"  # a directory of the test's own: kept


@pytest.mark.store_neutral
def test_a_wrong_switch_value_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(teststore.ENV_SWITCH, "maybe")
    conf.reset()
    with pytest.raises(ImproperlyConfigured, match="QUEUE_MAX_TEST_STORE is 'maybe': say 'off'"):
        get_config()
    monkeypatch.setenv(teststore.ENV_SWITCH, "off")
    conf.reset()
    from django.conf import settings

    assert get_config().data_dir == Path(settings.QUEUE_MAX["DATA_DIR"])


@pytest.mark.slow
def test_manage_py_test_on_the_postgresql_store_uses_django_s_test_database(
    tmp_path: Path, pg_url: str
) -> None:
    from .pgdjango import alias_settings

    project = make_project(tmp_path / "project")
    (project / "shop" / "tests.py").write_text(textwrap.dedent(PG_TESTS))
    entry = alias_settings(pg_url)
    report = run(
        project, [sys.executable, "manage.py", "test", "shop", "-v", "0"], PG_DATABASE=json.dumps(entry)
    )
    assert report["used"] == f"test_{entry['NAME']}"  # migrate made the store's tables there
    with StoreLocation("postgres", pg_url).open_queue() as dev:
        assert dev.stats()["total"] == 0  # nothing reached the database the settings name


@pytest.mark.store_neutral
def test_a_forked_process_of_the_test_run_gets_a_store_of_its_own() -> None:
    """As each process of Django's parallel runner (forked) gets a database of its own."""
    parent = get_config().data_dir
    assert parent is not None
    read, write = os.pipe()
    with warnings.catch_warnings():  # other tests' threads may live on: the child only reads settings
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: no pytest machinery from here on, only os._exit
        code = 1
        try:
            os.write(write, str(get_config().data_dir).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as pipe:
        child = Path(pipe.read())
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    try:
        assert child != parent and child.name.startswith(teststore.PREFIX) and child.is_dir()
    finally:
        shutil.rmtree(child)  # the child ended with os._exit: nothing of it ran at exit


@pytest.mark.store_neutral
def test_outside_a_test_run_nothing_changes_and_the_switch_is_not_read() -> None:
    code = (
        "import django; django.setup()\n"
        "from django.conf import settings\n"
        "from queue_max_django.conf import get_config\n"
        "assert get_config().data_dir == settings.QUEUE_MAX['DATA_DIR'], get_config().data_dir\n"
    )
    environ = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", teststore.ENV_SWITCH: "maybe"}
    environ.pop(teststore.ENV_DIR, None)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=environ, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.store_neutral  # the LMDB store's directory (the PostgreSQL store's test database is Django's)
@pytest.mark.parametrize("through", ["the store itself", "a folder above it"])
def test_a_data_dir_that_reaches_the_development_store_through_a_symlink_is_replaced(
    tmp_path: Path, through: str
) -> None:
    """A symlink (or a path through one) to the settings directory is that directory: the test run's store
    takes its place, and nothing is written into the development store."""
    from django.conf import settings

    settings_dir = Path(settings.QUEUE_MAX["DATA_DIR"])
    made = [path for path in (settings_dir.parent, settings_dir) if not path.exists()]
    settings_dir.mkdir(parents=True, exist_ok=True)  # the development store's folder, with nothing in it
    try:
        if through == "the store itself":
            (tmp_path / "link").symlink_to(settings_dir, target_is_directory=True)
            override = tmp_path / "link"
        else:
            (tmp_path / "link").symlink_to(settings_dir.parent, target_is_directory=True)
            override = tmp_path / "link" / settings_dir.name
        conf.reset()
        test_run_dir = get_config().data_dir
        with override_settings(QUEUE_MAX={"DATA_DIR": override}):
            assert get_config().data_dir == test_run_dir
            t.add.delay(1, 2)
        assert list(settings_dir.iterdir()) == []  # the development store was not written
    finally:
        conf.reset()
        for path in reversed(made):
            shutil.rmtree(path, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.parametrize("runner", ["manage.py test", "pytest-django"])
def test_workers_a_test_starts_run_the_test_run_s_jobs_and_leave_the_development_store_alone(
    tmp_path: Path, store_kind: str, request: pytest.FixtureRequest, runner: str
) -> None:
    """A worker started by a test (``call_command("queue_worker")``, whose worker processes are forked by
    the fork server or spawned, and a ``manage.py queue_worker`` subprocess) works on the test run's store:
    it runs the test's jobs and not the one waiting in the development store (the PostgreSQL store: the
    database the settings name)."""
    project = make_project(tmp_path / "project")
    (project / "shop" / "tests.py").write_text(textwrap.dedent(WORKER_TESTS))
    env = {}
    if store_kind == "postgres":
        from .pgdjango import alias_settings

        pg_url = str(request.getfixturevalue("pg_url"))
        entry = alias_settings(pg_url)
        env["PG_DATABASE"] = json.dumps(entry)
        development = StoreLocation("postgres", pg_url)
        with development.open_queue() as dev:
            dev.put({"args": [1], "kwargs": {}}, name="shop.tasks.send_receipt")
    else:
        development = StoreLocation("lmdb", str(project / "queue_max_data"))  # make_project put its job
    if runner == "manage.py test":
        report = run(project, [sys.executable, "manage.py", "test", "shop", "-v", "0"], **env)
    else:
        command = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "pytest_django.plugin",
        ]
        command += ["--ds", "site_settings", "--rootdir", str(project), "shop/tests.py"]
        report = run(project, command, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1", **env)
    assert report == {"forkable": True, "forked": "done", "spawned": "done", "subprocess": "done"}
    with development.open_queue() as dev:
        assert (dev.stats()["pending"], dev.stats()["done"]) == (1, 0)  # the development job: still waiting


ADOPT = """
import json, os
import django
from django.conf import settings
from queue_max_django.conf.teststore import ENV_DATABASE, adopt_test_database
django.setup()  # (AppConfig.ready() adopts what the environment names: here it names nothing yet)
found = {}
for name in json.loads(os.environ["NAMES"]):
    settings.DATABASES["store"]["NAME"] = "dev"
    os.environ[ENV_DATABASE] = json.dumps({"alias": "store", "name": name})
    adopt_test_database()
    found[name] = settings.DATABASES["store"]["NAME"]
print(json.dumps(found))
"""


@pytest.mark.store_neutral  # Django's settings only: nothing connects
def test_a_process_started_by_a_test_takes_the_test_database_of_its_own_settings_only(tmp_path: Path) -> None:
    (tmp_path / "adopt_settings.py").write_text(
        "from tests.settings import *\n"
        "DATABASES = {**DATABASES, 'store': {'ENGINE': 'django.db.backends.postgresql', 'NAME': 'dev'}}\n"
    )
    names = ["test_dev", "test_dev_2", "test_dev_gw0", "dev_copy", "other", "test_devx"]
    environ = {k: v for k, v in os.environ.items() if k not in (teststore.ENV_DIR, teststore.ENV_DATABASE)}
    environ |= {"DJANGO_SETTINGS_MODULE": "adopt_settings", "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    environ["NAMES"] = json.dumps(names)
    done = subprocess.run(
        [sys.executable, "-c", ADOPT], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=BOUND
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "test_dev": "test_dev",  # Django's test database of NAME "dev"
        "test_dev_2": "test_dev_2",  # a copy of it for a process of the parallel runner
        "test_dev_gw0": "test_dev_gw0",  # pytest-xdist's
        "dev_copy": "dev",  # not a test database of these settings: left alone
        "other": "dev",
        "test_devx": "dev",
    }
