"""``cheeto ipython`` with commands piped on stdin (not a terminal, so the standard
library console runs even though IPython is installed; test_ipython_pty.py drives the
IPython branch on a real pty): the store is open, the models are imported, top-level
``await`` works, errors are shown and the session goes on."""

from __future__ import annotations

from tests.factories import make_site


async def test_piped_session_reads_the_store_with_top_level_await(db, cli):
    await make_site(db, "farm")
    script = "\n".join([
        "site = await Site.find_one({'name': 'farm'})",
        "print('fqdn', site.fqdn)",
        "print('groups', await Group.find({'type': 'access'}).count() > 0)",
        "1 / 0",
        "print('db', store.database.name == config.mongo.database)",
        "for n in range(2):",
        "    print('loop', n)",
        "",
        "print('models', all(m.__name__ in globals() for m in models.ALL_MODELS))",
    ]) + "\n"
    result = await cli("ipython", stdin=script)
    assert result.code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "fqdn farm.example.org" in lines
    assert "groups True" in lines and "db True" in lines
    assert lines.count("loop 0") == 1 and "loop 1" in lines
    assert "ZeroDivisionError" in result.stderr  # shown, and the session went on
    assert "models True" in lines


async def test_writes_through_operations_work_from_the_shell(db, cli):
    script = ("from cheeto_like.operations.site import CreateSite\n"
              "await CreateSite.run(store, author, name='hive', fqdn='hive.example.org')\n"
              "print((await Site.find_one({'name': 'hive'})).fqdn)\n")
    result = await cli("ipython", "--plain", stdin=script)
    assert result.code == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "hive.example.org"
