"""Proof machinery for queue_core: fault probes, a crashing child, invariants, crash matrix, chaos.

Nothing in the protocol imports this package. Tests, the docs build and your
own experiments do:

* ``faults``: ``FaultPlan``, a probe that runs an action at a named point;
* ``child``: ``python -m queue_core.testing.child``, a real process that dies
  (``os._exit`` or SIGKILL) at one point of one operation;
* ``invariants``: read a queue file and check what must always hold;
* ``matrix``: the crash matrix, every point of every write operation;
* ``chaos``: random kills of real worker processes, and lock contention;
* ``records``: what those runs found, kept (JSON, in a folder the caller
  names) with a fingerprint of the code they ran on, for the page "How we know".
"""
