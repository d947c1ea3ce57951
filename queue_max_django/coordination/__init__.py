"""The Django side of coordinating jobs (the decisions themselves are the store's, in its own transactions):
what the commands and the admin share about pausing queues and tasks (``pausing.py``), how a task's unique
key is made from a call's arguments (``unique.py``), its concurrency limits (``concurrency.py``), and its rate
limit and breaker set in the store (``flow.py``)."""
