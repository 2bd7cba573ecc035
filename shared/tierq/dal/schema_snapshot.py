"""The schema the migrations make, as text: ``sql/schema.sql`` is the snapshot of an empty
database after every migration, and a test checks that migrating one gives exactly it. A
migration's effect is then read in review as a diff of that file.

The text comes from the catalog, not from ``pg_dump`` (whose version must match the
server's): tables with their columns, defaults, constraints, indexes, storage options and
triggers; sequences; functions with their bodies; the grants on each, on the schema and on
the database; default privileges; the application's group role. Names that differ from one
database to the next are written as placeholders: ``<owner>`` (who ran the migrations) and
``<app_group>`` (``tierq_app_<database>``, migration 0007). The owner's own privileges are
left out: they are all of them, and their list grows with PostgreSQL's versions.

Regenerate it after adding a migration (any server on which you may create a database;
a scratch database is made, migrated, read and dropped)::

    eval "$(.venv/bin/python -m tierq.local.services up)"   # when DATABASE_URL is unset
    .venv/bin/python -m tierq.dal.schema_snapshot --write
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from textwrap import dedent
from typing import LiteralString
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql
from psycopg.rows import TupleRow

from tierq.dal.migrate import migrate

SNAPSHOT_PATH = Path(__file__).parent / "sql" / "schema.sql"
REGENERATE = "python -m tierq.dal.schema_snapshot --write"

HEADER = f"""\
-- The schema that tierq's migrations make of an empty database: a listing from the catalog,
-- not SQL to run. Written by tierq.dal.schema_snapshot; after adding a migration, run
-- `{REGENERATE}`.
-- <owner> ran the migrations; <app_group> is the application's group role
-- (tierq_app_<database>, migration 0007). The owner's own privileges are not listed.
"""

_MIGRATIONS = "SELECT version || '_' || name FROM tierq_schema_migrations ORDER BY version"

# The catalog queries read the current schema only, under a search_path of it alone, so
# PostgreSQL writes the names of its objects unqualified.
_TABLES = """
    SELECT c.oid, c.relname, c.relkind::text, coalesce(array_to_string(c.reloptions, ', '), '')
    FROM pg_class c
    WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p')
    ORDER BY c.relname"""

_COLUMNS = """
    SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
           coalesce(pg_get_expr(d.adbin, d.adrelid), ''), a.attidentity::text,
           a.attgenerated::text
    FROM pg_attribute a
    LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
    WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped
    ORDER BY a.attnum"""

_CONSTRAINTS = """
    SELECT conname, pg_get_constraintdef(oid, true) FROM pg_constraint
    WHERE conrelid = %s ORDER BY conname"""

_INDEXES = """
    SELECT pg_get_indexdef(i.indexrelid) FROM pg_index i
    JOIN pg_class c ON c.oid = i.indexrelid
    WHERE i.indrelid = %s ORDER BY c.relname"""

_TRIGGERS = """
    SELECT pg_get_triggerdef(oid, true) FROM pg_trigger
    WHERE tgrelid = %s AND NOT tgisinternal ORDER BY tgname"""

_SEQUENCES = """
    SELECT c.oid, c.relname, format_type(s.seqtypid, NULL), s.seqstart, s.seqincrement,
           s.seqmin, s.seqmax, s.seqcache, s.seqcycle,
           coalesce((SELECT t.relname || '.' || a.attname FROM pg_depend d
                     JOIN pg_class t ON t.oid = d.refobjid
                     JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
                     WHERE d.objid = c.oid AND d.classid = 'pg_class'::regclass
                       AND d.refclassid = 'pg_class'::regclass AND d.deptype IN ('a', 'i')),
                    '')
    FROM pg_class c JOIN pg_sequence s ON s.seqrelid = c.oid
    WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'S'
    ORDER BY c.relname"""

_FUNCTIONS = """
    SELECT p.oid, p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')',
           pg_get_function_result(p.oid), l.lanname, p.provolatile::text, p.proisstrict,
           p.prosecdef, coalesce(array_to_string(p.proconfig, ', '), ''), p.prosrc
    FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
    WHERE p.pronamespace = current_schema()::regnamespace
    ORDER BY 2"""

# Who holds what on one object, the owner left out: (grantee, privileges, grantable).
# An object's ACL is NULL until its first GRANT or REVOKE; acldefault says what that means.
_GRANTS = """
    SELECT CASE WHEN x.grantee = 0 THEN 'PUBLIC' ELSE pg_get_userbyid(x.grantee) END AS who,
           string_agg(x.privilege_type, ', ' ORDER BY x.privilege_type), x.is_grantable
    FROM aclexplode(coalesce(%(acl)s::aclitem[], acldefault(%(kind)s::"char", %(owner)s::oid)))
         AS x
    WHERE x.grantee <> %(owner)s::oid
    GROUP BY who, x.is_grantable
    ORDER BY who, x.is_grantable"""

_ACLS = {
    "table": "SELECT relacl::text, relowner FROM pg_class WHERE oid = %s",
    "sequence": "SELECT relacl::text, relowner FROM pg_class WHERE oid = %s",
    "function": "SELECT proacl::text, proowner FROM pg_proc WHERE oid = %s",
    "schema": "SELECT nspacl::text, nspowner FROM pg_namespace "
              "WHERE oid = current_schema()::regnamespace",
    "database": "SELECT datacl::text, datdba FROM pg_database "
                "WHERE datname = current_database()",
}
_ACL_KIND = {"table": "r", "sequence": "s", "function": "f", "schema": "n", "database": "d"}

_DEFAULT_PRIVILEGES = """
    SELECT pg_get_userbyid(d.defaclrole),
           CASE d.defaclobjtype WHEN 'r' THEN 'tables' WHEN 'S' THEN 'sequences'
                WHEN 'f' THEN 'functions' WHEN 'T' THEN 'types' ELSE 'schemas' END,
           CASE WHEN x.grantee = 0 THEN 'PUBLIC' ELSE pg_get_userbyid(x.grantee) END AS who,
           string_agg(x.privilege_type, ', ' ORDER BY x.privilege_type)
    FROM pg_default_acl d, aclexplode(d.defaclacl) AS x
    WHERE d.defaclnamespace = current_schema()::regnamespace
    GROUP BY 1, 2, 3 ORDER BY 1, 2, 3"""

_ROLE = """
    SELECT rolsuper, rolinherit, rolcreaterole, rolcreatedb, rolcanlogin, rolreplication,
           rolbypassrls, rolconnlimit,
           coalesce((SELECT string_agg(pg_get_userbyid(m.roleid), ', ' ORDER BY 1)
                     FROM pg_auth_members m WHERE m.member = r.oid), '')
    FROM pg_roles r WHERE rolname = %s"""

_VOLATILITY = {"i": "immutable", "s": "stable", "v": "volatile"}


class _Names:
    """The role names of one database, and the placeholders the snapshot writes instead."""

    def __init__(self, quoted_schema: str, owner: str, app_group: str | None) -> None:
        self.qualifier = f" ON {quoted_schema}."  # as PostgreSQL writes it (quote_ident)
        self.placeholders = {owner: "<owner>"}
        if app_group is not None:
            self.placeholders[app_group] = "<app_group>"

    def __call__(self, role: str) -> str:
        return self.placeholders.get(role, role)


def _rows(conn: psycopg.Connection[TupleRow], query: LiteralString,
          params: Sequence[object] | Mapping[str, object] | None = None) -> list[TupleRow]:
    return conn.execute(query, params).fetchall()


def snapshot(conn: psycopg.Connection[TupleRow]) -> str:
    """The schema of the database ``conn`` is in (its current schema), as the snapshot's
    text. Reads only; run in a transaction of its own, which it leaves rolled back."""
    with conn.transaction(force_rollback=True):
        schema, quoted_schema = _rows(conn, "SELECT current_schema(), "
                                            "quote_ident(current_schema())")[0]
        conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(sql.Identifier(schema)))
        owner = _rows(conn, "SELECT current_user")[0][0]
        has_group = _rows(conn, "SELECT to_regprocedure('tierq_app_group()') IS NOT NULL")
        group = _rows(conn, "SELECT tierq_app_group()")[0][0] if has_group[0][0] else None
        names = _Names(quoted_schema, owner, group)
        out = [HEADER]
        out += _migrations(conn)
        for section in (_tables, _sequences, _functions, _schema_and_database, _roles):
            out += section(conn, names)
        return "\n".join(out).rstrip("\n") + "\n"


def _migrations(conn: psycopg.Connection[TupleRow]) -> list[str]:
    has_record = _rows(conn, "SELECT to_regclass('tierq_schema_migrations') IS NOT NULL")
    applied = [row[0] for row in _rows(conn, _MIGRATIONS)] if has_record[0][0] else []
    return ["migrations applied:", *(f"  {name}" for name in applied), ""]


def _grants(conn: psycopg.Connection[TupleRow], names: _Names, kind: str,
            oid: int | None = None) -> list[str]:
    acl, owner = _rows(conn, _ACLS[kind], (oid,) if oid is not None else None)[0]
    lines = []
    for who, privileges, grantable in _rows(conn, _GRANTS, {
            "acl": acl, "kind": _ACL_KIND[kind], "owner": owner}):
        option = " (with grant option)" if grantable else ""
        lines.append(f"  grant to {names(who)}: {privileges}{option}")
    return lines or ["  no grants but the owner's"]


def _tables(conn: psycopg.Connection[TupleRow], names: _Names) -> list[str]:
    out = []
    for oid, name, kind, options in _rows(conn, _TABLES):
        out.append(f"table {name}" + (" (partitioned)" if kind == "p" else ""))
        for column, type_, not_null, default, identity, generated in _rows(conn, _COLUMNS,
                                                                           (oid,)):
            line = f"  column {column} {type_}" + (" not null" if not_null else "")
            if identity:
                line += " generated " + ("always" if identity == "a" else "by default") \
                        + " as identity"
            elif generated:
                line += f" generated always as ({default}) stored"
            elif default:
                line += f" default {default}"
            out.append(line)
        out += [f"  constraint {c}: {definition}"
                for c, definition in _rows(conn, _CONSTRAINTS, (oid,))]
        # pg_get_indexdef names the table with its schema, whatever the search_path
        out += [f"  {definition.replace(names.qualifier, ' ON ', 1)}"
                for (definition,) in _rows(conn, _INDEXES, (oid,))]
        out += [f"  {definition}" for (definition,) in _rows(conn, _TRIGGERS, (oid,))]
        if options:
            out.append(f"  options: {options}")
        out += _grants(conn, names, "table", oid)
        out.append("")
    return out


def _sequences(conn: psycopg.Connection[TupleRow], names: _Names) -> list[str]:
    out = []
    for oid, name, type_, start, step, low, high, cache, cycle, owned_by in _rows(
            conn, _SEQUENCES):
        out.append(f"sequence {name} {type_} start {start} increment {step} min {low} "
                   f"max {high} cache {cache}" + (" cycle" if cycle else "")
                   + (f" owned by {owned_by}" if owned_by else ""))
        out += _grants(conn, names, "sequence", oid)
        out.append("")
    return out


def _functions(conn: psycopg.Connection[TupleRow], names: _Names) -> list[str]:
    out = []
    for oid, signature, result, language, volatility, strict, definer, config, body in _rows(
            conn, _FUNCTIONS):
        line = f"function {signature} returns {result} language {language} " \
               f"{_VOLATILITY[volatility]}"
        line += (" strict" if strict else "") + (" security definer" if definer else "")
        out.append(line + (f" set {config}" if config else ""))
        out += _grants(conn, names, "function", oid)
        out.append("  body:")
        out += [f"    {text}".rstrip() for text in dedent(body).strip("\n").splitlines()]
        out.append("")
    return out


def _schema_and_database(conn: psycopg.Connection[TupleRow], names: _Names) -> list[str]:
    out = ["schema (the current one)", *_grants(conn, names, "schema"), ""]
    out += ["database", *_grants(conn, names, "database"), ""]
    defaults = _rows(conn, _DEFAULT_PRIVILEGES)
    if defaults:
        out.append("default privileges in the schema")
        out += [f"  for {names(role)} on {objects}: grant to {names(who)}: {privileges}"
                for role, objects, who, privileges in defaults]
        out.append("")
    return out


def _roles(conn: psycopg.Connection[TupleRow], names: _Names) -> list[str]:
    out = []
    for role, placeholder in names.placeholders.items():
        if placeholder == "<owner>":
            continue  # whoever runs the migrations: not something they make
        found = _rows(conn, _ROLE, (role,))
        if not found:
            continue
        superuser, inherit, createrole, createdb, login, replication, bypassrls, limit, \
            member_of = found[0]
        flags = [name if value else f"no{name}" for name, value in (
            ("superuser", superuser), ("inherit", inherit), ("createrole", createrole),
            ("createdb", createdb), ("login", login), ("replication", replication),
            ("bypassrls", bypassrls))]
        out.append(f"role {placeholder}: {' '.join(flags)} connection limit {limit}"
                   + (f" member of {member_of}" if member_of else ""))
        out.append("")
    return out


# -- a scratch database, migrated -------------------------------------------------------


def _with_database(url: str, name: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


@contextmanager
def migrated_scratch_database(server_url: str) -> Iterator[str]:
    """A new database on the server of ``server_url``, migrated; dropped afterwards, with the
    application group role its migrations made (roles are cluster-wide)."""
    name = f"tierq_snapshot_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = _with_database(server_url, name)
    group = None
    try:
        migrate(url)
        with psycopg.connect(url, autocommit=True) as conn:
            group = _rows(conn, "SELECT tierq_app_group()")[0][0]
        yield url
    finally:
        with psycopg.connect(server_url, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(name)))
            if group is not None:
                admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(group)))


def migrated_snapshot(server_url: str) -> str:
    """The snapshot of a new database on the server of ``server_url`` after every
    migration."""
    with migrated_scratch_database(server_url) as url, psycopg.connect(url) as conn:
        return snapshot(conn)


def stored_snapshot() -> str:
    return SNAPSHOT_PATH.read_text(encoding="utf-8") if SNAPSHOT_PATH.exists() else ""


def snapshot_diff(expected: str, actual: str) -> str:
    """A unified diff from the stored snapshot to what the migrations make ('' if equal)."""
    return "".join(difflib.unified_diff(
        expected.splitlines(keepends=True), actual.splitlines(keepends=True),
        fromfile=f"{SNAPSHOT_PATH.name} (stored)", tofile="what the migrations make"))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tierq.dal.schema_snapshot",
        description="Compare (or --write) sql/schema.sql with what the migrations make of "
                    "a new database on the server of --server (default: DATABASE_URL).")
    parser.add_argument("--write", action="store_true", help="write the snapshot file")
    parser.add_argument("--server", default=os.environ.get("DATABASE_URL"),
                        help="a PostgreSQL URL whose login may create databases")
    args = parser.parse_args(argv)
    if not args.server:
        parser.error("no server: pass --server or set DATABASE_URL (for a private one: "
                     'eval "$(python -m tierq.local.services up)")')
    actual = migrated_snapshot(args.server)
    if args.write:
        SNAPSHOT_PATH.write_text(actual, encoding="utf-8")
        print(f"wrote {SNAPSHOT_PATH}")
        return 0
    diff = snapshot_diff(stored_snapshot(), actual)
    if diff:
        sys.stdout.write(diff)
        print(f"\nthe migrations no longer make {SNAPSHOT_PATH.name}: review, then "
              f"`{REGENERATE}`", file=sys.stderr)
        return 1
    print(f"{SNAPSHOT_PATH.name} is what the migrations make")
    return 0


if __name__ == "__main__":
    sys.exit(main())
