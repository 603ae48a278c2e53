"""What your own tests of a queue can use: a fault probe and a crashing child.

* ``faults``: ``FaultPlan``, a probe that runs an action at a named point
  (``Store(..., probe=plan)``);
* ``child``: ``python -m queue_core.testing.child``, a real process that dies
  (``os._exit`` or SIGKILL) at one point of one operation.

The proof machinery built on them (the crash matrix, chaos runs, the
invariant checker, records) lives in the repository's ``proof`` package and
is not installed with queue_core.
"""
