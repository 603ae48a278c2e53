"""The reference application: an application built on the queue, as yours would be.

* ``ledger``: money by category, the effect the chapters write (its table a
  migration line, ``ledger_migrations/``, one folder per engine), and its
  handler;
* ``demo``: the reference batch run end to end (``queue-core demo``);
* ``lab``: the seeds' receipts lab (``queue-core lab``);
* ``crash_child``: ``python -m queue_core.app.crash_child``, a real process
  that dies (``os._exit`` or SIGKILL) at one fault point of one operation,
  completing with the ledger's handler: the demo's crash, and the crash
  tests' and the crash matrix's.

The protocol imports none of it; ``queue_core.ledger`` is this ``ledger``.
"""
