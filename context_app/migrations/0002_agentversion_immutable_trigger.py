"""Make published agent versions immutable in the database itself.

The model refuses saves too, but `QuerySet.update()` and raw SQL bypass Python, so a trigger is
the final word on both supported engines.
"""

from django.db import migrations

SQLITE_CREATE = """
CREATE TRIGGER IF NOT EXISTS context_app_agentversion_immutable
BEFORE UPDATE ON context_app_agentversion
BEGIN
    SELECT RAISE(ABORT, 'published agent versions are immutable');
END;
"""
SQLITE_DROP = "DROP TRIGGER IF EXISTS context_app_agentversion_immutable;"

POSTGRES_CREATE = """
CREATE OR REPLACE FUNCTION context_app_agentversion_immutable() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'published agent versions are immutable'
        USING ERRCODE = 'integrity_constraint_violation';
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER context_app_agentversion_immutable
BEFORE UPDATE ON context_app_agentversion
FOR EACH ROW EXECUTE FUNCTION context_app_agentversion_immutable();
"""
POSTGRES_DROP = """
DROP TRIGGER IF EXISTS context_app_agentversion_immutable ON context_app_agentversion;
DROP FUNCTION IF EXISTS context_app_agentversion_immutable();
"""


def _run(sql_by_vendor):
    def apply(apps, schema_editor):
        sql = sql_by_vendor.get(schema_editor.connection.vendor)
        if sql is None:
            raise RuntimeError(
                f"no immutability trigger for database vendor {schema_editor.connection.vendor!r}"
            )
        with schema_editor.connection.cursor() as cursor:
            cursor.execute(sql)

    return apply


class Migration(migrations.Migration):
    dependencies = [("context_app", "0001_initial")]

    operations = [
        migrations.RunPython(
            _run({"sqlite": SQLITE_CREATE, "postgresql": POSTGRES_CREATE}),
            _run({"sqlite": SQLITE_DROP, "postgresql": POSTGRES_DROP}),
        ),
    ]
