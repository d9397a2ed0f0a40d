//! The invalidator's spool for a router is not one ordered queue (issue #26): while one server
//! behind the router is down, the router refuses the deletes for that server's keys, and the
//! deletes for the healthy server still go on; the refused ones are kept and delivered once
//! the server is back. Real processes: two `shoal server`s, a `shoal router`, `shoal
//! invalidator` following an SQLite outbox.

mod support;

use shoal_client::invalidation;
use support::common::router::Router;
use support::common::{eventually, Server};
use support::*;

#[test]
fn deletes_for_a_healthy_server_are_not_held_behind_those_for_a_down_one() {
    let state = state_dir("head-of-line");
    std::fs::create_dir_all(&state).unwrap();
    let region = state.join("b.region");
    let region_arg = region.to_str().unwrap().to_string();
    let a = Server::shoal("inv-hol-a", 0, &[]);
    let b = Server::shoal("inv-hol-b", 0, &["-e", &region_arg]);
    let b_port = b.port;
    let config = format!(
        r#"{{ "pools": {{ "main": {{ "servers": ["{}", "{}"] }} }}, "route": {{ "type": "PoolRoute", "pool": "main" }} }}"#,
        a.address(),
        b.address()
    );
    let router = Router::start("inv-head-of-line", &config);
    // Which server each key lives on, as the router places it.
    let keys: Vec<String> = (0..400).map(|i| format!("k:{i}")).collect();
    let mut through = router.client();
    for key in &keys {
        through.set(key.as_bytes(), b"cached", 0, 0).unwrap();
    }
    let (on_a, on_b): (Vec<String>, Vec<String>) = keys.iter().cloned().partition(|k| present(&a, k));
    assert!(on_a.len() > 100 && on_b.len() > 10, "{} on A, {} on B", on_a.len(), on_b.len());
    assert!(on_b.iter().all(|k| present(&b, k)));
    // B goes away with its items kept in its region file.
    b.stop_with("KILL");

    let path = state.join("app.db");
    let db = rusqlite::Connection::open(&path).unwrap();
    db.execute(invalidation::SQLITE_OUTBOX_SCHEMA, []).unwrap();
    // One delete a record, so that many records queue behind the refused ones.
    let inv = Invalidator::start(
        &state.join("inv"),
        &["--sqlite", path.to_str().unwrap()],
        &[router.address()],
        &["--batch-keys", "1"],
    );
    let emit = |keys: &[String]| {
        db.execute_batch("BEGIN").unwrap();
        invalidation::emit_sqlite(&db, keys).unwrap();
        db.execute_batch("COMMIT").unwrap();
    };
    emit(&on_b);
    assert!(eventually(60, || inv.status()["refusals"].as_u64() > Some(0)), "{}", inv.stderr());
    // More than one write's worth (64 records) of deletes for A, each committed after B's.
    for chunk in on_a.chunks(10) {
        emit(chunk);
    }
    assert!(
        eventually(60, || on_a.iter().all(|k| !present(&a, k))),
        "every delete for the healthy server arrives while B is down: {} of {} still cached; {}",
        on_a.iter().filter(|k| present(&a, k)).count(),
        on_a.len(),
        inv.stderr()
    );
    let backlog = || inv.status()["destinations"][0]["backlog"].as_u64();
    assert!(backlog() >= Some(on_b.len() as u64), "B's deletes stay in the spool: {}", inv.status());
    assert!(inv.stderr().contains("the later ones go on"), "{}", inv.stderr());

    // B comes back warm, its keys still cached: the deletes kept for it are delivered.
    let b = Server::shoal("inv-hol-b", b_port, &["-e", &region_arg]);
    assert!(eventually(60, || backlog() == Some(0)), "the spool drains: {}", inv.status());
    assert!(
        eventually(60, || on_b.iter().all(|k| !present(&b, k))),
        "every delete for B arrives after it returns: {}",
        inv.stderr()
    );
    inv.kill();
    drop(router);
    let _ = std::fs::remove_dir_all(state);
}
