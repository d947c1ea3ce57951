"""The metrics view (``queue_max_django.urls`` serves it as ``metrics/``): the store's figures in
Prometheus's text format (metrics.py), for a scraper that presents ``QUEUE_MAX["METRICS_TOKEN"]`` as a
bearer token, or a logged-in user with the jobs' view permission (``queue_max_django.view_job``). It only
reads: where the settings' LMDB directory holds no store it answers 503 with the reason, creating nothing."""

from __future__ import annotations

import hmac

from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from ..conf import NoStore, get_config, get_queue
from .metrics import MissingExtra, render

PERMISSION = "queue_max_django.view_job"
BEARER = "bearer "


def allowed(request: HttpRequest, token: str | None) -> bool:
    """The request carries the configured token (compared in constant time), or its user may view jobs."""
    header = request.headers.get("Authorization", "")
    if token is not None and header[: len(BEARER)].lower() == BEARER:
        given = header[len(BEARER) :].strip().encode()
        return hmac.compare_digest(given, token.encode())
    user = getattr(request, "user", None)  # None without Django's AuthenticationMiddleware
    return bool(user is not None and user.is_authenticated and user.has_perm(PERMISSION))


@never_cache
@require_safe
def metrics(request: HttpRequest) -> HttpResponse:
    if not allowed(request, get_config().metrics_token):
        response = HttpResponse(
            "Not allowed to read the queue metrics.\n", status=401, content_type="text/plain"
        )
        response["WWW-Authenticate"] = 'Bearer realm="queue_max metrics"'
        return response
    try:
        body, content_type = render(get_queue(create=False))
    except MissingExtra as exc:
        raise ImproperlyConfigured(str(exc)) from exc
    except NoStore as exc:  # a DATA_DIR without a store: say so, create nothing (a scrape is no writer)
        return HttpResponse(f"{exc}\n", status=503, content_type="text/plain")
    return HttpResponse(body, content_type=content_type)
