"""The reference application: an application built on the queue, as yours would be.

* ``ledger``: money by category, the effect the chapters write (its table in
  ``ledger.sql`` and ``ledger_postgres.sql``), and its handler;
* ``demo``: the reference batch run end to end (``queue-core demo``);
* ``lab``: the seeds' receipts lab (``queue-core lab``).

The protocol imports none of it; ``queue_core.ledger`` is this ``ledger``.
"""
