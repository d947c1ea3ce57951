"""An app for the worker subprocesses of tests/django/test_encryption_at_rest.py: its ``ready()`` imports
tests/testapp/encrypted_tasks.py, so that the worker has the encrypted tasks (only ``tasks.py`` modules are
autodiscovered, and the test app's would give every other test a task that needs a key)."""
