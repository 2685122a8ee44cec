"""`cheeto nocloud render` over a small template tree:

    tmp/sites/config.yaml               shared settings
    tmp/sites/partitions/base.j2        a shared template
    tmp/sites/farm/config.yaml          the site's settings
    tmp/sites/farm/layout.j2            a site template found through the site dir
    tmp/sites/farm/hosts/<host>.j2      one per host
"""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from cheeto_like import nocloud
from cheeto_like.errors import InvalidInput

BASE = """\
#cloud-config
hostname: {{ hostname }}
fqdn: {{ hostname }}.{{ domain }}
{% if packages %}
packages:
  {% for p in packages %}
  - {{ p }}
  {% endfor %}
{% endif %}
users:
  - name: root
    ssh_authorized_keys:
{% for key in ssh_authorized_keys %}
      - {{ key }}
{% endfor %}
"""
KEYS = """\
# root keys for farm

ssh-ed25519 AAAAC3Nza root@admin1
   # an indented comment
ssh-rsa AAAAB3Nza root@admin2
"""


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    sites = tmp_path / "sites"
    (sites / "partitions").mkdir(parents=True)
    (sites / "farm" / "hosts").mkdir(parents=True)
    (sites / "config.yaml").write_text("packages: [vim]\ndomain: example.org\nntp: pool\n")
    (sites / "farm" / "config.yaml").write_text(
        "packages: [htop]\ndomain: farm.example.org\nrole: compute\n")
    (sites / "partitions" / "base.j2").write_text(BASE)
    (sites / "farm" / "layout.j2").write_text("role: {{ role }}\nntp: {{ ntp }}\n")
    (sites / "farm" / "hosts" / "node1.j2").write_text('{% include "base.j2" %}\n')
    (sites / "farm" / "hosts" / "head.j2").write_text(
        '{% include "base.j2" %}\n{% include "layout.j2" %}\n')
    (tmp_path / "root.pub").write_text(KEYS)
    return sites / "farm"


def render(tree: Path, out: Path, **kwargs):  # type: ignore[no-untyped-def]
    return nocloud.render(tree, authorized_keys=tree.parent.parent / "root.pub",
                          output_dir=out, **kwargs)


def test_every_host_gets_a_seed_directory(tree: Path, tmp_path: Path):
    out = tmp_path / "nocloud-net"
    hosts = render(tree, out)
    assert [h.hostname for h in hosts] == ["head", "node1"]
    assert sorted(p.name for p in out.iterdir()) == ["head", "node1"]
    for host in ("head", "node1"):
        seed = out / host
        assert sorted(p.name for p in seed.iterdir()) == ["meta-data", "user-data",
                                                         "vendor-data"]
        for name in ("meta-data", "vendor-data"):
            assert (seed / name).read_text() == ""
            assert stat.S_IMODE((seed / name).stat().st_mode) == 0o644


def test_user_data_has_hostname_keys_and_the_merged_config(tree: Path, tmp_path: Path):
    render(tree, tmp_path / "out")
    text = (tmp_path / "out" / "head" / "user-data").read_text()
    assert text.startswith("#cloud-config\n")
    data = YAML(typ="safe").load(text)
    assert data["hostname"] == "head"
    assert data["fqdn"] == "head.farm.example.org"  # the site's scalar wins
    assert data["packages"] == ["vim", "htop"]  # lists add up, parent first
    assert data["users"][0]["ssh_authorized_keys"] == [
        "ssh-ed25519 AAAAC3Nza root@admin1", "ssh-rsa AAAAB3Nza root@admin2"]
    assert (data["role"], data["ntp"]) == ("compute", "pool")
    # trim_blocks/lstrip_blocks: block tags leave no blank or indented lines behind
    assert "\n\n" not in text and "  \n" not in text


def test_the_output_directory_is_created_and_reruns_replace(tree: Path, tmp_path: Path):
    out = tmp_path / "deep" / "er" / "seeds"
    render(tree, out)
    (tree / "config.yaml").write_text("domain: other.org\nrole: login\n")
    render(tree, out)
    assert "fqdn: node1.other.org" in (out / "node1" / "user-data").read_text()


def test_config_basename(tree: Path, tmp_path: Path):
    (tree / "alt.yaml").write_text("domain: alt.org\nrole: x\nntp: y\npackages: []\n")
    render(tree, tmp_path / "out", config_basename="alt.yaml")
    assert "fqdn: node1.alt.org" in (tmp_path / "out" / "node1" / "user-data").read_text()


def test_an_undefined_variable_names_template_line_and_variable(tree: Path, tmp_path: Path):
    (tree / "hosts" / "node2.j2").write_text('{% include "base.j2" %}\ngpu: {{ gpus }}\n')
    out = tmp_path / "out"
    with pytest.raises(InvalidInput) as err:
        render(tree, out)
    assert err.value.message == "template farm/hosts/node2.j2 line 2: 'gpus' is undefined"
    assert not out.exists()  # nothing is written when any host fails


def test_an_undefined_variable_in_an_included_template(tree: Path, tmp_path: Path):
    (tree.parent / "partitions" / "base.j2").write_text("x: {{ hostname }}\ny: {{ typo }}\n")
    with pytest.raises(InvalidInput) as err:
        render(tree, tmp_path / "out")
    assert err.value.message == ("template partitions/base.j2 line 2 (rendering "
                                 "farm/hosts/head.j2): 'typo' is undefined")


def test_template_syntax_errors_and_missing_includes(tree: Path, tmp_path: Path):
    (tree / "hosts" / "node1.j2").write_text("a: 1\n{% if x %}\nb: 2\n")
    with pytest.raises(InvalidInput, match=r"^template farm/hosts/node1\.j2 line 3: "
                                           r"Unexpected end of template"):
        render(tree, tmp_path / "out")
    (tree / "hosts" / "node1.j2").write_text('{% include "nope.j2" %}\n')
    with pytest.raises(InvalidInput, match=r"^template farm/hosts/node1\.j2: nope\.j2 not "
                                           r"found \(searched "):
        render(tree, tmp_path / "out")


def test_clear_errors_for_missing_inputs(tree: Path, tmp_path: Path):
    with pytest.raises(InvalidInput, match=r"site directory .*/nowhere does not exist"):
        render(tmp_path / "nowhere", tmp_path / "out")
    with pytest.raises(InvalidInput, match=r"authorized keys file .*/missing\.pub does not exist"):
        nocloud.render(tree, authorized_keys=tmp_path / "missing.pub",
                       output_dir=tmp_path / "out")
    empty = tree.parent / "empty"
    empty.mkdir()
    with pytest.raises(InvalidInput, match=r"no host templates in .*/empty/hosts"):
        render(empty, tmp_path / "out")


def test_config_problems(tree: Path, tmp_path: Path):
    (tree / "config.yaml").write_text("hostname: fixed\n")
    with pytest.raises(InvalidInput, match="config key 'hostname' is reserved"):
        render(tree, tmp_path / "out")
    (tree / "config.yaml").write_text("role: [a\n")
    with pytest.raises(InvalidInput, match=r"farm/config\.yaml:2: malformed YAML"):
        render(tree, tmp_path / "out")
    (tree / "config.yaml").write_text("- a list\n")
    with pytest.raises(InvalidInput, match="the top level must be a mapping"):
        render(tree, tmp_path / "out")
    (tree / "config.yaml").unlink()  # a missing layer is simply empty
    (tree / "hosts" / "head.j2").unlink()
    (tree / "hosts" / "node1.j2").write_text("ntp: {{ ntp }}\n")
    render(tree, tmp_path / "out")
    assert (tmp_path / "out" / "node1" / "user-data").read_text() == "ntp: pool\n"


def test_read_authorized_keys_drops_comments_and_blanks(tmp_path: Path):
    path = tmp_path / "k"
    path.write_text(KEYS)
    assert nocloud.read_authorized_keys(path) == ["ssh-ed25519 AAAAC3Nza root@admin1",
                                                  "ssh-rsa AAAAB3Nza root@admin2"]


# -- through the CLI ------------------------------------------------------------------------


async def test_cli_render(cli, tree, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = await cli("nocloud", "render", "--site-dir", str(tree), "-k",
                  str(tmp_path / "root.pub"))
    assert r.code == 0, r.stderr
    assert r.stdout == ""
    assert "rendered 2 hosts into nocloud-net/: head, node1" in r.stderr
    assert (tmp_path / "nocloud-net" / "node1" / "user-data").exists()


async def test_cli_errors_are_one_line_with_exit_2(cli, tree, tmp_path):
    r = await cli("nocloud", "render", "--site-dir", str(tmp_path / "nope"), "-k",
                  str(tmp_path / "root.pub"))
    assert r.code == 2
    assert r.error_lines == [f"error: site directory {tmp_path / 'nope'} does not exist"]
    r = await cli("nocloud", "render", "--site-dir", str(tree), "-k",
                  str(tmp_path / "none.pub"), "-o", str(tmp_path / "out"))
    assert r.code == 2 and len(r.error_lines) == 1 and "none.pub does not exist" in r.stderr
    (tree / "hosts" / "node1.j2").write_text("x: {{ oops }}\n")
    r = await cli("nocloud", "render", "--site-dir", str(tree), "-k",
                  str(tmp_path / "root.pub"), "-o", str(tmp_path / "out"))
    assert r.code == 2
    assert r.error_lines == ["error: template farm/hosts/node1.j2 line 1: 'oops' is undefined"]
    r = await cli("nocloud", "render")
    assert r.code == 2 and "--site-dir" in r.stderr
