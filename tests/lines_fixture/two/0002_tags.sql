-- The test line, version 2: a column more.
ALTER TABLE notes ADD COLUMN tag TEXT NOT NULL DEFAULT 'none';
