"""The LDAP reconciler, one module per step of a run (issue 32).

``desired`` (the store's projection, from queries) → ``actual`` (the entries in focus,
read and parsed) → ``plan`` (pure) → ``run`` (guarded apply under the site's lease, the
``SyncRun`` record, watermarks). ``state`` holds the normalised entries, ``mark`` the
site mark that makes incremental runs read nothing when nothing moved. The package
imports nothing up front, so a caller pays only for the steps it names.
"""
