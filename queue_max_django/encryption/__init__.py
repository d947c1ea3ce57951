"""Encrypted jobs at rest, the Django side (docs/security.md): which jobs are sealed
(``QUEUE_MAX["ENCRYPT"]``, ``@task(encrypt=True)``), the ``Sealer`` of ``QUEUE_MAX["ENCRYPTION_KEYS"]``
(keys.py), sealing what a job carries on its way to the store and opening it in the worker (jobs.py), and
the settings' checks (checks.py). The cipher itself is the engine's (``engine/sealing.py``)."""
