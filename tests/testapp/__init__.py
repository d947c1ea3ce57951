"""A test app: its tasks.py is imported by queue_max_django's autodiscovery."""
