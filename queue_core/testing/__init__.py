"""What your own tests of a queue can use: a fault probe.

* ``faults``: ``FaultPlan``, a probe that runs an action at a named point
  (``Store(..., probe=plan)``), and ``Tracer``, which records the points
  reached.

The crashing child that dies at such a point ships with the reference
application, whose demo shows a real crash: ``queue_core.app.crash_child``.

The proof machinery built on them (the crash matrix, chaos runs, the
invariant checker, records) lives in the repository's ``proof`` package and
is not installed with queue_core.
"""
