"""queue_max_django: a persistent, crash-safe job queue for Django on one machine.

Importing this package imports nothing else, Django included: the engine (``queue_max_django.engine``) runs
without Django. Names of the Django layer added here later must be loaded lazily (module ``__getattr__``).
"""
