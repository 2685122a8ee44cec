"""`cheeto config …` and `cheeto db …`."""

from __future__ import annotations

from cheeto_like.config import load_config


async def test_config_show_masks_secrets(cli, tmp_path, cli_config):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(cli_config.read_text() + (
        "ldap:\n  default:\n    servers: [ldap://x]\n    searchbase: dc=x\n"
        "    password: hunter2\n"
        "daemon:\n  default:\n    broker_url: amqp://cheeto:brokerpw@mq:5672//\n"))
    r = await cli("config", "show", "--json", config=cfg)
    assert r.code == 0, r.stderr
    assert "hunter2" not in r.stdout and "brokerpw" not in r.stdout
    data = r.json()
    assert data["ldap"]["password"] == "********"
    assert data["daemon"]["broker_url"] == "amqp://cheeto:********@mq:5672//"


async def test_config_show_masks_a_password_containing_at(cli, tmp_path):
    cfg = tmp_path / "at.yaml"
    cfg.write_text("daemon:\n  default:\n    broker_url: amqp://cheeto:pa@ss-w0rd@mq:5672//\n")
    for fmt in ("--json", "--yaml"):
        r = await cli("config", "show", fmt, config=cfg)
        assert r.code == 0, r.stderr
        assert "ss-w0rd" not in r.stdout and "pa@" not in r.stdout
    assert r.yaml()["daemon"]["broker_url"] == "amqp://cheeto:********@mq:5672//"


async def test_bad_config_is_one_line_exit_2(cli, tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("mongo:\n  default:\n    port_number: 5\n")
    r = await cli("ng", "site", "list", config=cfg)
    assert r.code == 2
    assert r.error_lines == [f"error: config {cfg}: mongo.default.port_number: unknown key"]
    cfg.write_text("mongo: [unclosed\n")
    r = await cli("config", "show", config=cfg)
    assert r.code == 2 and "invalid YAML" in r.stderr and len(r.error_lines) == 1
    r = await cli("config", "show", config=tmp_path / "missing.yaml")
    assert r.code == 2 and "does not exist" in r.stderr


async def test_config_write(cli, tmp_path):
    target = tmp_path / "new" / "config.yaml"
    r = await cli("config", "write", str(target))
    assert r.code == 0, r.stderr
    assert load_config(target).mongo.is_embedded
    r = await cli("config", "write", str(target))
    assert r.code == 2 and "--force" in r.stderr
    assert (await cli("config", "write", str(target), "--force")).code == 0


async def test_db_status(cli, store):
    r = await cli("db", "status", "--json")
    assert r.code == 0, r.stderr
    data = r.json()
    assert data["answers"] is True
    assert data["store"] == ("embedded" if store.is_embedded else "mongodb")


async def test_db_status_when_down(cli, tmp_path):
    cfg = tmp_path / "down.yaml"
    cfg.write_text(f"mongo:\n  default:\n    embedded:\n      path: {tmp_path}/store\n"
                   "      port: 1\n")
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "cheeto.db").write_bytes(b"")  # a store was made here once
    r = await cli("db", "status", "--json", config=cfg)
    assert r.code == 1
    assert r.json()["answers"] is False


async def test_db_status_on_a_fresh_home_says_the_store_starts_on_first_use(cli, tmp_path):
    cfg = tmp_path / "fresh.yaml"
    cfg.write_text(f"mongo:\n  default:\n    embedded:\n      path: {tmp_path}/store\n")
    r = await cli("db", "status", "--json", config=cfg)
    assert r.code == 0, r.stderr
    data = r.json()
    assert data["answers"] is False and data["state"] == "not created yet"
    assert "started on first use" in data["note"] and "error" not in data
    assert not (tmp_path / "store").exists()  # asking created nothing
    r = await cli("db", "status", config=cfg)
    assert r.code == 0 and "started on first use" in " ".join(r.stderr.split())


def test_db_serve_runs_the_embedded_store_in_the_foreground(tmp_path):
    """`cheeto db serve` (a real subprocess) listens until it is told to stop."""
    import signal
    import socket
    import subprocess
    import sys
    import time
    from pathlib import Path

    from cheeto_like.embedded import port_answers

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cfg = tmp_path / "serve.yaml"
    cfg.write_text("mongo:\n  default: {}\n")
    cheeto = Path(sys.executable).with_name("cheeto")
    proc = subprocess.Popen([str(cheeto), "db", "serve", "--path", str(tmp_path / "data"),
                             "--port", str(port), "--config", str(cfg)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while not port_answers("127.0.0.1", port) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        assert port_answers("127.0.0.1", port)
        assert (tmp_path / "data").is_dir()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)  # generous: the full suite loads both cores
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    assert proc.returncode == 0
    assert not port_answers("127.0.0.1", port)
