"""The embedded store's server process: nx-27017's command handler behind our own wire loop.

Why our own loop rather than nx-27017's: nx-27017 runs every client's commands on one
SQLite connection per database. A transaction left open by a client that died (SIGKILL,
SIGTERM, a reset) stayed open forever, and every later write ran inside it and was lost;
two sessions' transactions nested as savepoints of each other ("no such savepoint").
Here the server owns transactions:

- ``TransactionGate``: one transaction at a time across all connections. Every other
  command that touches the data (reads too: they would see uncommitted rows on the shared
  connection) waits for it server-side, and fails after ``--lock-timeout`` seconds with
  ``LockTimeout`` instead of hanging.
- The connections that carried a command of the open transaction are remembered; when
  one of them closes, the transaction is rolled back and the gate released. (Only those:
  pymongo reuses lsids across its pooled connections, so a connection that saw the
  session before its transaction began says nothing about it.)
- Over TCP a connection must authenticate (SCRAM-SHA-256, the token as password; PLAIN
  is still accepted) before any command but the handshake. ``cheetoIdentity`` answers
  the data directory's real path and instance id, so clients can refuse a server that
  is not theirs.
- ``renameCollection`` is ours (mongod's form on ``admin``, ``dropTarget``, one SQLite
  transaction), and no transaction may drop or rename (mongod's 263): nx-27017's
  collection cache does not roll back with SQLite.

The process sets umask 077 and makes its data directory 0700 and the files in it 0600.

Modules: ``protocol`` (constants, message checks, error replies), ``limits`` (16 MiB),
``gate`` (the transaction gate), ``auth`` (SCRAM), ``failpoints`` (``failCommand``),
``ddl`` (rename and drop), ``server`` (the connection loop, ``StoreServer``) and
``process`` (``main``). Nothing imports this package but ``embedded.py``'s ``__main__``
and the tests; what it shares with the client is ``embedded_common.py``.
"""
