"""The smoke test of an installed queue_max_django (.ci/package_smoke.sh runs it in clean virtualenvs).

``contents WHEEL SDIST PACKAGE_DIR``: every file of the checkout's package directory (templates, static files,
migrations, ``py.typed`` and the code; not ``__pycache__``) is in the wheel and in the sdist.

``project DIR --django MAJOR [--extras a,b]``: from DIR (a new, empty directory, so the checkout is not on
``sys.path``), imports the package and checks it comes from the virtualenv; writes a tiny project there (a
settings module with the app, the admin and an LMDB store in DIR, an app with a ``tasks.py``); runs
``django-admin check`` and ``migrate``; enqueues one job, runs ``queue_worker --burst`` in another process
and reads the job's result back; on Django 6 does the same for a ``django.tasks`` task through
``QueueMaxBackend``; renders the admin's dashboard, collects the static files, imports each extra's library.
"""

from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

EXTRA_MODULES = {"postgres": "psycopg", "metrics": "prometheus_client", "otel": "opentelemetry.trace"}

SETTINGS = """\
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent
SECRET_KEY = "package-smoke-test-only"
DEBUG = False
ALLOWED_HOSTS = ["testserver"]
USE_TZ = True
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "queue_max_django",
    "smoke_app",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "smoke_urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]
STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "static"
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": BASE_DIR / "db.sqlite3"}}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
QUEUE_MAX = {"DATA_DIR": BASE_DIR / "queue_max_data"}
"""

SETTINGS_DJANGO_TASKS = """\
TASKS = {"default": {"BACKEND": "queue_max_django.backend.QueueMaxBackend"}}
"""

URLS = """\
from django.contrib import admin
from django.urls import path

urlpatterns = [path("admin/", admin.site.urls)]
"""

TASKS = """\
from queue_max_django import task


@task(queue="default")
def add(a: int, b: int) -> int:
    return a + b
"""

TASKS_DJANGO_TASKS = """\

from django.tasks import task as django_task


@django_task()
def multiply(a: int, b: int) -> int:
    return a * b
"""


def run(args: list[str], cwd: Path, env: dict[str, str]) -> str:
    shown = " ".join([Path(args[0]).name, *args[1:]])
    started = time.monotonic()
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        sys.exit(f"failed (exit {done.returncode}): {shown}\n{done.stdout}\n{done.stderr}")
    print(f"   ok {time.monotonic() - started:4.1f} s  {shown}", flush=True)
    return done.stdout


def contents(wheel: Path, sdist: Path, package_dir: Path) -> None:
    expected = {
        path.relative_to(package_dir.parent).as_posix()
        for path in package_dir.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }
    with zipfile.ZipFile(wheel) as zf:
        in_wheel = set(zf.namelist())
    with tarfile.open(sdist) as tf:
        in_sdist = {name.split("/", 1)[1] for name in tf.getnames() if "/" in name}
    for kind, names in (("wheel", in_wheel), ("sdist", in_sdist)):
        missing = sorted(expected - names)
        if missing:
            sys.exit(f"the {kind} lacks {len(missing)} of the package's files: {missing[:20]}")
    for needed in (
        "queue_max_django/migrations/0001_initial.py",
        "queue_max_django/templates/queue_max_django/admin/dashboard.html",
        "queue_max_django/static/queue_max_django/admin/queue_max.css",
        "queue_max_django/py.typed",
    ):
        if needed not in in_wheel:
            sys.exit(f"wheel lacks {needed}")
    kinds = {
        part: sum(1 for name in in_wheel if f"/{part}/" in name)
        for part in ("templates", "static", "migrations")
    }
    print(f"   wheel: {len(in_wheel)} files, all {len(expected)} of the package's ({kinds}); the sdist too")


def project(directory: Path, django_major: int, extras: list[str]) -> None:
    os.chdir(directory)  # the checkout is not on sys.path: the import must come from the virtualenv
    sys.path[:] = [p for p in sys.path if p not in ("", os.getcwd())]
    import django

    import queue_max_django

    where = Path(queue_max_django.__file__).resolve()
    if not where.is_relative_to(Path(sys.prefix).resolve()):
        sys.exit(f"queue_max_django imported from {where}, not from the virtualenv {sys.prefix}")
    if django.VERSION[0] != django_major:
        sys.exit(f"Django {django.__version__} installed, {django_major}.x expected")
    python = sys.version.split()[0]
    print(f"   queue_max_django from {where.parent}; Django {django.__version__}; Python {python}")
    for extra in extras:
        importlib.import_module(EXTRA_MODULES[extra])
    if extras:
        print("   extras' libraries import: " + ", ".join(f"{e} ({EXTRA_MODULES[e]})" for e in extras))

    django_tasks = django_major >= 6
    (directory / "smoke_settings.py").write_text(SETTINGS + (SETTINGS_DJANGO_TASKS if django_tasks else ""))
    (directory / "smoke_urls.py").write_text(URLS)
    (directory / "smoke_app").mkdir()
    (directory / "smoke_app" / "__init__.py").write_text("")
    (directory / "smoke_app" / "tasks.py").write_text(TASKS + (TASKS_DJANGO_TASKS if django_tasks else ""))
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "smoke_settings", "PYTHONPATH": str(directory)}
    admin = str(Path(sys.executable).parent / "django-admin")
    run([admin, "check", "--fail-level", "WARNING"], directory, env)

    # This process is the project too from here on (a Python start and Django's imports cost about a second a
    # time on a fresh virtualenv, whose modules are not compiled yet); the worker is a process of its own.
    os.environ.update(DJANGO_SETTINGS_MODULE="smoke_settings")
    sys.path.insert(0, str(directory))
    django.setup()
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from django.test import Client

    from queue_max_django.results import JobResult

    call_command("migrate", verbosity=0)
    tasks = importlib.import_module("smoke_app.tasks")
    added = tasks.add.delay(2, 3)
    multiplied = tasks.multiply.enqueue(4, 5) if django_tasks else None
    run([admin, "queue_worker", "--burst", "--processes", "1", "--threads", "1"], directory, env)
    values = [JobResult.load(added.id).return_value]
    if multiplied is not None:
        values.append(tasks.multiply.get_result(multiplied.id).return_value)
    expected = [5, 20] if django_tasks else [5]
    if values != expected:
        sys.exit(f"results {values}, expected {expected}")
    print(f"   one job per API run by queue_worker --burst: results {values}")

    client = Client()
    client.force_login(User.objects.create_superuser("smoke", "smoke@example.com", "smoke"))
    page = client.get("/admin/queue_max_django/job/")
    if page.status_code != 200 or b"queue_max_django/admin/queue_max.css" not in page.content:
        sys.exit(f"the admin's dashboard: {page.status_code}, or no link to its stylesheet")
    call_command("collectstatic", interactive=False, verbosity=0)
    css = directory / "static" / "queue_max_django" / "admin" / "queue_max.css"
    if not css.is_file():
        sys.exit(f"collectstatic did not copy {css}")
    print("   the admin's dashboard renders; collectstatic copies the app's static files")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("contents")
    c.add_argument("wheel", type=Path)
    c.add_argument("sdist", type=Path)
    c.add_argument("package_dir", type=Path)
    p = sub.add_parser("project")
    p.add_argument("directory", type=Path)
    p.add_argument("--django", type=int, required=True)
    p.add_argument("--extras", default="")
    options = parser.parse_args()
    if options.command == "contents":
        contents(options.wheel, options.sdist, options.package_dir.resolve())
    else:
        project(options.directory.resolve(), options.django, [e for e in options.extras.split(",") if e])


if __name__ == "__main__":
    main()
