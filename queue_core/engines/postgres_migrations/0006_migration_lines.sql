-- queue_core on PostgreSQL, migration 6: the versions of the migration lines
-- (SQLite's migration 6). An application's own tables beside the queue are a
-- migration line: numbered files of its own, run by Engine.install. Each
-- line's row says up to which of its files this database has run; the
-- queue's schema never names the line's tables.

CREATE TABLE migration_lines (
    line    TEXT COLLATE "C" PRIMARY KEY
            CONSTRAINT migration_lines_line_length
            CHECK (length(line) BETWEEN 1 AND 200),
    version INTEGER NOT NULL
            CONSTRAINT migration_lines_version_positive CHECK (version >= 1)
);
