from cheeto_like.models import Site


async def test_store_roundtrip(db):
    await Site(name="farm", fqdn="farm.example.org").insert()
    assert (await Site.find_one(Site.name == "farm")).fqdn == "farm.example.org"


async def test_cli_site(cli, db):
    r = await cli("ng", "site", "new", "-s", "farm", "--fqdn", "farm.example.org")
    assert r.code == 0, r.stderr
    r = await cli("ng", "site", "list", "--json")
    assert r.code == 0, r.stderr
    assert [s["name"] for s in r.json()] == ["farm"]
    assert await Site.find_one(Site.name == "farm") is not None
