-- queue_core on SQLite, migration 6: the versions of the migration lines.
-- An application's own tables beside the queue are a migration line:
-- numbered files of its own, run by Engine.install. Each line's row says up
-- to which of its files this database has run; the queue's schema never
-- names the line's tables.

CREATE TABLE migration_lines (
    line    TEXT    PRIMARY KEY CHECK (length(line) BETWEEN 1 AND 200),
    version INTEGER NOT NULL CHECK (version >= 1)
) STRICT;
