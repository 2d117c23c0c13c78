//! The harness itself: the test database handle gives the same answers on every backend
//! (`RUNNER_TEST_BACKEND`), without the binary, on a table of its own.

use std::time::Duration;

use crate::common::{TestDb, Val};

#[test]
fn the_test_database_answers_the_same_on_every_backend() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = TestDb::new(dir.path());
    assert!(!db.created(), "a fresh database is empty");
    db.exec(
        "CREATE TABLE sample (id bigint PRIMARY KEY, name text NOT NULL, data bytea, at bigint)",
        &[],
    );
    assert!(db.created());
    let before = db.snapshot();
    for (id, name) in [(1_i64, "one"), (2, "two"), (3, "o'three")] {
        assert_eq!(
            db.exec(
                "INSERT INTO sample (id, name, at) VALUES ($1, $2, $1 * 100)",
                &[&id, &name]
            ),
            1
        );
    }
    assert_ne!(db.snapshot(), before, "the snapshot shows new rows");
    assert_eq!(
        db.exec(
            "UPDATE sample SET data = $1 WHERE id = $2",
            &[&vec![0_u8, 255, 10], &2_i64]
        ),
        1
    );

    assert_eq!(db.query_i64("SELECT count(*) FROM sample", &[]), 3);
    // Placeholders in any order, each bound by its number.
    assert_eq!(
        db.query_string(
            "SELECT name FROM sample WHERE at = $2 AND id = $1",
            &[&3_i64, &300_i64]
        ),
        "o'three"
    );
    assert_eq!(
        db.query_strings("SELECT name || '@' || at FROM sample ORDER BY id", &[]),
        ["one@100", "two@200", "o'three@300"]
    );
    assert_eq!(
        db.query_i64s(
            "SELECT id FROM sample WHERE name LIKE $1 ORDER BY id",
            &[&"o%"]
        ),
        [1, 3]
    );
    // NULLs, bytes, and comparisons read as 0/1 as SQLite gives them.
    assert_eq!(
        db.query_row(
            "SELECT data, data IS NULL, id = 2, max(at) FROM sample WHERE id = $1 GROUP BY id, data",
            &[&2_i64]
        ),
        [
            Val::Bytes(vec![0, 255, 10]),
            Val::Int(0),
            Val::Int(1),
            Val::Int(200)
        ]
    );
    assert_eq!(
        db.query_opt_string(
            "SELECT CAST(data AS TEXT) FROM sample WHERE id = $1",
            &[&1_i64]
        ),
        None
    );
    assert_eq!(
        db.query_rows("SELECT id FROM sample WHERE name = $1", &[&None::<String>]),
        Vec::<Vec<Val>>::new(),
        "NULL equals nothing"
    );
    assert!(db.hold_write_lock(Duration::from_millis(10)));
    let unchanged = db.snapshot();
    assert_eq!(db.snapshot(), unchanged);
}
