"""Management commands of queue_max_django (the commands themselves are in ``commands/``)."""
