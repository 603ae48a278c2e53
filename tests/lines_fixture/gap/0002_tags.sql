-- A line whose version 1 is missing: refused when it loads.
ALTER TABLE notes ADD COLUMN tag TEXT NOT NULL DEFAULT 'none';
