"""The proof machinery of queue_core, for its own repository: not in the wheel.

* ``invariants``: read a queue and check what must always hold;
* ``matrix``: the crash matrix, every point of every write operation, each
  with a real child process that dies there;
* ``chaos``: random kills of real worker processes, and lock contention;
* ``long_runs``: the committed records of the long random-kill runs, as the
  page prints them;
* ``postgres_cluster``: a throwaway PostgreSQL server (initdb, pg_ctl) for the
  tests and ``scripts/chaos.py --postgres``;
* ``powerfs`` (with ``powerfs_image``, ``powerfs_daemon``): a FUSE filesystem
  that keeps only what was synced, and cuts the power;
* ``powercut`` (with ``powercut_programs``, ``powercut_table``): raw SQLite and
  the queue's real processes under those cuts;
* ``failover``: a PostgreSQL primary SIGKILLed under real workers and
  producers, its streaming standby promoted, and what the new primary lacks;
* ``records``: what those runs found, kept (JSON, in a folder the caller
  names) with a fingerprint of the code they ran on, for the page "How we know".

What a user needs for their own tests stays in the package:
``queue_core.testing.faults`` (the fault probe), ``queue_core.app.crash_child``
(a real process that dies at a named point) and ``queue_core.ModelClock``.
"""
