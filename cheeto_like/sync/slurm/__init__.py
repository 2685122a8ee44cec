"""The Slurm reconciler, one module per step of a run (issue 32).

``desired`` (the store's wanted state, from queries) → ``quota`` (quota blocks as
GrpTRESMins zeros) → ``actual`` (sacctmgr, read and parsed) → ``plan`` (pure) →
``run`` (guarded apply under the site's lease, the ``SyncRun`` record). ``state`` holds
the frozen, normalised values all of them pass around, ``limits`` the limit columns,
``why`` the ``slurm why`` explanation. The package imports nothing up front, so a
caller pays only for the steps it names.
"""
