"""LDIF written the way an admin would type it, for seeding the session's slapd with a
site laid out as the LDAP reconciler expects (users under a people OU; ``ou=groups`` and
``ou=automount`` under ``ou=<site>``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tree:
    suffix: str
    people_ou: str  # e.g. "ou=people7"
    site: str

    @property
    def people(self) -> str:
        return f"{self.people_ou},{self.suffix}"

    @property
    def site_dn(self) -> str:
        return f"ou={self.site},{self.suffix}"

    @property
    def groups(self) -> str:
        return f"ou=groups,{self.site_dn}"

    @property
    def automount(self) -> str:
        return f"ou=automount,{self.site_dn}"

    def containers(self) -> str:
        return "".join(ou(dn) for dn in (self.people, self.site_dn, self.groups,
                                         self.automount))

    def user(self, name: str, uid: int, cn: str, sn: str, keys: list[str],
             extra: str = "") -> str:
        lines = [f"dn: uid={name},{self.people}", "objectClass: top",
                 "objectClass: inetOrgPerson", "objectClass: posixAccount",
                 "objectClass: ldapPublicKey", "objectClass: shadowAccount", f"uid: {name}",
                 f"cn: {cn}", f"displayName: {cn}", f"sn: {sn}", f"mail: {name}@example.edu",
                 f"uidNumber: {uid}", f"gidNumber: {uid}", f"homeDirectory: /home/{name}",
                 "loginShell: /usr/bin/bash"]
        lines += [f'sshPublicKey: environment="REMOTE_SSH_USER={name}" {k}' for k in keys]
        return "\n".join(lines) + "\n" + extra + "\n"

    def group(self, name: str, gid: int, members: list[str]) -> str:
        lines = [f"dn: cn={name},{self.groups}", "objectClass: top",
                 "objectClass: groupOfMembers", "objectClass: posixGroup", f"cn: {name}",
                 f"gidNumber: {gid}"]
        lines += [f"memberUid: {m}" for m in members]
        lines += [f"member: uid={m},{self.people}" for m in members]
        return "\n".join(lines) + "\n\n"

    def amap(self, name: str) -> str:
        return (f"dn: automountMapName={name},{self.automount}\nobjectClass: top\n"
                f"objectClass: automountMap\nautomountMapName: {name}\n\n")

    def map_dn(self, name: str) -> str:
        return f"automountMapName={name},{self.automount}"

    def key(self, map_name: str, name: str, info: str) -> str:
        return (f"dn: automountKey={name},{self.map_dn(map_name)}\n"
                f"objectClass: top\nobjectClass: automount\nautomountKey: {name}\n"
                f"automountInformation: {info}\n\n")


def ou(dn: str) -> str:
    return (f"dn: {dn}\nobjectClass: top\nobjectClass: organizationalUnit\n"
            f"ou: {dn.split(',')[0][3:]}\n\n")


def ldap_block(slapd, people: str) -> dict:  # type: ignore[no-untyped-def]
    return {"servers": [slapd.uri], "searchbase": slapd.suffix, "user_base": people,
            "login_dn": slapd.root_dn, "password": slapd.root_password, "use_tls": True,
            "ca_file": str(slapd.ca_file)}
