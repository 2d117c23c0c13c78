-- runner schema, version 11: the schedules whose due-ness cannot be judged, indexed. Every tick
-- also reads the rows where `paused` is not 0 or 1 or `next_fire_at` is not an integer or NULL
-- (only a hand edit or a damaged file makes one), to report them rather than leave them
-- silently never due. Without an index that was a scan of every schedule on every tick, due
-- or not: 17 ms per tick with 100,000 schedules. This index holds exactly those rows, so
-- normally none. Its WHERE is the tick's own condition, word for word, which is how SQLite
-- knows the index serves it. Append-only: never edit a shipped migration.

DROP INDEX IF EXISTS job_definitions_undecidable;
CREATE INDEX job_definitions_undecidable ON job_definitions (next_fire_at, id)
    WHERE typeof(paused) <> 'integer' OR paused NOT IN (0, 1)
        OR typeof(next_fire_at) NOT IN ('integer', 'null');
