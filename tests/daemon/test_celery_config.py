"""The daemon's config, beat schedule, Celery settings and routing: pure, no services.

The same rules run against real workers in ``test_celery_workers.py``; here every case
of the schedule and the refusals is checked quickly.
"""

from __future__ import annotations

import ssl
from datetime import timedelta
from pathlib import Path
from urllib.parse import quote

import pytest
from celery.schedules import crontab

from cheeto_like.config import Config, load_config
from cheeto_like.daemon.app import make_app
from cheeto_like.daemon.beat import CheetoScheduler
from cheeto_like.daemon.config import (
    TASKS,
    TaskDisabled,
    lookup,
    task_block,
    task_sites,
)
from cheeto_like.daemon.schedule import build_beat_schedule, parse_schedule
from cheeto_like.daemon.settings import (
    broker_ssl,
    celery_settings,
    result_backend,
    route_task,
    soft_time_limit,
)
from cheeto_like.daemon.status import from_taskmeta
from cheeto_like.errors import ConfigError, InvalidInput
from cheeto_like.store import server_selection_seconds

BASE = """\
daemon:
  default:
    broker_url: {broker}
    sites: [farm, hive]
    tasks:
"""
AMQP = "amqp://guest:guest@127.0.0.1:5672//"


def config(tmp_path: Path, tasks: str = "", extra: str = "", broker: str = AMQP) -> Config:
    body = BASE.format(broker=broker) + "".join(f"      {line}\n" for line in
                                                tasks.strip("\n").splitlines())
    path = tmp_path / "config.yaml"
    path.write_text(body + extra)
    return load_config(path)


def config_error(tmp_path: Path, tasks: str = "", extra: str = "", broker: str = AMQP) -> str:
    with pytest.raises(ConfigError) as info:
        config(tmp_path, tasks, extra, broker)
    assert "\n" not in info.value.message
    return info.value.message


# -- the typed task blocks -------------------------------------------------------------------


def test_every_task_block_is_typed_with_its_defaults(tmp_path):
    c = config(tmp_path, """
slurm_sync: {schedule: 600}
ldap_sync: {schedule: "*/15 * * * *", sites: [hive]}
sympa: {output_dir: ~/lists}
puppet_sync: {repo: /srv/puppet, push: false}
""")
    tasks = c.daemon.tasks
    assert (tasks.slurm_sync.apply, tasks.slurm_sync.sudo, tasks.slurm_sync.max_deletions,
            tasks.slurm_sync.timeout_seconds) == (True, False, 50, 60.0)
    assert (tasks.ldap_sync.prune, tasks.ldap_sync.full, tasks.ldap_sync.concurrency) == \
        (True, False, 8)
    assert tasks.sympa.output_dir == Path.home() / "lists" and tasks.sympa.ignore is None
    assert tasks.puppet_sync.repo == Path("/srv/puppet") and tasks.puppet_sync.base_branch == \
        "main"
    assert c.daemon.result_expires == 86400 and c.daemon.task_time_limit == 3600


@pytest.mark.parametrize(("tasks", "expected"), [
    ("slurm_sync: {shedule: 600}", "tasks.slurm_sync.shedule: unknown key"),
    ("coffee: {schedule: 60}", "tasks.coffee: unknown key"),
    ("sympa: {schedule: 60}", "tasks.sympa.output_dir: required but missing"),
    ("puppet_sync: {}", "tasks.puppet_sync.repo: required but missing"),
    ("slurm_sync: {schedule: 0}", "an interval must be more than 0 seconds"),
    ("slurm_sync: {schedule: true}", "a schedule is a number of seconds or a 5-field crontab"),
    ("slurm_sync: {schedule: '*/5 * * *'}", "'*/5 * * *' is not a 5-field crontab (minute "
                                            "hour day-of-month month day-of-week)"),
    ("slurm_sync: {schedule: '600'}", "'600' is not a 5-field crontab"),
    ("slurm_sync: {max_deletions: -1}", "tasks.slurm_sync.max_deletions"),
])
def test_bad_task_blocks_are_one_line_errors_naming_the_key(tmp_path, tasks, expected):
    message = config_error(tmp_path, tasks)
    assert expected in message, message
    assert message.startswith(f"config {tmp_path / 'config.yaml'}: daemon.default.")


def test_broker_tls_needs_amqps_and_the_zone_must_exist(tmp_path):
    assert "broker_use_ssl is set but broker_url is not amqps://" in config_error(
        tmp_path, extra="    broker_use_ssl: {cert_reqs: none}\n")
    assert "unknown time zone 'Mars/Olympus'" in config_error(
        tmp_path, extra="    timezone: Mars/Olympus\n")
    message = config_error(tmp_path, broker="rabbit:s3cret@host")
    assert "daemon.default.broker_url: not a broker URL" in message and "s3cret" not in message


# -- refusals shared by enqueue, beat and the task bodies ------------------------------------


def test_absent_null_and_disabled_blocks_are_refused_with_the_reason(tmp_path):
    c = config(tmp_path, """
slurm_sync: {enabled: false}
ldap_sync:
sympa: {output_dir: /tmp}
""")
    with pytest.raises(TaskDisabled, match=r"^task slurm_sync is disabled: daemon.tasks."
                                           r"slurm_sync has enabled: false$"):
        task_block(c, TASKS["slurm_sync"])
    with pytest.raises(TaskDisabled, match=r"daemon.tasks.ldap_sync is empty \(null\); "
                                           r"write `ldap_sync: \{\}` for the defaults"):
        task_block(c, TASKS["ldap_sync"])
    with pytest.raises(TaskDisabled, match=r"the config \(profile 'default'\) has no "
                                           r"daemon.tasks.puppet_sync block"):
        task_block(c, TASKS["puppet_sync"])
    assert task_block(c, TASKS["sympa_export"]).output_dir == Path("/tmp")
    assert TaskDisabled("x").exit_code == 2


def test_ldap_sync_needs_the_ldap_section(tmp_path):
    c = config(tmp_path, "ldap_sync: {}")
    with pytest.raises(TaskDisabled, match="it needs the ldap section"):
        task_block(c, TASKS["ldap_sync"])


def test_no_daemon_section_at_all(tmp_path):
    with pytest.raises(ConfigError, match="no daemon section in the config for profile"):
        task_block(Config(), TASKS["slurm_sync"])


def test_unknown_task_names(tmp_path):
    assert lookup("cheeto.slurm_sync") is lookup("slurm_sync")
    with pytest.raises(InvalidInput, match="unknown task 'make_coffee' \\(known: slurm_sync, "
                                           "ldap_sync, sympa_export, puppet_sync, "
                                           "hippo_process, iam_sync, reap, alert_digest, "
                                           "usage_collect, request_escalate, "
                                           "cluster_monitor, audit, retention\\)"):
        lookup("make_coffee")


def test_sites_come_from_the_argument_then_the_task_then_the_daemon(tmp_path):
    c = config(tmp_path, """
slurm_sync: {sites: [farm]}
sympa: {output_dir: /tmp}
""")
    slurm, sympa = TASKS["slurm_sync"], TASKS["sympa_export"]
    assert task_sites(c, slurm, task_block(c, slurm)) == ["farm"]
    assert task_sites(c, sympa, task_block(c, sympa)) == ["farm", "hive"]
    assert task_sites(c, sympa, task_block(c, sympa), ["x", "y", "x"]) == ["x", "y"]
    lonely = config(tmp_path, "sympa: {output_dir: /tmp}").model_copy(
        update={"daemon": c.daemon.model_copy(update={"sites": []})})
    with pytest.raises(InvalidInput, match=r"sympa_export needs a site: pass --site, or set "
                                           r"daemon\.sites or daemon\.tasks\.sympa\.sites"):
        task_sites(lonely, sympa, task_block(lonely, sympa))


# -- the beat schedule -----------------------------------------------------------------------


def test_parse_schedule_numbers_and_crontabs():
    assert parse_schedule(600) == timedelta(seconds=600)
    assert parse_schedule(0.5) == timedelta(seconds=0.5)
    cron = parse_schedule("*/15 2-4 1 jan mon-fri")
    assert isinstance(cron, crontab)
    assert cron.minute == {0, 15, 30, 45} and cron.hour == {2, 3, 4}
    assert cron.day_of_week == {1, 2, 3, 4, 5} and cron.month_of_year == {1}


@pytest.mark.parametrize(("text", "field"), [
    ("61 * * * *", "minute"), ("* 24 * * *", "hour"), ("* * 0 * *", "day-of-month"),
    ("* * * 13 *", "month"), ("* * * * funday", "day-of-week"), ("*/0 * * * *", "minute"),
])
def test_a_bad_crontab_field_is_named(text, field):
    with pytest.raises(ValueError, match=f"bad {field} field"):
        parse_schedule(text)


def test_the_schedule_has_one_entry_per_site_with_queues_and_expiry(tmp_path):
    c = config(tmp_path, """
slurm_sync: {schedule: 600}
ldap_sync: {schedule: "0 * * * *", sites: [hive]}
sympa: {output_dir: /tmp, schedule: 86400}
puppet_sync: {repo: /srv/puppet}
""", extra="ldap:\n  default: {servers: [ldaps://ldap.example.org], searchbase: dc=x}\n")
    plan = build_beat_schedule(c)
    assert sorted(plan.entries) == ["ldap-sync-hive", "slurm-sync-farm", "slurm-sync-hive",
                                    "sympa-export-farm", "sympa-export-hive"]
    farm = plan.entries["slurm-sync-farm"]
    assert farm["task"] == "cheeto.slurm_sync" and farm["args"] == ("farm",)
    assert farm["schedule"] == timedelta(seconds=600)
    assert farm["options"] == {"queue": "slurm.farm", "expires": 600.0}  # interval: expires
    assert plan.entries["slurm-sync-hive"]["options"]["queue"] == "slurm.hive"
    ldap = plan.entries["ldap-sync-hive"]
    assert isinstance(ldap["schedule"], crontab) and ldap["options"] == {"queue": "cheeto"}
    assert plan.entries["sympa-export-farm"]["options"] == {"queue": "cheeto",
                                                           "expires": 86400.0}
    assert plan.notes[0] == "task puppet_sync has no schedule; it runs only when enqueued"
    assert [n.split()[1] for n in plan.notes[1:]] == ["hippo_process", "iam_sync", "reap",
                                                      "alert_digest", "usage_collect",
                                                      "request_escalate", "cluster_monitor",
                                                      "audit", "retention"]
    # (no blocks: disabled)


def test_disabled_tasks_get_no_entry_and_a_note(tmp_path):
    c = config(tmp_path, """
slurm_sync: {schedule: 600, enabled: false}
sympa:
""")
    plan = build_beat_schedule(c)
    assert plan.entries == {}
    assert plan.notes == [
        "task slurm_sync is disabled: daemon.tasks.slurm_sync has enabled: false; not scheduled",
        "task ldap_sync is disabled: the config (profile 'default') has no "
        "daemon.tasks.ldap_sync block; not scheduled",
        "task sympa_export is disabled: daemon.tasks.sympa is empty (null); write `sympa: {}` "
        "for the defaults; not scheduled",
        "task puppet_sync is disabled: the config (profile 'default') has no "
        "daemon.tasks.puppet_sync block; not scheduled",
        *(f"task {name} is disabled: the config (profile 'default') has no "
          f"daemon.tasks.{block} block; not scheduled"
          for name, block in (("hippo_process", "hippo"), ("iam_sync", "iam_sync"),
                              ("reap", "reap"), ("alert_digest", "alerts"),
                              ("usage_collect", "usage_collect"),
                              ("request_escalate", "requests"),
                              ("cluster_monitor", "cluster_monitor"), ("audit", "audit"),
                              ("retention", "retention")))]


def test_a_bad_crontab_or_a_scheduled_task_without_sites_is_refused(tmp_path):
    c = config(tmp_path, "slurm_sync: {schedule: '0 25 * * *'}")
    with pytest.raises(InvalidInput, match=r"^daemon.tasks.slurm_sync.schedule: '0 25 \* \* \*'"
                                           r": bad hour field '25'"):
        build_beat_schedule(c)
    c = config(tmp_path, "slurm_sync: {schedule: 60, sites: []}")
    c = c.model_copy(update={"daemon": c.daemon.model_copy(update={"sites": []})})
    with pytest.raises(InvalidInput, match=r"slurm_sync needs a site.*\(it has a schedule\)"):
        build_beat_schedule(c)


# -- Celery settings -------------------------------------------------------------------------


def test_celery_settings_json_only_one_at_a_time_late_acks_and_limits(tmp_path):
    c = config(tmp_path, extra="    task_time_limit: 1200\n    result_expires: 3600\n")
    s = celery_settings(c)
    assert (s["task_serializer"], s["result_serializer"], s["accept_content"],
            s["result_accept_content"]) == ("json", "json", ["json"], ["json"])
    assert (s["worker_concurrency"], s["worker_prefetch_multiplier"]) == (1, 1)
    assert s["task_acks_late"] and s["task_reject_on_worker_lost"]
    assert (s["task_time_limit"], s["task_soft_time_limit"]) == (1200, 1080)
    assert s["result_expires"] == 3600 and s["result_extended"]
    assert s["task_default_queue"] == "cheeto" and s["task_routes"] == (route_task,)
    assert s["worker_hijack_root_logger"] is False
    assert s["broker_connection_retry_on_startup"] and s["broker_connection_max_retries"] is None
    assert (s["timezone"], s["enable_utc"]) == ("America/Los_Angeles", True)
    assert s["worker_send_task_events"] and s["task_send_sent_event"]
    assert s["beat_scheduler"] == "cheeto_like.daemon.beat:CheetoScheduler"
    assert "broker_use_ssl" not in s
    assert [soft_time_limit(n) for n in (3600, 600, 60, 10)] == [3300, 540, 54, 9]


def test_results_go_to_the_application_database(tmp_path):
    store_dir = tmp_path / "store"
    embedded = load_config(_write(tmp_path, "mongo: {default: {database: prod, embedded: "
                                            f"{{path: {store_dir}}}}}}}\n"))
    url, settings = result_backend(embedded.mongo)
    # the default embedded store is a Unix socket in its data directory
    socket_uri = f"mongodb://{quote(str(store_dir / 'store.sock'), safe='')}/?directConnection=true"
    assert url == settings["mongo_host"] == socket_uri
    assert settings["database"] == "prod" and settings["taskmeta_collection"] == \
        "celery_taskmeta"
    # a worker storing a result waits out a replica-set election, as the daemons' own
    # clients do (issue 24); connecting is still bounded by the short timeout
    waits = int(server_selection_seconds(embedded.mongo, long_running=True) * 1000)
    assert waits == embedded.mongo.election_wait_seconds * 1000 > 5000
    assert settings["options"] == {"serverSelectionTimeoutMS": waits, "connectTimeoutMS": 5000}
    app = make_app(embedded.model_copy(update={"daemon": config(tmp_path).daemon}))
    assert app.backend.mongo_host == socket_uri
    # over TCP the credential travels as SCRAM-SHA-256 options, never in the URL
    tcp = load_config(_write(tmp_path, "mongo: {default: {embedded: {listen: tcp, port: 27999, "
                                       "token: t0ken}}}\n"))
    url, settings = result_backend(tcp.mongo)
    assert url == "mongodb://127.0.0.1:27999/?directConnection=true"
    assert settings["options"] == {
        "serverSelectionTimeoutMS": waits, "connectTimeoutMS": 5000, "username": "cheeto",
        "password": "t0ken", "authMechanism": "SCRAM-SHA-256", "authSource": "admin"}
    real = load_config(_write(tmp_path, """\
mongo:
  default:
    uri: mongodb://db1.example.org,db2.example.org/?replicaSet=rs0
    database: cheeto
    user: cheeto
    password: s3cret
    auth_source: admin
    tls: true
    tls_ca_file: /etc/ssl/mongo-ca.pem
"""))
    url, settings = result_backend(real.mongo)
    assert url == "mongodb://db1.example.org,db2.example.org/?replicaSet=rs0"
    assert settings["options"] == {
        "serverSelectionTimeoutMS": waits, "connectTimeoutMS": 5000, "username": "cheeto",
        "password": "s3cret", "authSource": "admin", "tls": True,
        "tlsCAFile": "/etc/ssl/mongo-ca.pem"}
    # Celery's own backend accepts it: hosts and the replica set come from the URI
    app = make_app(real.model_copy(update={"daemon": config(tmp_path).daemon}))
    backend = app.backend
    assert backend.mongo_host == ["db1.example.org:27017", "db2.example.org:27017"]
    assert backend.options["replicaSet"] == "rs0" and backend.options["tls"] is True
    assert backend.database_name == "cheeto" and backend.taskmeta_collection == \
        "celery_taskmeta"


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "mongo.yaml"
    path.write_text(text)
    return path


def test_amqps_broker_tls_options(tmp_path):
    c = config(tmp_path, broker="amqps://cheeto:pw@broker.example.org:5671//", extra="""\
    broker_use_ssl: {ca_file: /etc/ca.pem, cert_file: /etc/c.pem, key_file: /etc/k.pem}
""")
    assert celery_settings(c)["broker_use_ssl"] == {
        "cert_reqs": ssl.CERT_REQUIRED, "ca_certs": "/etc/ca.pem", "certfile": "/etc/c.pem",
        "keyfile": "/etc/k.pem"}
    assert broker_ssl(c.daemon.broker_use_ssl.model_copy(update={"cert_reqs": "none"})) == {
        "cert_reqs": ssl.CERT_NONE, "ca_certs": "/etc/ca.pem", "certfile": "/etc/c.pem",
        "keyfile": "/etc/k.pem"}


# -- routing ---------------------------------------------------------------------------------


def test_the_router_sends_slurm_sync_to_its_sites_queue_only(tmp_path):
    assert route_task("cheeto.slurm_sync", ("farm",), {}, {}) == {"queue": "slurm.farm"}
    assert route_task("cheeto.slurm_sync", (), {"site": "hive"}, {}) == {"queue": "slurm.hive"}
    for name in ("cheeto.ldap_sync", "cheeto.sympa_export", "cheeto.puppet_sync"):
        assert route_task(name, ("farm",), {}, {}) == {"queue": "cheeto"}
    assert route_task("celery.backend_cleanup", (), {}, {}) is None
    with pytest.raises(ValueError, match="needs its site as the first argument"):
        route_task("cheeto.slurm_sync", (), {}, {})
    app = make_app(config(tmp_path))
    route = app.amqp.router.route({}, "cheeto.slurm_sync", ("farm",), {})
    assert route["queue"].name == "slurm.farm" and route["queue"].routing_key == "slurm.farm"
    assert app.amqp.router.route({}, "cheeto.puppet_sync", ("farm",), {})["queue"].name == \
        "cheeto"
    assert app.amqp.router.route({}, "celery.backend_cleanup", (), {})["queue"].name == \
        "cheeto"
    assert sorted(n for n in app.tasks if n.startswith("cheeto.")) == [
        "cheeto.alert_digest", "cheeto.audit", "cheeto.audit_slurm_state",
        "cheeto.cluster_monitor", "cheeto.hippo_process",
        "cheeto.iam_sync", "cheeto.ldap_sync", "cheeto.puppet_sync", "cheeto.reap",
        "cheeto.request_escalate", "cheeto.retention", "cheeto.slurm_sync",
        "cheeto.sympa_export", "cheeto.usage_collect"]
    for name in ("cheeto.hippo_process", "cheeto.iam_sync", "cheeto.reap",
                 "cheeto.request_escalate"):
        assert route_task(name, (), {}, {}) == {"queue": "cheeto"}
    assert app.conf.beat_scheduler == f"{CheetoScheduler.__module__}:CheetoScheduler"


# -- status rows from taskmeta documents -----------------------------------------------------


def test_taskmeta_documents_become_status_rows():
    ok = from_taskmeta({"name": "cheeto.slurm_sync", "args": ["farm"], "status": "SUCCESS",
                        "result": '{"status": "ok", "duration_s": 1.5}', "worker": "w@h"})
    assert ok is not None and ok[:2] == ("slurm_sync", "farm")
    assert (ok[2].state, ok[2].duration_s, ok[2].by) == ("ok", 1.5, "w@h")
    skipped = from_taskmeta({"name": "cheeto.sympa_export", "args": ["farm"],
                             "status": "SUCCESS",
                             "result": '{"status": "skipped", "reason": "another"}'})
    assert (skipped[2].state, skipped[2].error) == ("skipped", "another")
    failed = from_taskmeta({"name": "cheeto.slurm_sync", "args": ["farm"], "status": "FAILURE",
                            "result": '{"exc_type": "GuardTripped", "exc_message": ["too many"],'
                                      ' "exc_module": "cheeto_like.errors"}'})
    assert (failed[2].state, failed[2].error) == ("failed", "GuardTripped: too many")
    assert from_taskmeta({"name": "celery.backend_cleanup", "args": []}) is None


def test_people_tasks_are_singletons_on_the_hub(tmp_path):
    c = config(tmp_path, """
hippo: {schedule: 300}
iam_sync: {schedule: "0 2 * * *"}
reap: {schedule: "30 2 * * *"}
""", extra="hippo: {base_url: https://hippo.example.org, api_key: k}\n"
           "ucdiam: {base_url: https://iam.example.org, api_key: k}\n")
    plan = build_beat_schedule(c)
    assert {"hippo-process", "iam-sync", "reap-offboarded"} <= set(plan.entries)
    hippo = plan.entries["hippo-process"]
    assert hippo["task"] == "cheeto.hippo_process" and hippo["args"] == ()
    assert hippo["options"] == {"queue": "cheeto", "expires": 300.0}
    assert isinstance(plan.entries["iam-sync"]["schedule"], crontab)
