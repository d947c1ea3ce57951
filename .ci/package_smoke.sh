#!/usr/bin/env bash
# The package as users install it: `uv build` makes a wheel and an sdist; each installs, with its extras, into a
# clean virtualenv (uv venv, no project dependencies) and passes the smoke test of .ci/package_smoke_check.py
# (import, `django-admin check`, migrate, one job run by `queue_worker --burst`, the admin's dashboard,
# collectstatic). The wheel must hold every file of the package (templates, static files, migrations).
# Pairs: the wheel on Python 3.13 with Django 6 (the extras) and with Django 5.2 LTS pinned, the sdist on
# 3.13, the wheel on 3.11 (Django 5.2 by the package's markers). Then the Django-version-sensitive tests
# (the django.tasks backend, the system checks) under Django 5.2 on Python 3.13, from the project's lock
# file with Django 5.2 laid over it. uv's cache is used offline first; what is not there comes from the index.
set -euo pipefail
cd "$(dirname "$0")/.."
export UV_PYTHON_DOWNLOADS=never
UV="${UV:-$(command -v uv || echo "python3 -m uv")}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
start=$SECONDS

# uv, from its cache when it can (offline), else from the index.
uv_cached() {
    if ! $UV "$@" --offline --quiet 2>"$work/offline.log"; then
        echo "   (not all in uv's cache: with the index)"
        $UV "$@" --quiet
    fi
}

echo "== uv build: wheel and sdist"
uv_cached build --out-dir "$work/dist"
wheel="$(echo "$work"/dist/queue_max_django-*.whl)"
sdist="$(echo "$work"/dist/queue_max_django-*.tar.gz)"
ls -l "$wheel" "$sdist" | awk '{print "   " $5 " bytes  " $NF}'

# smoke NAME PYTHON DJANGO_MAJOR EXTRAS REQUIREMENT...: a clean virtualenv, the requirements, the smoke test.
smoke() {
    local name="$1" python="$2" major="$3" extras="$4"
    shift 4
    echo "== $name"
    $UV venv --quiet --python "$python" "$work/venv-$name"
    local t=$SECONDS
    VIRTUAL_ENV="$work/venv-$name" uv_cached pip install "$@"
    echo "   installed in $((SECONDS - t)) s"
    mkdir "$work/project-$name"
    "$work/venv-$name/bin/python" .ci/package_smoke_check.py project "$work/project-$name" \
        --django "$major" --extras "$extras"
}

echo "== wheel and sdist contents"
python3 .ci/package_smoke_check.py contents "$wheel" "$sdist" queue_max_django

smoke wheel-py313-django6 3.13 6 postgres,metrics,otel "$wheel[postgres,metrics,otel]"
smoke wheel-py313-django52 3.13 5 postgres "$wheel[postgres]" "django>=5.2,<6"
smoke sdist-py313 3.13 6 postgres "queue-max-django[postgres] @ file://$sdist"
smoke wheel-py311 3.11 5 "" "$wheel"

echo "== tests of the django.tasks backend and the system checks: Python 3.13, Django 5.2"
$UV run --locked --python 3.13 --with 'django>=5.2,<6' python -c \
    'import django, sys; assert django.VERSION[:2] == (5, 2), django.__version__'
$UV run --locked --python 3.13 --with 'django>=5.2,<6' pytest -q -p no:cacheprovider \
    tests/django/test_backend.py tests/django/test_checks.py | tail -n 3

echo "== package smoke test passed in $((SECONDS - start)) s"
