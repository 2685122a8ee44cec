"""Configuration loading: profiles with fallback to ``default``, global sections, the
config path and profile from arguments or ``CHEETO_CONFIG``/``CHEETO_PROFILE``, one-line
``ConfigError``s that name the bad key, and secret masking for display."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cheeto_like.config import (
    MASK,
    SKELETON,
    Config,
    config_for_display,
    default_config_path,
    load_config,
    mask_uri,
)
from cheeto_like.errors import ConfigError, InvalidInput

FULL = """\
mongo:
  default:
    database: cheeto
    embedded: {path: ~/store, port: 27200}
  prod:
    uri: mongodb://cheeto:s3cret-uri@db1.example.org/?replicaSet=rs0
    database: prod
    password: s3cret-field
ldap:
  default:
    servers: [ldaps://ldap1.example.org]
    searchbase: dc=hpc,dc=example,dc=org
    password: ldap-s3cret
daemon:
  prod:
    broker_url: amqps://cheeto:broker-s3cret@broker.example.org:5671//
    sites: [farm]
api:
  default:
    api_key: api-s3cret-0123456789abcdefghijklmnop
hippo:
  base_url: https://hippo.example.org
  api_key: hippo-s3cret
  site_aliases: {caesfarm: farm}
"""
SECRETS = ("s3cret-uri", "s3cret-field", "ldap-s3cret", "broker-s3cret", "api-s3cret",
           "hippo-s3cret")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    """No ambient config: an empty XDG config home and no CHEETO_* variables."""
    monkeypatch.delenv("CHEETO_CONFIG", raising=False)
    monkeypatch.delenv("CHEETO_PROFILE", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def write(tmp_path: Path, text: str, name: str = "config.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def one_line_error(path: Path | str, profile: str | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(path, profile)
    message = str(info.value)
    assert "\n" not in message
    return message


# -- profiles ------------------------------------------------------------------------------


def test_default_profile(tmp_path):
    config = load_config(write(tmp_path, FULL))
    assert config.profile == "default"
    assert config.mongo.database == "cheeto" and config.mongo.is_embedded
    assert config.mongo.embedded.port == 27200
    assert config.mongo.embedded.path == tmp_path / "home" / "store"  # ~ expanded
    assert config.ldap.searchbase == "dc=hpc,dc=example,dc=org"
    assert config.daemon is None  # only a prod block, no default
    assert config.api.api_key.get_secret_value() == "api-s3cret-0123456789abcdefghijklmnop"
    assert config.hippo.site_aliases == {"caesfarm": "farm"}
    assert config.ucdiam is None


def test_named_profile_with_fallback_per_section(tmp_path):
    config = load_config(write(tmp_path, FULL), "prod")
    assert config.profile == "prod"
    assert (config.mongo.database, config.mongo.is_embedded) == ("prod", False)
    assert config.daemon.sites == ["farm"]
    assert config.ldap.servers == ["ldaps://ldap1.example.org"]  # fell back to default
    assert config.hippo.base_url == "https://hippo.example.org"  # global


def test_unknown_profile_is_an_error_naming_the_known_ones(tmp_path, monkeypatch):
    path = write(tmp_path, FULL)
    assert one_line_error(path, "staging") == (
        f"profile 'staging' is not defined in {path} (profiles: default, prod)")
    monkeypatch.setenv("CHEETO_PROFILE", "staging")
    assert "profile 'staging' is not defined" in one_line_error(path)


def test_a_profile_without_a_config_file_is_an_error():
    assert "profile 'prod' is not defined: there is no config file" in \
        one_line_error(None, "prod")


def test_empty_file_gives_defaults(tmp_path):
    config = load_config(write(tmp_path, ""))
    assert config.mongo.database == "cheeto" and config.mongo.is_embedded
    assert config.ldap is None and config.hippo is None


def test_skeleton_is_a_valid_config(tmp_path):
    config = load_config(write(tmp_path, SKELETON))
    assert config.mongo.embedded.port == 27117


# -- where the file comes from ---------------------------------------------------------------


def test_missing_default_file_gives_built_in_defaults():
    config = load_config()
    assert config.path is None
    assert config == Config(path=None, profile="default")


def test_default_file_in_xdg_config_home_is_read(tmp_path):
    path = default_config_path()
    assert path == tmp_path / "xdg" / "cheeto" / "config.yaml"
    path.parent.mkdir(parents=True)
    path.write_text("mongo: {default: {database: fromxdg}}\n")
    config = load_config()
    assert (config.path, config.mongo.database) == (path, "fromxdg")


def test_cheeto_config_env_names_the_file(tmp_path, monkeypatch):
    path = write(tmp_path, "mongo: {default: {database: fromenv}}\n", "env.yaml")
    monkeypatch.setenv("CHEETO_CONFIG", str(path))
    assert load_config().mongo.database == "fromenv"
    explicit = write(tmp_path, "mongo: {default: {database: explicit}}\n", "explicit.yaml")
    assert load_config(explicit).mongo.database == "explicit"


def test_cheeto_config_env_must_exist(tmp_path, monkeypatch):
    monkeypatch.setenv("CHEETO_CONFIG", str(tmp_path / "nope.yaml"))
    with pytest.raises(ConfigError, match="does not exist"):
        load_config()


def test_explicit_path_must_exist(tmp_path):
    assert "nope.yaml does not exist" in one_line_error(tmp_path / "nope.yaml")


def test_cheeto_profile_env_picks_the_profile(tmp_path, monkeypatch):
    path = write(tmp_path, FULL)
    monkeypatch.setenv("CHEETO_PROFILE", "prod")
    assert load_config(path).mongo.database == "prod"
    assert load_config(path, "default").mongo.database == "cheeto"


# -- errors ----------------------------------------------------------------------------------


def test_unknown_key_is_named(tmp_path):
    path = write(tmp_path, "mongo:\n  default:\n    databse: x\n")
    assert one_line_error(path) == f"config {path}: mongo.default.databse: unknown key"


def test_unknown_section_is_named(tmp_path):
    message = one_line_error(write(tmp_path, "mongoo: {}\n"))
    assert message.endswith("mongoo: unknown key")


def test_bad_value_names_the_key(tmp_path):
    message = one_line_error(write(tmp_path, "mongo: {prod: {embedded: {port: 99999}}}\n"))
    assert "mongo.prod.embedded.port:" in message


def test_missing_required_key_is_named(tmp_path):
    message = one_line_error(write(tmp_path, "hippo: {base_url: https://h.example.org}\n"))
    assert message.endswith("hippo.api_key: required but missing")


def test_several_problems_are_counted(tmp_path):
    message = one_line_error(write(tmp_path, "mongo: {default: {a: 1, b: 2, c: 3}}\n"))
    assert message.endswith("(and 2 more problems)")


def test_invalid_yaml_names_the_line(tmp_path):
    message = one_line_error(write(tmp_path, "mongo:\n  default: [unclosed\n"))
    assert "invalid YAML at line" in message


def test_top_level_must_be_a_mapping(tmp_path):
    assert "top level must be a mapping" in one_line_error(write(tmp_path, "- a\n- b\n"))


def test_unreadable_path_is_a_config_error(tmp_path):
    (tmp_path / "dir.yaml").mkdir()
    assert "cannot read" in one_line_error(tmp_path / "dir.yaml")


def test_config_error_is_bad_input():
    assert issubclass(ConfigError, InvalidInput) and ConfigError("x").exit_code == 2


# -- display ---------------------------------------------------------------------------------


def test_display_masks_every_secret(tmp_path):
    for profile in ("default", "prod"):
        shown = config_for_display(load_config(write(tmp_path, FULL), profile))
        text = json.dumps(shown)
        for secret in SECRETS:
            assert secret not in text


def test_display_keeps_the_rest_readable(tmp_path):
    shown = config_for_display(load_config(write(tmp_path, FULL), "prod"))
    assert shown["profile"] == "prod"
    assert shown["mongo"]["uri"] == (
        f"mongodb://cheeto:{MASK}@db1.example.org/?replicaSet=rs0")
    assert shown["mongo"]["password"] == MASK
    assert shown["mongo"]["user"] is None
    assert shown["daemon"]["broker_url"] == f"amqps://cheeto:{MASK}@broker.example.org:5671//"
    assert shown["ldap"]["password"] == MASK
    assert shown["hippo"]["api_key"] == MASK
    assert shown["hippo"]["site_aliases"] == {"caesfarm": "farm"}
    assert isinstance(shown["path"], str)
    json.dumps(shown)  # plain data


@pytest.mark.parametrize(("uri", "shown"), [
    ("mongodb://u:p@h/", f"mongodb://u:{MASK}@h/"),
    ("mongodb://h1,h2/?replicaSet=rs0", "mongodb://h1,h2/?replicaSet=rs0"),
    ("mongodb://user@h/", "mongodb://user@h/"),
    ("amqp://guest:guest@127.0.0.1:5672//", f"amqp://guest:{MASK}@127.0.0.1:5672//"),
    # an unencoded @ (or /) in the password: all of it is hidden, not just its head
    ("amqp://cheeto:p@ss@word@broker:5672//", f"amqp://cheeto:{MASK}@broker:5672//"),
    ("amqp://cheeto:a/b@c@broker//", f"amqp://cheeto:{MASK}@broker//"),
    ("mongodb://alice@corp:s3@cr@h/db", f"mongodb://alice@corp:{MASK}@h/db"),
    ("mongodb://user@h:27017/db", "mongodb://user@h:27017/db"),
    ("amqp://u:x@y@h1//;amqp://u:x@y@h2//", f"amqp://u:{MASK}@h1//;amqp://u:{MASK}@h2//"),
    ("AMQPS://u:p@q@h//", f"AMQPS://u:{MASK}@h//"),
])
def test_mask_uri(uri, shown):
    assert mask_uri(uri) == shown


def test_slurm_root_users_and_unmanaged_accounts(tmp_path):
    """What the Slurm sync leaves alone on a cluster (issue 11, items 3 and 7)."""
    assert load_config(write(tmp_path, "mongo: {}\n")).slurm.root_users == ["root"]
    config = load_config(write(tmp_path, "slurm:\n  root_users: [root, slurmadm]\n"
                                         "  unmanaged_accounts: [Ext]\n"))
    assert config.slurm.root_users == ["root", "slurmadm"]
    from cheeto_like.sync.slurm.actual import Policy
    policy = Policy.of(config.slurm.root_users, config.slurm.unmanaged_accounts)
    assert policy.unmanaged_accounts == frozenset({"ext"})  # slurmdbd lowercases names
