"""``manage.py queue_*``: each command parses its options, calls the engine, and prints."""
