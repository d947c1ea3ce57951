"""The rule ids that contract tests carry as pytest markers (``pytest -m rfc_rec_01``).

``rfc_*``: EQueue's RFC (../shared/seeds/equeue-rfc.md), ported where it applies to this engine.
``inv_*``: the invariants of DESIGN.md ("Invariants", numbered 1-7).
``rule_*``: the other rules of DESIGN.md's engine surface.
Every id here is registered by tests/conftest.py; ``--strict-markers`` rejects any other.
"""

CONTRACTS: dict[str, str] = {
    # EQueue RFC: state machine
    "rfc_sm_01": "cannot complete a job that is still pending",
    "rfc_sm_02": "cannot nack a job that is still pending",
    "rfc_sm_03": "cannot nack a job that is already failed",
    # record and claim token
    "rfc_rec_01": "a stale record cannot ack after another holder re-claimed the job",
    "rfc_rec_02": "a wrong claim token raises QueueCorrupted",
    # idempotency
    "rfc_id_01": "a second ack on the same record raises QueueCorrupted",
    "rfc_id_02": "ack after vacuum removed the job raises QueueCorrupted",
    # retries
    "rfc_rt_01": "a job fails after max_retries + 1 nacks with the right retry count on disk",
    "rfc_rt_02": "each re-queueing nack increments the retry count by 1",
    # persistence and vacuum
    "rfc_ps_01": "ack keeps payload and done state on disk",
    "rfc_ps_02": "vacuum removes done jobs only; failed jobs stay",
    "rfc_ps_03": "vacuum lowers stats()['done'] for each removed job",
    # recovery
    "rfc_rc_01": "after recover(), no running job has an expired lease",
    "rfc_rc_02": "recovery fixes running jobs whose lease entry is missing",
    # claim safety
    "rfc_cl_01": "missing payload on disk raises QueueCorrupted, not a crash",
    # statistics
    "rfc_st_01": "stats() returns every documented key",
    "rfc_st_02": "no stat counter goes negative",
    "rfc_st_03": "lifecycle counts never exceed total",
    # shutdown
    "rfc_sh_01": "close() twice is safe",
    "rfc_sh_02": "operations after close raise QueueClosed",
    # multi-process
    "rfc_mp_01": "a job put by one Queue is retrievable by another on the same path",
    "rfc_mp_02": "concurrent get() from several instances claims each job exactly once",
    "rfc_mp_03": "after crash recovery the claimable index matches the job states",
    "rfc_mp_04": "recover() is idempotent across instances",
    # EQueue RFC invariants
    "rfc_inv_01": "total equals the number of successful puts, across restarts",
    "rfc_inv_02": "pending + scheduled + running + done + failed <= total",
    "rfc_inv_03": "after recovery no running job keeps an expired or absent lease",
    "rfc_inv_04": "a second ack raises QueueCorrupted",
    "rfc_inv_05": "after max_retries + 1 nacks the job is failed with retries == max_retries + 1",
    "rfc_inv_06": "after vacuum no done job keeps its records",
    "rfc_inv_07": "repeated close() does not raise",
    "rfc_inv_08": "every move into or out of pending changes the claim index in the same transaction",
    "rfc_inv_09": "recover() is idempotent",
    # DESIGN.md invariants
    "inv_1": "every state change is one write transaction; a kill at any instant leaves a consistent store",
    "inv_2": "one holder at a time; a dead holder's job runs again; touch() keeps a live holder's job",
    "inv_3": "no acknowledged put is lost by a process crash (nor by an OS crash with sync=True)",
    "inv_4": "many processes on one path; fork-safe; stale readers reclaimed; the map grows by itself",
    "inv_5": "put_many is all or nothing",
    "inv_6": "the store holds no pickle or code",
    "inv_7": "bad input raises before anything is written",
    # DESIGN.md rules
    "rule_states": "one vocabulary of states: State values are the stats keys and what jobs()/purge() take",
    "rule_job_id": "job ids are positive, unique across shards, stable, and name their shard",
    "rule_priority": "get() never passes over a waiting job of higher priority in any shard",
    "rule_fifo": "among equal priorities each shard is FIFO",
    "rule_delay": "delay/eta keep a job scheduled until then",
    "rule_retries": "max_retries counts nacks before failed; 0 means one attempt",
    "rule_backoff": "a nack schedules the retry after the backoff, with jitter, capped; delay= overrides",
    "rule_lease_attempt": "an expired lease counts as a failed attempt",
    "rule_dead_letters": "failed jobs keep payload, error, error type, traceback, retries, timestamps",
    "rule_completion": "completion only through the record; misuse raises QueueCorrupted, changes nothing",
    "rule_shared_env": "several Queues on one path in one process share one environment per shard",
    "rule_named_queues": "get(queues=[...]) serves only those queues",
    "rule_results": "ack(result=) is readable through job() until vacuum",
    "rule_paging": "jobs() pages by job id with after=, oldest or newest first",
    "rule_store_meta": "reopening with another shard count or layout is refused",
    "rule_wake": "an idle consumer notices a new job from any process without polling",
    "rule_durable": "sync=True commits are on disk before put returns; concurrent puts share a commit",
    "rule_verify": "verify() finds nothing wrong on any store the engine wrote",
    "rule_release": "release() puts a running job back to pending at the front, not counted as an attempt",
    "rule_management": "requeue/cancel/purge act only on the states they name",
    "rule_processing": "processing(): ack on success, nack and re-raise on an error, release on interrupt",
    "rule_wait_until_empty": "wait_until_empty() is True once nothing is pending, scheduled or running",
    "rule_async": "AsyncQueue has the same operations as coroutines and never blocks the event loop",
    "rule_config": "a mistake in Queue(...)'s arguments raises ConfigurationError before anything is opened",
    # flow control (issue 3)
    "flow_limit": "a limit grants its burst, then rate x time; remaining/retry_after exact; bad specs raise",
    "flow_limit_shared": "processes sharing a limit never take more than rate x time + burst together",
    "flow_rate_aware_claim": "get() never leases a job it may not start yet; held-back jobs stay pending",
    "flow_fast_limit": "fast limits (served from a local reserve) never hand out more than the shared bucket",
    "flow_breaker": "N consecutive failures open a breaker; its jobs wait; one trial after the timeout",
    "flow_breaker_shared": "a breaker's state is shared by every process of the store",
    "flow_events": "put/get/ack/nack/recovery fire their events with their fields; callbacks never break it",
    "flow_classify": "classify()'s decisions map onto nack(delay=, permanent=) as a worker applies them",
    # job metadata (issue 20)
    "rule_metadata": "put(metadata=) is stored with the job through every state; bad metadata writes nothing",
    "rule_metadata_save": "only the record holding a running job saves its metadata; others change nothing",
}


def _store_rules() -> dict[str, str]:
    """The store contract's rule ids, ``[sc_...]`` in the docstrings of ``engine/stores/base.py`` and
    ``engine/stores/contract/``: each is a marker that the store contract suite (tests/store_contract) puts on
    the tests of that rule."""
    import pathlib
    import re

    stores = pathlib.Path(__file__).parent.parent / "queue_max_django" / "engine" / "stores"
    rules = {}
    for path in [stores / "base.py", *sorted((stores / "contract").glob("*.py"))]:
        where = path.relative_to(stores.parent.parent).as_posix()
        for rule in re.findall(r"\[(sc_[a-z0-9_]+)\]", path.read_text()):
            rules[rule] = f"a rule of the store contract ({where})"
    return dict(sorted(rules.items()))


STORE_RULES = _store_rules()
CONTRACTS.update(STORE_RULES)
