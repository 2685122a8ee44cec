"""The store's connect options (store.py): writes ``w: majority``, daemons wait out an
election when selecting a server while the CLI answers sooner, and a URI that reads
from secondaries is refused with one line (ConfigError, exit 2) before anything is
sent."""

from __future__ import annotations

import pytest

from cheeto_like.config import MongoConfig
from cheeto_like.errors import ConfigError
from cheeto_like.store import client_for, connect

SECONDARY = "mongodb://127.0.0.1:9/?directConnection=true&readPreference=secondaryPreferred"


async def test_a_uri_reading_from_secondaries_is_refused_in_one_line():
    for uri, mode in ((SECONDARY, "secondaryPreferred"),
                      ("mongodb://127.0.0.1:9/?readPreference=nearest&replicaSet=rs0",
                       "nearest")):
        with pytest.raises(ConfigError) as refused:
            await connect(MongoConfig(uri=uri, timeout_seconds=0.3), autostart=False)
        assert refused.value.message == (
            f"mongo.uri: readPreference={mode} is not supported (transactions and "
            "operations read from the primary); remove it from the URI")


async def test_the_cli_refuses_it_with_exit_2(cli, tmp_path):
    config = tmp_path / "secondary.yaml"
    config.write_text(f"mongo:\n  default:\n    uri: \"{SECONDARY}\"\n"
                      "    timeout_seconds: 0.3\n")
    r = await cli("ng", "site", "list", config=config)
    assert r.code == 2
    assert r.error_lines == ["error: mongo.uri: readPreference=secondaryPreferred is not "
                             "supported (transactions and operations read from the "
                             "primary); remove it from the URI"]


async def test_connect_options_carry_majority_and_the_server_selection_timeouts():
    config = MongoConfig(uri="mongodb://127.0.0.1:9/?directConnection=true")
    daemon = client_for(config, config.uri or "", long_running=True)
    person = client_for(config, config.uri or "")
    try:
        assert daemon.write_concern.document == {"w": "majority"}
        assert person.write_concern.document == {"w": "majority"}
        assert daemon.options.server_selection_timeout == 30  # past an election (10-12 s)
        assert person.options.server_selection_timeout == 5  # timeout_seconds
        assert daemon.options.pool_options.connect_timeout == 5
    finally:
        await daemon.close()
        await person.close()
    longer = MongoConfig(uri=config.uri, timeout_seconds=45, election_wait_seconds=20)
    client = client_for(longer, longer.uri or "", long_running=True)
    try:  # a daemon never waits less than the CLI
        assert client.options.server_selection_timeout == 45
    finally:
        await client.close()


async def test_the_embedded_store_accepts_majority_writes(store):
    """The embedded store has no replicas: it takes ``w: majority`` without effect."""
    assert store.client.write_concern.document == {"w": "majority"}
    probe = store.database["write_concern_probe"]
    await probe.insert_one({"_id": "a"})
    assert (await probe.find_one({"_id": "a"})) == {"_id": "a"}
    await probe.drop()
