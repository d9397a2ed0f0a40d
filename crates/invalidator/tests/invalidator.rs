//! `shoal invalidator` end to end: Debian's PostgreSQL (wal_level=logical) or an SQLite file,
//! real `shoal server`s as destinations, the invalidator as a process killed with -9.

mod support;

use shoal_client::{invalidation, Client, Options};
use std::process::{Command, Stdio};
use support::common::router::Router;
use support::common::{eventually, free_port, shoal_bin, Server};
use support::*;

#[test]
fn postgres_commits_delete_their_keys_and_rollbacks_delete_nothing() {
    let pg = Postgres::start("commits");
    let mut db = pg.client();
    db.batch_execute("CREATE TABLE users (id int PRIMARY KEY, name text)").unwrap();
    let a = Server::shoal("inv-commits-a", 0, &[]);
    let b = Server::shoal("inv-commits-b", 0, &[]);
    let keys = ["user:1", "feed:1", "user:2", "kept", "long:ok", "rule:7"];
    for server in [&a, &b] {
        fill(server, keys.iter().map(|k| k.to_string()));
    }
    let state = state_dir("commits");
    let inv = Invalidator::start(
        &state,
        &["--postgres", &pg.conninfo()],
        &[a.address(), b.address()],
        &["--rule", "users=rule:{id}"],
    );

    let mut tx = db.transaction().unwrap();
    tx.execute("INSERT INTO users VALUES (1, 'ann')", &[]).unwrap();
    invalidation::emit_postgres(&mut tx, &["user:1", "feed:1"]).unwrap();
    tx.commit().unwrap();
    let mut tx = db.transaction().unwrap();
    invalidation::emit_postgres(&mut tx, &["kept"]).unwrap();
    tx.rollback().unwrap();
    // A row change under a rule; a message with a key over 250 bytes next to a good one; a
    // message that is not text at all.
    db.execute("INSERT INTO users VALUES (7, 'bob')", &[]).unwrap();
    let long = "x".repeat(251);
    db.execute(invalidation::POSTGRES_EMIT, &[&format!("{long} long:ok")]).unwrap();
    db.execute("SELECT pg_logical_emit_message(true, 'shoal', '\\xfffe'::bytea)", &[]).unwrap();
    db.execute("SELECT pg_logical_emit_message(true, 'other-app', 'user:2')", &[]).unwrap();

    for server in [&a, &b] {
        assert!(
            eventually(30, || ["user:1", "feed:1", "rule:7", "long:ok"].iter().all(|k| !present(server, k))),
            "committed keys are deleted on {}: {}",
            server.address(),
            inv.stderr()
        );
        assert!(present(server, "kept"), "a rolled-back transaction deletes nothing");
        assert!(present(server, "user:2"), "another prefix's message is not ours");
    }
    // Backlogs and lags are counted once deliveries are confirmed, a moment after the keys go.
    let delivered = |status: &serde_json::Value| {
        status["destinations"].as_array().unwrap().iter().all(|destination| {
            destination["backlog"] == 0 && destination["lag_ms_p99"].as_f64().is_some_and(|lag| lag > 0.0)
        })
    };
    assert!(eventually(30, || delivered(&inv.status())), "{}", inv.status());
    let status = inv.status();
    assert_eq!(status["problems"]["bad_key"], 1, "{status}");
    assert_eq!(status["problems"]["bad_message"], 1, "{status}");
    assert!(inv.stderr().contains("not UTF-8"), "{}", inv.stderr());
    inv.kill();
    let _ = std::fs::remove_dir_all(state);
}

#[test]
fn sqlite_outbox_rows_are_delivered_then_removed() {
    let state = state_dir("sqlite");
    std::fs::create_dir_all(&state).unwrap();
    let path = state.join("app.db");
    let db = rusqlite::Connection::open(&path).unwrap();
    db.execute(invalidation::SQLITE_OUTBOX_SCHEMA, []).unwrap();
    let server = Server::shoal("inv-sqlite", 0, &[]);
    fill(&server, ["a", "b", "c"].map(String::from));
    let inv = Invalidator::start(
        &state.join("inv"),
        &["--sqlite", path.to_str().unwrap()],
        &[server.address()],
        &[],
    );
    // Bytes that are not a key list are reported and passed over, not retried for ever.
    db.execute("INSERT INTO shoal_outbox (keys) VALUES (X'FF00')", []).unwrap();
    db.execute_batch("BEGIN").unwrap();
    invalidation::emit_sqlite(&db, &["a", "b"]).unwrap();
    db.execute_batch("COMMIT").unwrap();
    db.execute_batch("BEGIN").unwrap();
    invalidation::emit_sqlite(&db, &["c"]).unwrap();
    db.execute_batch("ROLLBACK").unwrap();
    assert!(eventually(30, || !present(&server, "a") && !present(&server, "b")), "{}", inv.stderr());
    assert!(present(&server, "c"));
    // The rows go once their deletes are confirmed, a moment after the keys are gone.
    let left = || db.query_row("SELECT count(*) FROM shoal_outbox", [], |r| r.get::<_, i64>(0)).unwrap();
    assert!(eventually(30, || left() == 0), "delivered rows leave the outbox: {} left", left());
    assert_eq!(inv.status()["problems"]["bad_message"], 1);
    inv.kill();
    let _ = std::fs::remove_dir_all(state);
}

#[test]
fn kill_9_and_a_destination_that_is_down_lose_no_delete() {
    let pg = Postgres::start("kills");
    let mut db = pg.client();
    let state = state_dir("kills");
    std::fs::create_dir_all(&state).unwrap();
    let region = state.join("b.region");
    let region_arg = region.to_str().unwrap().to_string();
    let a = Server::shoal("inv-kills-a", 0, &[]);
    let b = Server::shoal("inv-kills-b", 0, &["-e", &region_arg]);
    let b_port = b.port;
    let keys: Vec<String> = (0..600).map(|i| format!("k:{i}")).collect();
    fill(&a, keys.clone());
    fill(&b, keys.clone());
    // B goes away with its items kept in its region file; it comes back later.
    b.stop_with("KILL");
    let destinations = [a.address(), format!("127.0.0.1:{b_port}")];
    let source = ["--postgres".to_string(), pg.conninfo()];
    let source: Vec<&str> = source.iter().map(String::as_str).collect();
    let mut inv = Invalidator::start(&state.join("inv"), &source, &destinations, &[]);
    for (i, chunk) in keys.chunks(3).enumerate() {
        let mut tx = db.transaction().unwrap();
        invalidation::emit_postgres(&mut tx, chunk).unwrap();
        tx.commit().unwrap();
        if i % 50 == 25 {
            inv.kill();
            inv = Invalidator::start(&state.join("inv"), &source, &destinations, &[]);
        }
    }
    assert!(
        eventually(30, || keys.iter().all(|k| !present(&a, k))),
        "every delete reaches A: {}",
        inv.stderr()
    );
    let waiting = inv.status()["destinations"][1]["backlog"].as_u64().unwrap();
    assert!(waiting > 0, "B's deletes wait in its spool while it is down");
    inv.kill();
    // B returns with every key still cached; a fresh invalidator delivers the spool to it.
    let b = Server::shoal("inv-kills-b", b_port, &["-e", &region_arg]);
    assert!(keys.iter().any(|k| present(&b, k)), "B kept its items across the restart");
    let inv = Invalidator::start(&state.join("inv"), &source, &destinations, &[]);
    assert!(
        eventually(30, || keys.iter().all(|k| !present(&b, k))),
        "every delete reaches B after it returns: {}",
        inv.stderr()
    );
    inv.kill();
    let _ = std::fs::remove_dir_all(state);
}

#[test]
fn a_postgres_restart_is_waited_out_and_a_dropped_slot_stops_the_invalidator() {
    let pg = Postgres::start("restart");
    let server = Server::shoal("inv-restart", 0, &[]);
    fill(&server, ["before", "after"].map(String::from));
    let state = state_dir("restart");
    let source = ["--postgres".to_string(), pg.conninfo()];
    let source: Vec<&str> = source.iter().map(String::as_str).collect();
    let inv = Invalidator::start(&state, &source, &[server.address()], &["--slot", "restart_test"]);
    pg.client().execute(invalidation::POSTGRES_EMIT, &[&"before"]).unwrap();
    assert!(eventually(30, || !present(&server, "before")), "{}", inv.stderr());
    pg.ctl("restart");
    pg.client().execute(invalidation::POSTGRES_EMIT, &[&"after"]).unwrap();
    assert!(
        eventually(30, || !present(&server, "after")),
        "deletes resume after a restart: {}",
        inv.stderr()
    );
    assert!(inv.status()["source_errors"].as_u64().unwrap() > 0, "the restart was noticed");
    inv.kill();

    // The slot is dropped behind the invalidator's back: it refuses to start rather than
    // silently skip what was committed meanwhile, and says what to do. The killed
    // invalidator's walsender holds the slot until the server notices the closed socket,
    // which a loaded machine can delay: drop it once it is free (seen in CI: "replication
    // slot is active for PID").
    let mut db = pg.client();
    let slot_free = |db: &mut postgres::Client| {
        db.query_one("SELECT NOT active FROM pg_replication_slots WHERE slot_name = 'restart_test'", &[])
            .map(|row| row.get::<_, bool>(0))
            .unwrap_or(false)
    };
    assert!(eventually(30, || slot_free(&mut db)), "the killed invalidator's slot is released");
    db.execute("SELECT pg_drop_replication_slot('restart_test')", &[]).unwrap();
    let output = Command::new(shoal_bin())
        .args([
            "invalidator",
            "--postgres",
            &pg.conninfo(),
            "--slot",
            "restart_test",
            "--destination",
            &server.address(),
        ])
        .arg("--state-dir")
        .arg(&state)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("was dropped") && stderr.contains("--recreate-slot"), "{stderr}");
    let _ = std::fs::remove_dir_all(state);
}

#[test]
fn remote_markers_give_a_replica_region_its_own_writes_while_the_replica_lags() {
    let master = Postgres::start("markers-master");
    let mut db = master.client();
    db.batch_execute("CREATE TABLE kv (k text PRIMARY KEY, v text); INSERT INTO kv VALUES ('item', 'old')")
        .unwrap();
    let replica = master.replica("markers-replica", 1500);
    let mut replica_db = replica.client();
    let replica_value = |db: &mut postgres::Client| -> Option<String> {
        db.query_opt("SELECT v FROM kv WHERE k = 'item'", &[]).unwrap().map(|r| r.get(0))
    };
    assert!(
        eventually(30, || replica_value(&mut replica_db).as_deref() == Some("old")),
        "the replica has the row"
    );

    // The replica region: one cache server, and an invalidator that waits for its replica.
    let cache = Server::shoal("inv-markers", 0, &[]);
    let state = state_dir("markers");
    let inv = Invalidator::start(
        &state,
        &[
            "--postgres",
            &master.conninfo(),
            "--slot",
            "region_replica",
            "--wait-for-replica",
            &replica.conninfo(),
        ],
        &[cache.address()],
        &["--remote-markers"],
    );
    let mut pool = shoal_client::Pool::new(&[cache.address()], shoal_client::PoolOptions::default()).unwrap();
    pool.set(b"item", b"old", 0, 0).unwrap();

    // A write from the replica region: marker, master write (naming the key), local delete.
    pool.set_remote_marker(b"item", 0).unwrap();
    let mut tx = db.transaction().unwrap();
    tx.execute("UPDATE kv SET v = 'new' WHERE k = 'item'", &[]).unwrap();
    invalidation::emit_postgres(&mut tx, &["item"]).unwrap();
    tx.commit().unwrap();
    pool.delete(b"item").unwrap();

    // A read right after: the replica still has the old row, the marker sends it to the master.
    assert!(pool.get(b"item").unwrap().is_none());
    assert_eq!(replica_value(&mut replica_db).as_deref(), Some("old"), "the replica really lags");
    assert!(pool.has_remote_marker(b"item").unwrap(), "the marker sends the read to the master");
    let mut master_db = master.client();
    assert_eq!(replica_value(&mut master_db).as_deref(), Some("new"));
    // Without the marker the read would have gone to the replica and cached the old value;
    // the region's invalidator does not delete before the replica has the write either.
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert!(pool.has_remote_marker(b"item").unwrap(), "the marker stays until the replica applied the write");
    assert!(
        eventually(30, || !pool.has_remote_marker(b"item").unwrap()),
        "the replica region's invalidation removes the marker: {}",
        inv.stderr()
    );
    assert_eq!(
        replica_value(&mut replica_db).as_deref(),
        Some("new"),
        "it came after the replica applied the write"
    );
    inv.kill();
    let _ = std::fs::remove_dir_all(state);
}

#[test]
fn a_cold_clusters_hold_off_keeps_a_warm_clusters_stale_copy_out() {
    // Scaling Memcache §4.3: a cold cluster reads through to a warm one (WarmUpRoute) and adds
    // warm hits into itself. The invalidation reaches the cold cluster before the warm one;
    // a read in between finds the warm cluster's stale copy. Without a hold-off that copy is
    // added into the cold cluster and stays; with `delete <key> hold 2` the add is refused.
    let pg = Postgres::start("warmup");
    let (cold, warm) = (Server::shoal("inv-warmup-cold", 0, &[]), Server::shoal("inv-warmup-warm", 0, &[]));
    let router = Router::start(
        "warmup",
        &format!(
            r#"{{ "pools": {{ "cold": {{ "servers": ["{}"] }}, "warm": {{ "servers": ["{}"] }} }},
                 "route": {{ "type": "WarmUpRoute", "cold": {{ "type": "PoolRoute", "pool": "cold" }},
                             "warm": {{ "type": "PoolRoute", "pool": "warm" }}, "exptime": 100 }} }}"#,
            cold.address(),
            warm.address()
        ),
    );
    let mut through_router =
        Client::connect(&router.address(), Options { local: false, ..Options::default() }).unwrap();
    fill(&warm, ["held", "unheld"].map(String::from));
    // The warm cluster's deletes are late: its invalidator destination is not reachable yet.
    let late_warm = format!("127.0.0.1:{}", free_port());
    let state = state_dir("warmup");
    let inv = Invalidator::start(
        &state,
        &["--postgres", &pg.conninfo()],
        &[late_warm],
        &["--cold-destination", &router.address(), "--cold-hold", "2"],
    );
    pg.client().execute(invalidation::POSTGRES_EMIT, &[&"held"]).unwrap();
    assert!(
        eventually(30, || inv.status()["destinations"][1]["delivered"].as_u64() == Some(1)),
        "the cold cluster got the delete: {}",
        inv.status()
    );
    // The read through the cold cluster's router finds the warm cluster's stale copy (a
    // stale read the paper accepts) but cannot add it to the cold cluster.
    assert_eq!(through_router.get(b"held").unwrap().unwrap().value, b"cached");

    // The same race with a delete that has no hold-off: the stale copy sticks in the cold cluster.
    assert!(!through_router.delete(b"unheld").unwrap(), "nothing in the cold cluster yet");
    assert_eq!(through_router.get(b"unheld").unwrap().unwrap().value, b"cached");
    assert!(eventually(30, || present(&cold, "unheld")), "without a hold-off the stale copy stays");
    // By now the router's add of the first stale copy has long been tried, and refused.
    assert!(!present(&cold, "held"), "the hold-off refused the warm cluster's stale copy");
    inv.kill();
    let _ = std::fs::remove_dir_all(state);
}

#[test]
fn a_destination_that_refuses_keeps_its_deletes_until_it_takes_them() {
    let pg = Postgres::start("refuses");
    let server = Server::shoal("inv-refuses", 0, &[]);
    fill(&server, ["k"].map(String::from));
    // A router in maintenance answers every request with SERVER_ERROR.
    let router = Router::start("refuses", r#"{ "route": "ErrorRoute|maintenance" }"#);
    let state = state_dir("refuses");
    let inv = Invalidator::start(&state, &["--postgres", &pg.conninfo()], &[router.address()], &[]);
    pg.client().execute(invalidation::POSTGRES_EMIT, &[&"k"]).unwrap();
    assert!(eventually(30, || inv.status()["refusals"].as_u64() > Some(0)), "{}", inv.status());
    assert!(
        inv.stderr().contains("maintenance") && inv.stderr().contains("stay in its spool"),
        "{}",
        inv.stderr()
    );
    assert_eq!(inv.status()["destinations"][0]["backlog"], 1, "{} {}", inv.status(), inv.stderr());
    assert!(present(&server, "k"));
    // Back in service: the spooled delete goes through.
    router.rewrite(&format!(
        r#"{{ "pools": {{ "a": {{ "servers": ["{}"] }} }}, "route": {{ "type": "PoolRoute", "pool": "a" }} }}"#,
        server.address()
    ));
    assert!(
        eventually(30, || !present(&server, "k")),
        "delivered after the router recovered: {}",
        inv.stderr()
    );
    // The backlog is counted down once the delivery is confirmed, a moment after the key is gone.
    let backlog = || inv.status()["destinations"][0]["backlog"].clone();
    assert!(eventually(30, || backlog() == 0), "backlog {} after delivery", backlog());
    inv.kill();
    let _ = std::fs::remove_dir_all(state);
}

#[test]
fn a_broadcast_prefix_reaches_every_cluster_behind_one_router() {
    let pg = Postgres::start("broadcast");
    let (east, west) = (Server::shoal("inv-bcast-east", 0, &[]), Server::shoal("inv-bcast-west", 0, &[]));
    let router = Router::start(
        "inv-broadcast",
        &format!(
            r#"{{ "pools": {{ "east": {{ "servers": ["{}"] }}, "west": {{ "servers": ["{}"] }} }},
                 "routes": [ {{ "aliases": ["/east/web/"], "route": {{ "type": "PoolRoute", "pool": "east" }} }},
                             {{ "aliases": ["/west/web/"], "route": {{ "type": "PoolRoute", "pool": "west" }} }} ] }}"#,
            east.address(),
            west.address()
        ),
    );
    for server in [&east, &west] {
        fill(server, ["user:1"].map(String::from));
    }
    let state = state_dir("broadcast");
    let inv = Invalidator::start(
        &state,
        &["--postgres", &pg.conninfo()],
        &[router.address()],
        &["--prefix", "/*/*/"],
    );
    pg.client().execute(invalidation::POSTGRES_EMIT, &[&"user:1"]).unwrap();
    for server in [&east, &west] {
        assert!(
            eventually(30, || !present(server, "user:1")),
            "deleted in {}: {}",
            server.address(),
            inv.stderr()
        );
    }
    inv.kill();
    let _ = std::fs::remove_dir_all(state);
}

#[test]
fn a_full_spool_holds_the_log_and_says_so_until_it_drains() {
    let pg = Postgres::start("full");
    let state = state_dir("full");
    let port = free_port();
    // Nothing listens at the destination yet; its spool may hold 1 MB.
    let inv = Invalidator::start(
        &state,
        &["--postgres", &pg.conninfo()],
        &[format!("127.0.0.1:{port}")],
        &["--backlog-max-mb", "1", "--batch-keys", "500"],
    );
    let key = |t: usize, i: usize| format!("{t}:{i}:{}", "x".repeat(230));
    let mut db = pg.client();
    for t in 0..6 {
        let keys: Vec<String> = (0..1000).map(|i| key(t, i)).collect();
        db.execute(invalidation::POSTGRES_EMIT, &[&keys.join(" ")]).unwrap();
    }
    assert!(eventually(30, || inv.status()["destinations"][0]["full"] == true), "{}", inv.status());
    assert!(
        inv.stderr().contains("is full") && inv.stderr().contains("--backlog-max-mb"),
        "{}",
        inv.stderr()
    );
    let held = inv.status()["transactions"].as_u64().unwrap();
    assert!(held < 6, "the log's position is held: {held} of 6 transactions taken");
    // The destination appears: the spool drains, the rest of the log follows, nothing is lost.
    let server = Server::shoal("inv-full", port, &[]);
    let deleted = || inv.status()["destinations"][0]["delivered"].as_u64() == Some(6000);
    assert!(eventually(30, deleted), "{}", inv.status());
    assert_eq!(inv.status()["destinations"][0]["full"], false);
    drop(server);
    inv.kill();
    let _ = std::fs::remove_dir_all(state);
}

#[test]
fn an_unreachable_postgres_is_reported_with_its_cause_and_state_goes_to_systemds_directory() {
    let dir = state_dir("unreachable");
    std::fs::create_dir_all(&dir).unwrap();
    let systemd = dir.join("var-lib-shoal-invalidator");
    let log = dir.join("stderr");
    // Nothing listens on a free port: the connection is refused.
    let closed = free_port();
    let mut invalidator = Command::new(shoal_bin())
        .args(["invalidator", "--postgres", &format!("host=127.0.0.1 port={closed} user=app dbname=app")])
        .args(["--destination", "127.0.0.1:1"])
        .env("STATE_DIRECTORY", &systemd)
        .current_dir(&dir)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let expected = format!(
        "connecting to PostgreSQL at host=127.0.0.1 port={closed}: Connection refused (os error 111); retrying"
    );
    let said = || std::fs::read_to_string(&log).unwrap_or_default();
    let reported = eventually(30, || said().contains(&expected));
    let _ = invalidator.kill();
    let _ = invalidator.wait();
    assert!(reported, "{:?} should say {expected:?}", said());
    // The spools are in $STATE_DIRECTORY, not in the working directory.
    assert!(systemd.join("spools").is_dir(), "spools under $STATE_DIRECTORY");
    let mut left: Vec<String> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    left.sort();
    assert_eq!(left, ["stderr", "var-lib-shoal-invalidator"], "nothing made in the working directory");
    let help = Command::new(shoal_bin()).args(["invalidator", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("/var/lib/shoal/invalidator") && help.contains("STATE_DIRECTORY"), "{help}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_destination_it_cannot_deliver_to_is_behind_until_its_spool_drains() {
    let state = state_dir("behind");
    std::fs::create_dir_all(&state).unwrap();
    let path = state.join("app.db");
    let db = rusqlite::Connection::open(&path).unwrap();
    db.execute(invalidation::SQLITE_OUTBOX_SCHEMA, []).unwrap();
    let up = Server::shoal("inv-behind-up", 0, &[]);
    // The second destination caches "a" and "b" in a region file, then goes away (nothing
    // listens on its port meanwhile); it comes back warm, so the delete it missed still has
    // something to remove, whenever the spool's next attempt reaches it.
    let region = state.join("down.region");
    let region_arg = region.to_str().unwrap().to_string();
    let gone = Server::shoal("inv-behind-down", 0, &["-e", &region_arg]);
    let down = gone.port;
    fill(&gone, ["a", "b"].map(String::from));
    gone.stop_with("KILL");
    let destinations = [up.address(), format!("127.0.0.1:{down}")];
    let inv =
        Invalidator::start(&state.join("inv"), &["--sqlite", path.to_str().unwrap()], &destinations, &[]);
    let behind = |i: usize| inv.status()["destinations"][i]["behind"].as_bool();
    assert_eq!((behind(0), behind(1)), (Some(false), Some(false)), "nothing sent yet: {}", inv.status());
    fill(&up, ["a"].map(String::from));
    db.execute_batch("BEGIN").unwrap();
    invalidation::emit_sqlite(&db, &["a"]).unwrap();
    db.execute_batch("COMMIT").unwrap();
    assert!(eventually(30, || behind(1) == Some(true)), "{}", inv.status());
    assert!(eventually(30, || !present(&up, "a")), "the destination that is up takes its delete");
    assert_eq!(behind(0), Some(false), "{}", inv.status());
    assert_eq!(inv.status()["destinations"][1]["backlog"], 1, "{}", inv.status());
    // The watcher (every 250 ms) counts it and says so.
    assert!(eventually(30, || inv.status()["destinations"][1]["fell_behind"] == 1), "{}", inv.status());
    let line = format!("shoal_invalidator_destination_behind{{destination=\"127.0.0.1:{down}\"}} 1");
    assert!(inv.metrics().contains(&line), "{}", inv.metrics());
    assert!(
        eventually(30, || inv.stderr().contains(&format!("127.0.0.1:{down} is behind"))),
        "{}",
        inv.stderr()
    );
    // The destination comes back with the keys still cached: it gets the delete, and catches up.
    let back = Server::shoal("inv-behind-down", down, &["-e", &region_arg]);
    assert!(eventually(30, || !present(&back, "a")), "{}", inv.stderr());
    assert!(eventually(30, || behind(1) == Some(false)), "{}", inv.status());
    assert!(eventually(30, || inv.stderr().contains("caught up")), "{}", inv.stderr());
    let status = inv.status();
    assert_eq!(
        (status["destinations"][1]["backlog"].as_u64(), status["destinations"][1]["behind_seconds"].as_f64()),
        (Some(0), Some(0.0)),
        "{status}"
    );
    assert!(present(&back, "b"));
    inv.kill();
    let _ = std::fs::remove_dir_all(state);
}

/// A commit is decoded once its WAL record is flushed, a moment before other sessions can see
/// it (here held there: a synchronous standby that never answers). A delete sent then lets a
/// look-aside reader miss, read the old row and cache it under a valid lease (issue #26): the
/// invalidator deletes only once the commit is visible. Without that, the delete came within
/// milliseconds while the row still read old.
#[test]
fn a_delete_waits_until_its_commit_is_visible_to_readers() {
    let pg = Postgres::start("visible");
    let mut db = pg.client();
    db.batch_execute("CREATE TABLE kv (k int PRIMARY KEY, v int NOT NULL); INSERT INTO kv VALUES (1, 0)")
        .unwrap();
    let server = Server::shoal("inv-visible", 0, &[]);
    fill(&server, ["kv:1".to_string()]);
    let state = state_dir("visible");
    let inv = Invalidator::start(&state, &["--postgres", &pg.conninfo()], &[server.address()], &[]);
    // A synchronous standby that never answers: a commit is flushed (so decoded) and then waits,
    // invisible to other sessions, until the wait is cancelled.
    db.batch_execute("ALTER SYSTEM SET synchronous_standby_names = 'nobody'").unwrap();
    db.batch_execute("SELECT pg_reload_conf()").unwrap();
    db.batch_execute("SET synchronous_commit = local").unwrap();
    // The reload is asynchronous: a session that starts before the postmaster has read the file
    // again commits without waiting (seen under load). A new session that sees the setting
    // started after the re-read, and so does every session after it.
    let conninfo = pg.conninfo();
    let standby_names = |conninfo: &str| {
        let mut fresh = postgres::Client::connect(conninfo, postgres::NoTls).unwrap();
        fresh.query_one("SHOW synchronous_standby_names", &[]).unwrap().get::<_, String>(0)
    };
    assert!(eventually(60, || standby_names(&conninfo) == "nobody"), "the reload took effect");
    let writer = std::thread::spawn(move || {
        let mut db = postgres::Client::connect(&conninfo, postgres::NoTls).unwrap();
        let mut tx = db.transaction().unwrap();
        tx.execute("UPDATE kv SET v = 1 WHERE k = 1", &[]).unwrap();
        invalidation::emit_postgres(&mut tx, &["kv:1"]).unwrap();
        // Flushed, then waits for the standby (cancelled below): committed, invisible meanwhile.
        tx.commit()
    });
    let waiting = |db: &mut postgres::Client| {
        let row = db
            .query_one(
                "SELECT count(*), pg_current_wal_flush_lsn()::text FROM pg_stat_activity \
                 WHERE wait_event = 'SyncRep'",
                &[],
            )
            .unwrap();
        (row.get::<_, i64>(0) == 1).then(|| row.get::<_, String>(1))
    };
    assert!(eventually(60, || waiting(&mut db).is_some()), "the writer waits for the standby");
    let flushed = waiting(&mut db).expect("still waiting");
    // The commit is decoded and sent to the invalidator (its walsender is past it).
    let sent = |db: &mut postgres::Client| {
        db.query_one(
            "SELECT count(*) FROM pg_stat_replication WHERE sent_lsn >= $1::text::pg_lsn",
            &[&flushed],
        )
        .unwrap()
        .get::<_, i64>(0)
            == 1
    };
    assert!(eventually(60, || sent(&mut db)), "the invalidator's walsender sent the commit");
    // Its SQL connection ends while it waits (as a link cut mid-query fails it): a new one is
    // made and the batch held, not read again from the slot (issue #26).
    let end_sql = |db: &mut postgres::Client| {
        db.query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE backend_type = 'client backend' \
             AND pid <> pg_backend_pid() AND query LIKE '%pg_current_snapshot()::text'",
            &[],
        )
        .unwrap()
        .get::<_, i64>(0)
            >= 1
    };
    assert!(eventually(60, || end_sql(&mut db)), "the invalidator's SQL connection was ended");
    // Deleted ⇒ visible, for as long as the commit stays invisible.
    let old = |db: &mut postgres::Client| {
        db.query_one("SELECT v FROM kv WHERE k = 1", &[]).unwrap().get::<_, i32>(0) == 0
    };
    let until = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while std::time::Instant::now() < until {
        assert!(old(&mut db), "the commit is still invisible");
        assert!(
            present(&server, "kv:1"),
            "a delete came while its commit was invisible to readers: {}",
            inv.stderr()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    db.batch_execute("SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE wait_event = 'SyncRep'")
        .unwrap();
    writer.join().unwrap().unwrap();
    assert!(!old(&mut db), "visible once the wait is cancelled");
    assert!(eventually(60, || !present(&server, "kv:1")), "then deleted: {}", inv.stderr());
    let said = inv.stderr();
    assert!(said.contains("connecting again, the batch waiting"), "{said}");
    assert!(!said.contains("nothing after the last confirmed position is lost"), "read again: {said}");
    inv.kill();
    let _ = std::fs::remove_dir_all(state);
}
