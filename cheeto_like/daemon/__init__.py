"""The daemon: Celery workers and beat that run the syncs (``app``, ``tasks``,
``schedule``, ``status``; the task table in ``config``), plus the REST API, Flower and
the one-machine stack. Nothing here is imported by the rest of the CLI at start-up, so
``cheeto ng …`` never pays for Celery."""
