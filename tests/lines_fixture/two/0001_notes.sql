-- The test line, version 1: a table of its own.
CREATE TABLE notes (
    id   INTEGER PRIMARY KEY,
    body TEXT NOT NULL
);
