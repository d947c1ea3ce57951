"""Tests of the Django layer (pytest-django, settings in tests/settings.py)."""
