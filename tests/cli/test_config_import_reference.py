"""``cheeto config import-reference``: the reference's own test config (profiles, the
host + port Mongo form, GSSAPI and debug LDAP keys, a task option we lack, an API key
too short for us) becomes a config this project loads, and every key left out is
reported on stderr and in the file."""

from __future__ import annotations

import stat

from ruamel.yaml import YAML

from cheeto_like.config import load_config

REFERENCE = """
ldap:
  default:
    servers: [ldap.example.edu]
    searchbase: dc=hpc,dc=example,dc=edu
    user_base: ou=users,dc=hpc,dc=example,dc=edu
    login_dn: cn=admin,dc=hpc,dc=example,dc=edu
    password: s3cret-ldap
    request_timeout_seconds: 10.0
    pool_max_connections: 5
    pool_idle_connections: 2
    use_tls: true
    auth_mechanism: GSSAPI
    gssapi_keytab: /etc/krb5.keytab
    gssapi_realm: EXAMPLE.EDU
    ca_file: /etc/ssl/ca.pem
    cert_policy: demand
    debug: false
    debug_level: -1
  test-server:
    servers: ["ldaps://test-ldap:636"]
    searchbase: dc=test
    auth_mechanism: SIMPLE
mongo:
  default:
    uri: 127.0.0.1
    port: 28080
    user: cheeto
    password: s3cret-mongo
    tls: false
    database: hpccf
    old_database: hpccf_v1
hippo:
  api_key: hippo-key
  base_url: https://hippo-test.example.edu
  site_aliases: {caesfarm: farm}
  max_tries: 3
ucdiam:
  api_key: iam-key
  base_url: https://iet-ws.example.edu/api
  grace_days: 0
  expiry_offset_days: 30
daemon:
  default:
    broker_url: amqp://cheeto@localhost:5672//
    sites: [test-site]
    author: cheeto-daemon
    tasks:
      slurm_sync: {schedule: 600, apply: true, sudo: false, concurrency: 8, max_deletions: 50}
      puppet_sync: {repo: /srv/puppet, schedule: 3600, write_keys: true, delete_branch: true}
api:
  default:
    port: 8810
    api_key: test-api-key
"""


def reference_file(tmp_path):
    path = tmp_path / "reference.yaml"
    path.write_text(REFERENCE)
    return path


async def test_translates_to_a_loadable_config_and_reports_what_it_left_out(cli, tmp_path):
    out = tmp_path / "ours.yaml"
    result = await cli("config", "import-reference", str(reference_file(tmp_path)), "-o",
                       str(out))
    assert result.code == 0, result.stderr
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    data = YAML(typ="safe").load(out.read_text())
    assert data["mongo"]["default"]["uri"] == "mongodb://127.0.0.1:28080/"
    assert data["mongo"]["default"]["database"] == "hpccf"
    assert data["mongo"]["default"]["user"] == "cheeto"
    assert data["ldap"]["default"]["servers"] == ["ldap://ldap.example.edu"]
    assert data["ldap"]["test-server"]["servers"] == ["ldaps://test-ldap:636"]
    assert data["hippo"]["site_aliases"] == {"caesfarm": "farm"}
    assert data["daemon"]["default"]["tasks"]["slurm_sync"]["schedule"] == 600
    # the API key is refused (too short here: 32+ characters), the rest of the block kept
    assert data["api"] == {"default": {"port": 8810}}
    assert data["daemon"]["default"]["author"] == "cheeto-daemon"
    for left_out in ("ldap.default.gssapi_keytab", "ldap.default.gssapi_realm",
                     "ldap.default.debug", "ldap.default.debug_level",
                     "ldap.default.auth_mechanism: GSSAPI is not supported",
                     "mongo.default.old_database",
                     "daemon.default.tasks.slurm_sync.concurrency",
                     "daemon.default.tasks.puppet_sync.write_keys",
                     "daemon.default.tasks.puppet_sync.delete_branch",
                     "api.default.api_key"):
        assert left_out in result.stderr, left_out
        assert f"# left out: {left_out}" in out.read_text(), left_out
    config = load_config(out, "test-server")
    assert config.mongo.database == "hpccf" and config.mongo.password.get_secret_value() == \
        "s3cret-mongo"
    assert config.ldap.servers == ["ldaps://test-ldap:636"]
    assert config.hippo.max_tries == 3


async def test_stdout_by_default_and_bad_files_are_one_line(cli, tmp_path):
    result = await cli("config", "import-reference", str(reference_file(tmp_path)))
    assert result.code == 0
    assert YAML(typ="safe").load(result.stdout)["ucdiam"]["grace_days"] == 0
    missing = await cli("config", "import-reference", str(tmp_path / "nope.yaml"))
    assert missing.code == 2 and len(missing.error_lines) == 1
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    listed = await cli("config", "import-reference", str(tmp_path / "list.yaml"))
    assert listed.code == 2 and "mapping" in listed.stderr
    (tmp_path / "bad.yaml").write_text("a: [\n")
    broken = await cli("config", "import-reference", str(tmp_path / "bad.yaml"))
    assert broken.code == 2 and "not YAML" in broken.stderr
    out = tmp_path / "exists.yaml"
    out.write_text("x: 1\n")
    refused = await cli("config", "import-reference", str(reference_file(tmp_path)), "-o",
                        str(out))
    assert refused.code == 2 and out.read_text() == "x: 1\n"


def test_mongo_host_form_and_a_full_uri_with_port():
    from cheeto_like.migrate.reference_config import translate

    out = translate({"mongo": {"default": {"host": "db1.example.edu", "port": 27017,
                                           "database": "cheeto"},
                               "prod": {"uri": "mongodb://db2:27018/", "port": 27017,
                                        "database": "cheeto"}},
                     "sympa": {"x": 1}})
    assert out.data["mongo"]["default"]["uri"] == "mongodb://db1.example.edu:27017/"
    assert out.data["mongo"]["prod"]["uri"] == "mongodb://db2:27018/"
    assert "mongo.prod.port: the URI names its own port" in out.dropped
    assert "sympa: not a section here" in out.dropped
