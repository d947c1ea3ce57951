"""Tags: short strings a job is put with (engine/tags.py), kept in its metadata under ``tags.TAGS_KEY`` and
indexed by every store, so that ``Store.tagged_jobs`` finds a tag's jobs without walking the store.

- [sc_tags_stored] A job put with metadata that holds ``TAGS_KEY`` (a list of checked tags: the Queue checks
  them, ``tags.check_tags``) reads back with those tags (``Job.tags``) in every state, and a holder's
  ``save_metadata`` keeps them (``metadata.keeping_cancel_note``): only a duplicate put that replaces a
  waiting job's metadata (``on_duplicate`` replace) gives the job other tags.
- [sc_tags_index] The store keeps an index of tag -> job ids, written in the transaction that writes the job
  (``enqueue``, ``put_one``; a batch's jobs all at once; a replacing duplicate's tags instead of the old) and
  removed in the one that removes it: ``delete``, ``purge``, ``vacuum``, ``cancel`` of a waiting job. A
  store's own index (LMDB: the ``tags`` database of each shard; memory: ``Space.tags``; PostgreSQL: a GIN
  index on the ``_tags`` expression of both job tables, kept by PostgreSQL itself) holds no entry of a
  removed job. An entry whose job is gone or no longer has the tag (a record quarantined) is never listed.
- [sc_tags_list] ``tagged_jobs(now, tags, state=, queue=, name=, after=, limit=)``: the jobs that have every
  one of ``tags``, newest first (by id, across shards), at most ``limit``, in any state unless ``state`` is
  given, of ``queue`` and ``name`` when given. It walks the index of the first tag only: the cost is that
  tag's jobs (filters applied as it walks), never the size of the store.
- [sc_tags_paging] ``after``: only jobs with ids below it (the last job id of the previous page: keyset
  paging, any id will do, the job need not exist any more), so pages never repeat or skip a job that stays.
"""
