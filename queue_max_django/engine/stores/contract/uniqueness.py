"""Unique keys: an option of ``Store.enqueue`` (a ``NewJobs`` batch of one payload with a ``UniqueRule``)
that every store decides inside the put's own transaction, and what the stores share to decide it the same
way (``holds``). The Queue checks the key and the rule before anything is written (``engine/uniqueness.py``).

A store keeps one *entry* per key: the job it names (its *holder*), when the key was taken (µs), the rule's
hold, and for a window the time the window ends. A key is never freed by the transactions that end jobs
(complete, fail, cancel, delete, purge, vacuum): nothing on those paths reads or writes an entry. It is made
stale by a check at the next put with that key, which reads the holder's state in its own transaction:

- [sc_unique_hold] The holder holds the key, by the hold its entry was taken with: ``HOLD_STARTED`` while the
  holder is pending or scheduled; ``HOLD_FINISHED`` while it is pending, scheduled or running;
  ``HOLD_WINDOW`` until the window's end (``now`` of the put that took the key + ``window_us``), whatever
  became of the holder; ``HOLD_REMEMBERED`` (the periodic ticks' rule, ``enqueue``'s ``sc_enqueue_unique``)
  until ``vacuum`` forgets the entry, whatever became of the holder. A holder that is gone (cancelled,
  deleted, purged, vacuumed) holds nothing, but by a window or ``HOLD_REMEMBERED``. A holder that fails and
  is retried (pending or scheduled again) holds its key again if its entry still names it.
- [sc_unique_take] A batch whose key nobody holds is written as any batch, and its entry then names the new
  job, taken ``now`` with the batch's hold (over a stale entry, if there was one).
- [sc_unique_skip] A batch whose key is held, with ``ON_DUPLICATE_SKIP``, writes no job: its id is the
  holder's and ``unique_hit`` is set; the entry is unchanged.
- [sc_unique_raise] With ``ON_DUPLICATE_RAISE``, ``errors.DuplicateJob`` (naming the holder's id and the
  key) is raised from the enqueue and its transaction is rolled back: no batch of that call is written.
- [sc_unique_replace] With ``ON_DUPLICATE_REPLACE`` and a holder that is pending or scheduled, the holder
  takes the batch's payload, metadata and ready time: scheduled until ``spec.ready_at`` if that is after
  ``now``, else pending, ready ``now``. Its id, queue, name, priority, retries, attempts and ``enqueued_at``
  stay; the entry is unchanged (a window still ends where it did); the id returned is the holder's, and
  ``unique_hit`` and ``replaced`` are set. A holder in any other state (running, under ``HOLD_FINISHED``;
  finished, under a window) is not touched: the batch is written as a new job, which takes the key.
- [sc_unique_batches] The batches of one enqueue are decided in order, each after the writes of those
  before it: of several batches with one key, the first takes it and the next are its duplicates.
- [sc_unique_counts] ``Store.unique_counts()``: (duplicates skipped, duplicates replaced) ever, store-wide,
  counted in the put's own transaction (a rolled-back put counts nothing); only grow. Keys taken with
  ``HOLD_REMEMBERED`` are not counted (a periodic tick put twice by two schedulers is no user's duplicate).
- [sc_unique_vacuum] ``vacuum`` also forgets every entry that holds nothing any more (its holder no longer
  holds it, its window ended), whatever its age: an entry never outlives its key's hold by more than one
  vacuum, nor (but ``HOLD_REMEMBERED``) ``max(unique_ttl, UNIQUE_KEY_MIN_TTL)``.
- [sc_unique_caller_txn] Where ``transactional_enqueue`` is true, the decision holds across transactions:
  a put in a transaction that has not committed makes a second put of that key, in another transaction,
  wait for it; after it commits the second put is decided on what it wrote (a duplicate), after a rollback
  as if it had never been.

A key routes its job on a store of several shards (the Queue puts it on the shard of the key's hash), so
that the check and the write meet in one shard's transaction. A job with concurrency limits too is routed by
its limits (``concurrency.route_key``) and its key is *scoped* to that route (``scoped_key``: the route and
the key, after ``SCOPE``), so that its duplicates are judged among the jobs of its placement, the same on
every store; a store treats a scoped key as any other.
"""

from __future__ import annotations

from dataclasses import dataclass

HOLD_REMEMBERED = 0  # until vacuum forgets the entry (periodic ticks: the engine's put without unique_until)
HOLD_STARTED = 1  # while the holder waits (pending or scheduled)
HOLD_FINISHED = 2  # while the holder waits or runs
HOLD_WINDOW = 3  # until the window's end, whatever became of the holder

ON_DUPLICATE_SKIP = 0
ON_DUPLICATE_REPLACE = 1
ON_DUPLICATE_RAISE = 2

# The states (``job.STATES`` codes: pending 0, scheduled 1, running 2) in which a holder holds its key, by
# hold: a state code below the bound holds it.
STATE_BOUND = {HOLD_STARTED: 2, HOLD_FINISHED: 3}

SCOPE = "\x1f"  # opens a scoped key and ends its scope: "\x1f<route>\x1f<key>"


@dataclass(frozen=True, slots=True)
class UniqueRule:
    """What a put with a unique key asks of the store: the key (``types.id_bytes``), the hold (``HOLD_*``),
    the window in µs (``HOLD_WINDOW`` only; 0 otherwise), and what to do with a duplicate
    (``ON_DUPLICATE_*``). ``text``: the key as given, for ``DuplicateJob``'s message."""

    key: bytes
    hold: int
    window_us: int
    on_duplicate: int

    @property
    def text(self) -> str:
        """The key as the caller gave it (a scoped key without its scope)."""
        text = self.key.decode()
        return text.split(SCOPE, 2)[2] if text.startswith(SCOPE) else text


def holds(hold: int, until_us: int, state: int | None, now_us: int) -> bool:
    """Does an entry still hold its key (``sc_unique_hold``)? ``hold`` and ``until_us`` as it was taken;
    ``state``: its holder's state code, None when the holder is gone; ``now_us``: the put's time."""
    if hold == HOLD_REMEMBERED:
        return True
    if hold == HOLD_WINDOW:
        return now_us < until_us
    return state is not None and state < STATE_BOUND[hold]


def until_of(rule: UniqueRule, now_us: int) -> int:
    """The window end of an entry ``rule`` takes at ``now_us`` (0 but for a window)."""
    return now_us + rule.window_us if rule.hold == HOLD_WINDOW else 0


def counted(rule: UniqueRule) -> bool:
    """Is a duplicate of this rule counted in ``unique_counts`` (``sc_unique_counts``)?"""
    return rule.hold != HOLD_REMEMBERED
