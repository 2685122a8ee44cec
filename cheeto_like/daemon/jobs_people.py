"""The bodies of the people-facing daemon tasks, as plain async functions:

- ``hippo_process`` -> ``hippo_process_job``: handle HiPPO's pending events (post back by
  default);
- ``iam_sync`` -> ``iam_sync_job``: sync every user/admin account with IAM;
- ``reap`` -> ``reap_job``: end programmes whose end has passed (members offboarding),
  deactivate offboarding users whose expiry has passed, apply the offboarding policy;
- ``alert_digest`` -> ``alert_digest_job``: mail the operators' digest.

Each takes ``(store, config, author, options)``, where ``options`` is the task's config
block (``daemon.tasks.<block>``, schema below; None means its defaults), returns a
JSON-able summary and raises ``JobFailed`` (a ``CheetoError``) when the run did not do
its job, so Celery records FAILURE with a one-line reason. ``*_body`` adapt them to the
daemon's ``(store, config, block, site, author)`` task-body signature; these tasks are
singletons (not per site: the daemon passes its placeholder site, which is ignored).
"""

from __future__ import annotations

from typing import Any

from ..config import AlertDigestTask, Config, HippoTask, IAMSyncTask, ReapTask
from ..errors import CheetoError, ConfigError
from ..store import Store


class JobFailed(CheetoError):
    """The run finished but did not do its job (see its SyncRun / History)."""


# -- the jobs ---------------------------------------------------------------------------------


def _notifier(store: Store, author: str, config: Config, wanted: bool) -> Any:
    from ..operations.notify import notifier_from_config

    if not wanted or config.mail is None:
        return None
    return notifier_from_config(store, author, config)


async def hippo_process_job(store: Store, config: Config, author: str,
                            options: HippoTask | None = None) -> dict[str, Any]:
    from ..operations.hippo import process_events

    options = options or HippoTask()
    if config.hippo is None:
        raise ConfigError("hippo_process needs the hippo section")
    report = await process_events(store, author, config.hippo, post_back=options.post_back,
                                  notifier=_notifier(store, author, config, options.notify))
    summary = {"run_id": report.run_id, "fetched": report.fetched, "tally": report.tally()}
    if report.failed:
        first = report.failed[0]
        raise JobFailed(f"hippo_process: {len(report.failed)} event(s) failed (SyncRun "
                        f"{report.run_id}; first: {first.hippo_id} {first.action}: "
                        f"{first.error})")
    return summary


async def iam_sync_job(store: Store, config: Config, author: str,
                       options: IAMSyncTask | None = None) -> dict[str, Any]:
    from ..adapters.iam import IAMClient
    from ..operations.iam import IAMSettings, sync_all_users_iam

    options = options or IAMSyncTask()
    if config.ucdiam is None:
        raise ConfigError("iam_sync needs the ucdiam section")
    async with IAMClient(config.ucdiam) as client:
        report = await sync_all_users_iam(
            store, author, client, settings=IAMSettings.from_config(config.ucdiam),
            types=list(options.types) if options.types else None,
            max_users=options.max_users, concurrency=options.concurrency,
            include_inactive=options.include_inactive,
            notifier=_notifier(store, author, config, options.notify))
    tally = {k: v for k, v in report.tally.items() if v}
    if report.tally["error"] or (report.tally["transient_error"] and not report.results):
        first = next(iter(sorted(report.errors.items())), ("?", "?"))
        raise JobFailed(f"iam_sync: {report.tally['error']} error(s), "
                        f"{report.tally['transient_error']} transient (SyncRun "
                        f"{report.run_id}; first: {first[0]}: {first[1]})")
    return {"run_id": report.run_id, "tally": tally}


async def reap_job(store: Store, config: Config, author: str,
                   options: ReapTask | None = None) -> dict[str, Any]:
    from ..operations.iam import reap_offboarded_users

    options = options or ReapTask()
    report = await reap_offboarded_users(
        store, author, notifier=_notifier(store, author, config, options.notify),
        offboarding=config.offboarding)
    summary: dict[str, Any] = {"reaped": report.users, "notified": report.notified,
                               "notify_errors": report.notify_errors}
    for key in ("programs_ended", "without_expiry"):  # named only when there are some
        if getattr(report, key):
            summary[key] = getattr(report, key)
    return summary


async def alert_digest_job(store: Store, config: Config, author: str,
                           options: AlertDigestTask | None = None) -> dict[str, Any]:
    from ..operations.notify import send_alert_digest

    result = await send_alert_digest(store, author, config)
    if result.error:
        raise JobFailed(f"alert_digest: {result.error}")
    return {"sent": result.sent, **result.digest.counts()}


# -- adapters to the daemon's task-body signature ------------------------------------------


async def hippo_process_body(store: Store, config: Config, block: Any, site: str,
                             author: str) -> dict[str, Any]:
    return await hippo_process_job(store, config, author, block)


async def iam_sync_body(store: Store, config: Config, block: Any, site: str,
                        author: str) -> dict[str, Any]:
    return await iam_sync_job(store, config, author, block)


async def reap_body(store: Store, config: Config, block: Any, site: str,
                    author: str) -> dict[str, Any]:
    return await reap_job(store, config, author, block)


async def alert_digest_body(store: Store, config: Config, block: Any, site: str,
                            author: str) -> dict[str, Any]:
    return await alert_digest_job(store, config, author, block)
