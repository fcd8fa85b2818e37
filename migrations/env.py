"""Alembic environment: the connection comes from memoria-pg (a psycopg DSN), never from alembic.ini."""

from alembic import context
from sqlalchemy import create_engine, pool

import psycopg

config = context.config
dsn = config.attributes["dsn"]
engine = create_engine(
    "postgresql+psycopg://", creator=lambda: psycopg.connect(dsn), poolclass=pool.NullPool
)
with engine.connect() as connection:
    # version_table_schema stays public: the memoria schema itself is created (and dropped) by
    # the first migration.
    context.configure(connection=connection, target_metadata=None, transaction_per_migration=True)
    with context.begin_transaction():
        context.run_migrations()
