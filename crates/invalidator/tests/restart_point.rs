//! The slot's restart point moves about every `--snapshot-every-ms` while commits are
//! confirmed, not only at PostgreSQL's own standby snapshots (every 15 s), so that a stream
//! restarted after a WAN cut re-decodes a second of WAL rather than fifteen (issue #26).
//!
//! Not a timed test: the invalidator logs a snapshot every 200 ms, and the test asks for eight
//! distinct restart points within 60 s while it commits. PostgreSQL alone gives at most five in
//! 60 s (one every 15 s), so it fails on the code before, however loaded the machine.

mod support;

use std::collections::HashSet;
use support::common::Server;
use support::*;

#[test]
fn the_slots_restart_point_moves_with_each_standby_snapshot_the_invalidator_logs() {
    let pg = Postgres::start("restart-point");
    let mut db = pg.client();
    let server = Server::shoal("inv-restart-point", 0, &[]);
    let state = state_dir("restart-point");
    let inv = Invalidator::start(
        &state,
        &["--postgres", &pg.conninfo(), "--slot", "shoal_rp"],
        &[server.address()],
        &["--snapshot-every-ms", "200"],
    );
    let mut seen = HashSet::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut i = 0u64;
    while seen.len() < 8 && std::time::Instant::now() < deadline {
        // Commits for the invalidator to confirm past each snapshot.
        db.execute(shoal_client::invalidation::POSTGRES_EMIT, &[&format!("rp:{i}")]).unwrap();
        i += 1;
        let restart: Option<String> = db
            .query_one("SELECT restart_lsn::text FROM pg_replication_slots WHERE slot_name = 'shoal_rp'", &[])
            .unwrap()
            .get(0);
        seen.extend(restart);
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(
        seen.len() >= 8,
        "the slot's restart point took {} values in 60 s ({i} commits): {seen:?}\n{}",
        seen.len(),
        inv.stderr()
    );
    // The temporary slot does not outlive the invalidator (PostgreSQL drops it with the session).
    inv.kill();
    let count = |db: &mut postgres::Client| -> i64 {
        db.query_one("SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'shoal_rp_snapshot'", &[])
            .unwrap()
            .get(0)
    };
    assert!(support::common::eventually(60, || count(&mut db) == 0), "the temporary slot is left");
    let _ = std::fs::remove_dir_all(state);
}
