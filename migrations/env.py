"""Alembic environment: the connection comes from memoria-pg (a psycopg DSN), never from alembic.ini."""

import psycopg
from alembic import context
from sqlalchemy import create_engine, pool

config = context.config
dsn = config.attributes["dsn"]
engine = create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(dsn), poolclass=pool.NullPool)
with engine.connect() as connection:
    # Its own version table (memoria_pg/db/migrate.VERSION_TABLE), not Alembic's default, which the
    # application sharing the database may use; in schema public: the memoria schema itself is created
    # (and dropped) by the first migration.
    context.configure(
        connection=connection,
        target_metadata=None,
        transaction_per_migration=True,
        version_table=config.attributes["version_table"],
    )
    with context.begin_transaction():
        context.run_migrations()
