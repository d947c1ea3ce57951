"""Test clients logged in as users holding chosen permissions of the queue's admin model."""

from __future__ import annotations

from django.contrib.auth.models import Permission, User
from django.test import Client


def logged_in(*codenames: str, username: str, staff: bool = True) -> Client:
    """A client logged in as a new user (staff unless ``staff=False``, never superuser) with these permissions
    of the queue's model (``view_job``, ``change_job``, ``delete_job``)."""
    user = User.objects.create_user(username, password="pw", is_staff=staff)
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label="queue_max_django", codename__in=codenames)
    )
    client = Client()
    client.force_login(user)
    return client
