"""`fgentic-dev fence`: one readable, drift-checked page of the store's fence after migration.

Each function, view and trigger of the store is written once, in its own file under
``src/fgentic_governance/memory/sql/`` (``functions/``, ``views/``, ``triggers/``); the numbered
version steps beside them hold tables, roles, settings and data changes. This module migrates a
throw-away database to head with the product's own :func:`fgentic_governance.memory.migrate`,
reads the catalogs and renders what is in force, each object with the file it comes from:
roles, database privileges and pinned settings, the schema, tables, views, types, sequences,
functions and every privilege on them, sorted by name.

Nothing environment-specific is rendered: the migrating role (the schema's owner) is written
``<owner>``, the database is never named, and no OID, port, path or timestamp appears.
"""

from __future__ import annotations

import asyncio
import difflib
import shutil
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from fgentic_governance.memory.schema import SCHEMA, object_files, schema_version
from fgentic_governance.schema_version import SCHEMA_VERSION

DEFAULT_OUTPUT: Final = Path("docs/store-fence.md")
OWNER: Final = "<owner>"
PUBLIC: Final = "PUBLIC"
# The roles the migrations create (sql/0005, sql/0010). Login roles a DBA (or a test) makes
# members of them are deployment state, not fence: never rendered.
ROLE_PATTERN: Final = r"fgentic\_memory\_%"
_DATABASE: Final = "fgentic_fence"
_VOLATILITY: Final = {"i": "IMMUTABLE", "s": "STABLE", "v": "VOLATILE"}
_PARALLEL: Final = {"s": "SAFE", "r": "RESTRICTED", "u": "UNSAFE"}
_RELKIND: Final = {"r": "table", "p": "partitioned table", "v": "view", "m": "materialized view",
                   "S": "sequence", "f": "foreign table"}


# -- catalog queries -----------------------------------------------------------------------------

# One row per (object, grantee, privilege), for the actual ACL and for the default one
# (acldefault): a NULL ACL means "the default", and the difference says what was revoked.
_ACL_SQL: Final = """
WITH objects AS (
    SELECT 'schema'::text AS kind, n.nspname::text AS name, NULL::text AS col,
           coalesce(n.nspacl, acldefault('n', n.nspowner)) AS acl,
           acldefault('n', n.nspowner) AS def
    FROM pg_namespace n WHERE n.nspname = $1
  UNION ALL
    SELECT CASE c.relkind WHEN 'S' THEN 'sequence' WHEN 'v' THEN 'view' ELSE 'table' END,
           c.relname, NULL,
           coalesce(c.relacl, acldefault(CASE c.relkind WHEN 'S' THEN 's' ELSE 'r' END::"char",
                                         c.relowner)),
           acldefault(CASE c.relkind WHEN 'S' THEN 's' ELSE 'r' END::"char", c.relowner)
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')
  UNION ALL
    SELECT 'column', c.relname, a.attname, a.attacl, NULL
    FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
    JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = $1 AND a.attnum > 0 AND NOT a.attisdropped AND a.attacl IS NOT NULL
  UNION ALL
    SELECT 'function', p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')',
           NULL, coalesce(p.proacl, acldefault('f', p.proowner)), acldefault('f', p.proowner)
    FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1
  UNION ALL
    SELECT 'type', t.typname, NULL, coalesce(t.typacl, acldefault('T', t.typowner)),
           acldefault('T', t.typowner)
    FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
    LEFT JOIN pg_class c ON c.oid = t.typrelid
    WHERE n.nspname = $1 AND (t.typtype IN ('d', 'e', 'r', 'm') OR c.relkind = 'c')
  UNION ALL
    SELECT 'database', '', NULL, coalesce(d.datacl, acldefault('d', d.datdba)),
           acldefault('d', d.datdba)
    FROM pg_database d WHERE d.datname = current_database()
)
SELECT o.kind, o.name, o.col, 'actual' AS source,
       CASE WHEN x.grantee = 0 THEN 'PUBLIC' ELSE pg_get_userbyid(x.grantee) END AS grantee,
       pg_get_userbyid(x.grantor) AS grantor, x.privilege_type, x.is_grantable
FROM objects o, LATERAL aclexplode(o.acl) x
UNION ALL
SELECT o.kind, o.name, o.col, 'default',
       CASE WHEN x.grantee = 0 THEN 'PUBLIC' ELSE pg_get_userbyid(x.grantee) END,
       pg_get_userbyid(x.grantor), x.privilege_type, x.is_grantable
FROM objects o, LATERAL aclexplode(o.def) x
WHERE o.def IS NOT NULL
"""

_ROLES_SQL: Final = """
SELECT rolname, rolcanlogin, rolinherit, rolsuper, rolcreatedb, rolcreaterole, rolreplication,
       rolbypassrls, rolconnlimit, rolvaliduntil IS NOT NULL AS expires
FROM pg_roles WHERE rolname LIKE $1 ORDER BY rolname
"""

_MEMBERS_SQL: Final = """
SELECT member.rolname AS member, grp.rolname AS role, m.admin_option, m.inherit_option,
       m.set_option, pg_get_userbyid(m.grantor) AS grantor
FROM pg_auth_members m
JOIN pg_roles member ON member.oid = m.member JOIN pg_roles grp ON grp.oid = m.roleid
WHERE member.rolname LIKE $1 AND grp.rolname LIKE $1
ORDER BY member.rolname, grp.rolname
"""

_SETTINGS_SQL: Final = """
SELECT coalesce(r.rolname, '') AS role, s.setting
FROM pg_db_role_setting d
CROSS JOIN LATERAL unnest(d.setconfig) AS s(setting)
LEFT JOIN pg_roles r ON r.oid = d.setrole
WHERE d.setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND (d.setrole = 0 OR r.rolname LIKE $1)
ORDER BY 1, 2
"""

_EXTENSIONS_SQL: Final = """
SELECT e.extname, n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
ORDER BY e.extname
"""

_RELATIONS_SQL: Final = """
SELECT c.oid, c.relname, c.relkind::text AS relkind, pg_get_userbyid(c.relowner) AS owner,
       c.reloptions, c.relrowsecurity, c.relforcerowsecurity
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f', 'c')
  AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass
                  AND d.objid = c.oid AND d.deptype = 'e')
ORDER BY c.relname
"""

_COLUMNS_SQL: Final = """
SELECT a.attname, format_type(a.atttypid, a.atttypmod) AS type, a.attnotnull,
       pg_get_expr(ad.adbin, ad.adrelid) AS default, a.attidentity::text AS attidentity,
       a.attgenerated::text AS attgenerated
FROM pg_attribute a LEFT JOIN pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""

_CONSTRAINTS_SQL: Final = """
SELECT conname, pg_get_constraintdef(oid, true) AS def FROM pg_constraint
WHERE conrelid = $1 AND contype <> 'n' ORDER BY conname
"""

_INDEXES_SQL: Final = """
SELECT pg_get_indexdef(i.indexrelid) AS def FROM pg_index i
JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = $1 ORDER BY c.relname
"""

_TRIGGERS_SQL: Final = """
SELECT tgname, pg_get_triggerdef(oid, true) AS def FROM pg_trigger
WHERE tgrelid = $1 AND NOT tgisinternal ORDER BY tgname
"""

_POLICIES_SQL: Final = """
SELECT polname, pg_get_expr(polqual, polrelid) AS qual,
       pg_get_expr(polwithcheck, polrelid) AS check FROM pg_policy
WHERE polrelid = $1 ORDER BY polname
"""

_FUNCTIONS_SQL: Final = """
SELECT p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')' AS signature,
       p.proname, pg_get_function_result(p.oid) AS result, l.lanname, p.prosecdef,
       p.provolatile::text AS provolatile, p.proparallel::text AS proparallel,
       p.proleakproof, p.proisstrict, p.proconfig,
       pg_get_userbyid(p.proowner) AS owner,
       CASE WHEN p.prokind IN ('f', 'p', 'w') THEN pg_get_functiondef(p.oid) END AS def
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
JOIN pg_language l ON l.oid = p.prolang
WHERE n.nspname = $1
  AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass
                  AND d.objid = p.oid AND d.deptype = 'e')
ORDER BY 1
"""

_DEFAULT_ACL_SQL: Final = """
SELECT pg_get_userbyid(d.defaclrole) AS role, d.defaclobjtype::text AS defaclobjtype,
       x.privilege_type,
       CASE WHEN x.grantee = 0 THEN 'PUBLIC' ELSE pg_get_userbyid(x.grantee) END AS grantee
FROM pg_default_acl d LEFT JOIN pg_namespace n ON n.oid = d.defaclnamespace,
     LATERAL aclexplode(d.defaclacl) x
WHERE n.nspname = $1 OR d.defaclnamespace = 0
ORDER BY 1, 2, 4, 3
"""


# -- privileges ----------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True, order=True)
class _Grant:
    kind: str
    name: str
    column: str
    grantee: str
    privilege: str
    grantable: bool
    grantor: str


class _Acl:
    """Actual and default privileges of every object, with the owner normalised."""

    def __init__(self, rows: Iterable[Any], owner: str) -> None:
        self.actual: list[_Grant] = []
        self.default: list[_Grant] = []
        for row in rows:
            grant = _Grant(row["kind"], row["name"], row["col"] or "", _role(row["grantee"], owner),
                           row["privilege_type"], bool(row["is_grantable"]),
                           _role(row["grantor"], owner))
            (self.actual if row["source"] == "actual" else self.default).append(grant)
        self.actual.sort()
        self.default.sort()

    def granted(self, kind: str, name: str) -> list[str]:
        """``grantee: PRIV, PRIV`` for ``kind``/``name``, the owner left out unless it lost a
        default privilege; column privileges are folded in as ``PRIV (col, col)``."""
        by_grantee: dict[str, list[str]] = {}
        for grant in self._of(self.actual, kind, name):
            if grant.grantee == OWNER:
                continue
            by_grantee.setdefault(grant.grantee, []).append(_privilege(grant))
        if kind in {"table", "view"}:
            columns: dict[tuple[str, str, str], list[str]] = {}
            for grant in self.actual:
                if grant.kind == "column" and grant.name == name and grant.grantee != OWNER:
                    suffix = " WITH GRANT OPTION" if grant.grantable else ""
                    columns.setdefault((grant.grantee, grant.privilege, suffix), []).append(
                        grant.column)
            for (grantee, privilege, suffix), cols in sorted(columns.items()):
                by_grantee.setdefault(grantee, []).append(
                    f"{privilege} ({', '.join(sorted(cols))}){suffix}")
        owner_actual = {g.privilege for g in self._of(self.actual, kind, name)
                        if g.grantee == OWNER}
        owner_default = {g.privilege for g in self._of(self.default, kind, name)
                         if g.grantee == OWNER}
        lines = [f"`{grantee}`: {', '.join(privileges)}"
                 for grantee, privileges in sorted(by_grantee.items(), key=_grantee_order)]
        if owner_default - owner_actual:
            lines.append(f"`{OWNER}` lost: {', '.join(sorted(owner_default - owner_actual))}")
        return lines

    def revoked_from_public(self, kind: str, name: str) -> list[str]:
        """Privileges PUBLIC has by default on ``kind``/``name`` but not here."""
        default = {g.privilege for g in self._of(self.default, kind, name) if g.grantee == PUBLIC}
        actual = {g.privilege for g in self._of(self.actual, kind, name) if g.grantee == PUBLIC}
        return sorted(default - actual)

    def by_grantee(self) -> dict[str, list[str]]:
        """What every grantee but the owner holds, object by object."""
        held: dict[str, dict[tuple[str, str], list[str]]] = {}
        for grant in self.actual:
            if grant.grantee == OWNER:
                continue
            key = (grant.kind if grant.kind != "column" else "table", grant.name)
            text = _privilege(grant)
            if grant.kind == "column":
                text = f"{grant.privilege} ({grant.column})"
            held.setdefault(grant.grantee, {}).setdefault(key, []).append(text)
        out: dict[str, list[str]] = {}
        for grantee, objects in sorted(held.items(), key=_grantee_order):
            lines = []
            for (kind, name), privileges in sorted(objects.items(), key=_object_order):
                lines.append(f"{kind} {_object_name(kind, name)}: {_fold_columns(privileges)}")
            out[grantee] = lines
        return out

    @staticmethod
    def _of(grants: list[_Grant], kind: str, name: str) -> list[_Grant]:
        return [g for g in grants if g.kind == kind and g.name == name]


def _role(name: str, owner: str) -> str:
    return OWNER if name == owner else name


def _privilege(grant: _Grant) -> str:
    return grant.privilege + (" WITH GRANT OPTION" if grant.grantable else "")


def _grantee_order(item: tuple[str, Any]) -> tuple[int, str]:
    return (0 if item[0] == PUBLIC else 1, item[0])


_KIND_ORDER: Final = ("database", "schema", "table", "view", "sequence", "type", "function")


def _object_order(item: tuple[tuple[str, str], Any]) -> tuple[int, str]:
    kind, name = item[0]
    return (_KIND_ORDER.index(kind) if kind in _KIND_ORDER else len(_KIND_ORDER), name)


def _object_name(kind: str, name: str) -> str:
    if kind == "database":
        return "(this database)"
    if kind == "schema":
        return f"`{name}`"
    return f"`{SCHEMA}.{name}`"


def _fold_columns(privileges: list[str]) -> str:
    """``SELECT (a)``, ``SELECT (b)`` -> ``SELECT (a, b)``; whole-object privileges first."""
    whole = sorted(p for p in privileges if "(" not in p)
    columns: dict[str, list[str]] = {}
    for text in privileges:
        if "(" in text:
            privilege, _, column = text.partition(" (")
            columns.setdefault(privilege, []).append(column.rstrip(")"))
    parts = whole + [f"{privilege} ({', '.join(sorted(cols))})"
                     for privilege, cols in sorted(columns.items())]
    return ", ".join(parts)


# -- rendering -----------------------------------------------------------------------------------

def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


def _bullets(items: Sequence[str], none: str = "none") -> list[str]:
    return [f"- {item}" for item in items] if items else [f"- {none}"]


def _sql(text: str) -> list[str]:
    return ["```sql", text.strip("\n"), "```"]


def _yes(flag: object) -> str:
    return "yes" if flag else "no"


async def render(conn: Any) -> str:
    """The fence page of the database ``conn`` is connected to, which must be migrated to head
    (by the role that will be written ``<owner>``)."""
    owner = str(await conn.fetchval("SELECT current_user"))
    version = await schema_version(conn)
    if version != SCHEMA_VERSION:
        raise RuntimeError(f"database is at schema version {version}, not {SCHEMA_VERSION}")
    acl = _Acl(await conn.fetch(_ACL_SQL, SCHEMA), owner)
    out: list[str] = [
        "# The store's fence after migration",
        "",
        f"> Generated by `fgentic-dev fence` from the migrations (schema version "
        f"**{SCHEMA_VERSION}**); do not edit by hand. After changing a migration run "
        "`fgentic-dev fence` and commit the result: `fgentic-dev fence --check` and "
        "tests/integration/test_store_fence.py fail when this page differs.",
        "",
        "What is in force in a database after every "
        "migration of `src/fgentic_governance/memory/sql/` has run, read back from PostgreSQL's "
        "catalogs, all in one place. Each function, view and trigger is written in one file, "
        "named below with the object; the numbered version steps hold tables, roles, settings "
        "and data changes (docs/memory.md §4 explains the layout and the fence's design).",
        "",
        f"`{OWNER}` is the role that ran the migrations (the operator's): it owns the schema and "
        "every object in it and holds every privilege on them, which is not repeated below. "
        f"`{PUBLIC}` is every role. \"Revoked from `{PUBLIC}`\" compares with PostgreSQL's "
        f"defaults (`acldefault`): by default `{PUBLIC}` may connect to a database and create "
        "temporary tables in it, execute functions and use types, and has nothing on schemas, "
        "tables, views and sequences. Objects are sorted by name (columns keep their order); "
        "the database is not named.",
        "",
    ]
    out += await _roles(conn, acl)
    out += await _database(conn, acl)
    out += await _schema(conn, acl)
    relations = await conn.fetch(_RELATIONS_SQL, SCHEMA)
    out += await _tables(conn, acl, [r for r in relations if r["relkind"] in "rpmf"], owner)
    out += await _views(conn, acl, [r for r in relations if r["relkind"] == "v"], owner)
    out += _sequences(acl, [r for r in relations if r["relkind"] == "S"], owner)
    out += await _types(conn, acl, [r for r in relations if r["relkind"] == "c"], owner)
    out += await _functions(conn, acl, owner)
    return "\n".join(out).rstrip("\n") + "\n"


async def _roles(conn: Any, acl: _Acl) -> list[str]:
    roles = await conn.fetch(_ROLES_SQL, ROLE_PATTERN)
    out = ["## 1. Roles", "",
           "The group roles the migrations create (cluster-wide; login roles are made members "
           "of them by the deployment and are not part of the fence).", ""]
    out += _table(["role", "login", "inherit", "superuser", "createdb", "createrole",
                   "replication", "bypassrls", "connection limit", "password expiry"],
                  [(f"`{r['rolname']}`", _yes(r["rolcanlogin"]), _yes(r["rolinherit"]),
                    _yes(r["rolsuper"]), _yes(r["rolcreatedb"]), _yes(r["rolcreaterole"]),
                    _yes(r["rolreplication"]), _yes(r["rolbypassrls"]),
                    "none" if r["rolconnlimit"] < 0 else r["rolconnlimit"],
                    _yes(r["expires"])) for r in roles])
    owner = str(await conn.fetchval("SELECT current_user"))
    members = await conn.fetch(_MEMBERS_SQL, ROLE_PATTERN)
    out += ["", "Memberships:", ""]
    out += _bullets([
        f"`{m['member']}` is a member of `{m['role']}` (inherit {_yes(m['inherit_option'])}, "
        f"set {_yes(m['set_option'])}, admin {_yes(m['admin_option'])}; granted by "
        f"`{_role(m['grantor'], owner)}`)" for m in members])
    out += ["", "### Who holds what", "",
            "Every privilege granted to a role other than the owner, by grantee (role "
            "membership adds the privileges of the role one is a member of).", ""]
    for grantee, lines in acl.by_grantee().items():
        out += [f"`{grantee}`:", ""]
        out += _bullets(lines)
        out.append("")
    return out


async def _database(conn: Any, acl: _Acl) -> list[str]:
    out = ["## 2. Database", "", "Extensions (schema):", ""]
    out += _bullets([f"`{e['extname']}` (`{e['nspname']}`)"
                     for e in await conn.fetch(_EXTENSIONS_SQL)])
    out += ["", "Privileges on the database:", ""]
    out += _bullets(acl.granted("database", ""))
    revoked = acl.revoked_from_public("database", "")
    out += ["", f"Revoked from `{PUBLIC}` (granted by default): "
                f"{', '.join(revoked) if revoked else 'nothing'}.", ""]
    settings = await conn.fetch(_SETTINGS_SQL, ROLE_PATTERN)
    out += ["Settings pinned for every session of the database (`ALTER DATABASE ... SET`; a "
            "role without the privilege to set them gets a NOTICE, and StoreReady reports "
            "STORE_SETTINGS_UNSAFE):", ""]
    out += _bullets([f"`{s['setting']}`" + (f" (role `{s['role']}`)" if s["role"] else "")
                     for s in settings])
    out.append("")
    return out


async def _schema(conn: Any, acl: _Acl) -> list[str]:
    out = [f"## 3. Schema `{SCHEMA}`", "", "Privileges:", ""]
    out += _bullets(acl.granted("schema", SCHEMA))
    revoked = acl.revoked_from_public("schema", SCHEMA)
    out += ["", f"Revoked from `{PUBLIC}` (granted by default): "
                f"{', '.join(revoked) if revoked else 'nothing'}.", "",
            "Default privileges (`ALTER DEFAULT PRIVILEGES`):", ""]
    defaults = await conn.fetch(_DEFAULT_ACL_SQL, SCHEMA)
    out += _bullets([f"objects of type `{d['defaclobjtype']}` created by `{d['role']}`: "
                     f"{d['privilege_type']} to `{d['grantee']}`" for d in defaults])
    out.append("")
    return out


def _owner_literal(definition: str, owner: str) -> str:
    """A trigger's WHEN may name the owner (sql/0020 writes it in at migration time)."""
    quoted = "'" + owner.replace("'", "''") + "'::name"
    return definition.replace(quoted, f"'{OWNER}'::name")


def _owner_note(row: Any, owner: str) -> list[str]:
    return [] if row["owner"] == owner else [f"Owner: `{row['owner']}`.", ""]


async def _tables(conn: Any, acl: _Acl, tables: list[Any], owner: str) -> list[str]:
    out = ["## 4. Tables", ""]
    if not tables:
        out += ["None.", ""]
    for t in tables:
        name = t["relname"]
        out += [f"### `{SCHEMA}.{name}`", ""]
        if t["relkind"] != "r":
            out += [f"A {_RELKIND.get(t['relkind'], t['relkind'])}.", ""]
        out += _owner_note(t, owner)
        columns = await conn.fetch(_COLUMNS_SQL, t["oid"])
        out += _table(["column", "type", "not null", "default"],
                      [(f"`{c['attname']}`", c["type"], _yes(c["attnotnull"]),
                        _column_default(c)) for c in columns])
        out += ["", "Constraints:", ""]
        out += _bullets([f"`{c['conname']}`: `{c['def']}`"
                         for c in await conn.fetch(_CONSTRAINTS_SQL, t["oid"])])
        out += ["", "Indexes:", ""]
        out += _bullets([f"`{i['def']}`" for i in await conn.fetch(_INDEXES_SQL, t["oid"])])
        out += ["", "Triggers:", ""]
        out += _bullets([f"`{_owner_literal(g['def'], owner)}` ({_file('triggers', g['tgname'])})"
                         for g in await conn.fetch(_TRIGGERS_SQL, t["oid"])])
        policies = await conn.fetch(_POLICIES_SQL, t["oid"])
        if t["relrowsecurity"] or policies:
            out += ["", f"Row-level security: enabled, forced {_yes(t['relforcerowsecurity'])}.",
                    ""]
            out += _bullets([f"`{p['polname']}`: USING `{p['qual']}` WITH CHECK `{p['check']}`"
                             for p in policies])
        if t["reloptions"]:
            out += ["", f"Options: `{', '.join(sorted(t['reloptions']))}`."]
        out += ["", "Privileges:", ""]
        out += _bullets(acl.granted("table", name))
        out.append("")
    return out


def _column_default(column: Any) -> str:
    if column["attidentity"]:
        return "identity " + ("ALWAYS" if column["attidentity"] == "a" else "BY DEFAULT")
    if column["attgenerated"]:
        return f"generated `{column['default']}`"
    return f"`{column['default']}`" if column["default"] is not None else ""


async def _views(conn: Any, acl: _Acl, views: list[Any], owner: str) -> list[str]:
    out = ["## 5. Views", ""]
    if not views:
        out += ["None.", ""]
    for v in views:
        name = v["relname"]
        out += [f"### `{SCHEMA}.{name}`", ""]
        out += _owner_note(v, owner)
        out += _source("views", name)
        options = sorted(v["reloptions"] or [])
        out += [f"Options: {', '.join(f'`{o}`' for o in options) if options else 'none'}.", "",
                "Privileges:", ""]
        out += _bullets(acl.granted("view", name))
        out.append("")
        definition = await conn.fetchval("SELECT pg_get_viewdef($1::oid, true)", v["oid"])
        out += _sql(f"CREATE VIEW {SCHEMA}.{name} AS\n{definition}")
        out.append("")
    return out


def _sequences(acl: _Acl, sequences: list[Any], owner: str) -> list[str]:
    out = ["## 6. Sequences", ""]
    if not sequences:
        out += ["None.", ""]
    for s in sequences:
        out += [f"### `{SCHEMA}.{s['relname']}`", ""]
        out += _owner_note(s, owner)
        out += ["Privileges:", ""]
        out += _bullets(acl.granted("sequence", s["relname"]))
        out.append("")
    return out


async def _types(conn: Any, acl: _Acl, types: list[Any], owner: str) -> list[str]:
    out = ["## 7. Types", ""]
    if not types:
        out += ["None.", ""]
    for t in types:
        name = t["relname"]
        columns = await conn.fetch(_COLUMNS_SQL, t["oid"])
        fields = ", ".join(f"{c['attname']} {c['type']}" for c in columns)
        out += [f"### `{SCHEMA}.{name}`", ""]
        out += _owner_note(t, owner)
        out += [f"Composite: `({fields})`.", "", "Privileges:", ""]
        out += _bullets(acl.granted("type", name))
        revoked = acl.revoked_from_public("type", name)
        out += ["", f"Revoked from `{PUBLIC}` (granted by default): "
                    f"{', '.join(revoked) if revoked else 'nothing'}.", ""]
    return out


async def _functions(conn: Any, acl: _Acl, owner: str) -> list[str]:
    functions = await conn.fetch(_FUNCTIONS_SQL, SCHEMA)
    out = ["## 8. Functions", "",
           f"EXECUTE lists every grantee but the owner; `{PUBLIC}` may execute a function unless "
           "that was revoked.", ""]
    rows = []
    for f in functions:
        signature = f["signature"]
        grants = acl.granted("function", signature)
        execute = ", ".join(g.split(":")[0] for g in grants) or "owner only"
        rows.append((f"[`{signature}`](#{_anchor(signature)})", f["result"],
                     "DEFINER" if f["prosecdef"] else "INVOKER",
                     _VOLATILITY[f["provolatile"]], execute))
    out += _table(["function", "returns", "security", "volatility", "EXECUTE"], rows)
    out.append("")
    for f in functions:
        signature = f["signature"]
        out += [f"### {signature}", ""]
        out += _source("functions", f["proname"])
        facts = [f"SECURITY {'DEFINER' if f['prosecdef'] else 'INVOKER'}",
                 _VOLATILITY[f["provolatile"]], f"PARALLEL {_PARALLEL[f['proparallel']]}",
                 f"LANGUAGE {f['lanname']}"]
        if f["proisstrict"]:
            facts.append("STRICT")
        if f["proleakproof"]:
            facts.append("LEAKPROOF")
        owner_name = OWNER if f["owner"] == owner else f["owner"]
        out += [f"{', '.join(facts)}; owner `{owner_name}`"
                + (f"; `SET {'`, `SET '.join(sorted(f['proconfig']))}`" if f["proconfig"] else "")
                + ".", "", "EXECUTE:", ""]
        out += _bullets(acl.granted("function", signature), none="owner only")
        revoked = acl.revoked_from_public("function", signature)
        out += ["", f"Revoked from `{PUBLIC}` (granted by default): "
                    f"{', '.join(revoked) if revoked else 'nothing'}.", ""]
        if f["def"]:
            out += _sql(f["def"])
            out.append("")
    return out


def _file(kind: str, name: str) -> str:
    """Where object ``kind/name`` is written, or that no file is (it would be a finding)."""
    if f"{kind}/{name}" not in {item.name for item in object_files()}:
        return "no source file"
    return f"`sql/{kind}/{name}.sql`"


def _source(kind: str, name: str) -> list[str]:
    return [f"Source: {_file(kind, name)}.", ""]


def _anchor(heading: str) -> str:
    """GitHub's heading anchor: lowercase, punctuation but ``-`` and ``_`` dropped, spaces to
    ``-``."""
    kept = "".join(ch for ch in heading.lower() if ch.isalnum() or ch in " -_")
    return kept.replace(" ", "-")


# -- generation and the drift check --------------------------------------------------------------

async def _generate_on(server: Any) -> str:
    import asyncpg

    from fgentic_governance.memory import migrate

    dsn = await server.create_database(_DATABASE, extensions=("vector",))
    conn = await asyncpg.connect(dsn)
    try:
        await migrate(conn)
        return await render(conn)
    finally:
        await conn.close()


def generate() -> str:
    """Start a throw-away PostgreSQL, migrate a fresh database to head, render its fence."""
    from fgentic_devenv.postgres import LocalPostgres

    workdir = Path(tempfile.mkdtemp(prefix="fgentic-fence-"))
    try:
        with LocalPostgres(workdir) as server:
            return asyncio.run(_generate_on(server))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def drift(path: Path, page: str) -> str | None:
    """Why the committed ``path`` is not ``page`` (its first differing line), or ``None``."""
    if not path.is_file():
        return f"{path}: missing"
    committed = path.read_text(encoding="utf-8")
    if committed == page:
        return None
    for line in difflib.unified_diff(committed.splitlines(), page.splitlines(), lineterm="",
                                     n=0):
        if line.startswith(("-", "+")) and not line.startswith(("---", "+++")):
            return f"{path}: differs from the migrations (first change: {line[:80]!r})"
    return f"{path}: differs from the migrations"


def run(output: Path, *, check: bool, page: str | None = None) -> int:
    """The command: write ``output`` or, with ``check``, compare it (1 on drift). ``page`` is
    the rendered page when the caller has one already (tests); otherwise it is generated."""
    page = generate() if page is None else page
    if check:
        problem = drift(output, page)
        if problem:
            print(f"drift: {problem}", file=sys.stderr)
            print("run `fgentic-dev fence` and commit the result", file=sys.stderr)
            return 1
        print(f"{output} up to date (schema version {SCHEMA_VERSION})")
        return 0
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(page, encoding="utf-8")
    print(f"wrote {output} (schema version {SCHEMA_VERSION}, {len(page.splitlines())} lines)")
    return 0


__all__ = ["DEFAULT_OUTPUT", "drift", "generate", "render", "run"]
