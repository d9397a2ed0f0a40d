//! Consistency under faults, at the router (docs/design/faults.md): the issue's reproduction —
//! three `shoal server -e <file>` behind a router, one killed with -9, the keys it owns deleted
//! or changed through the router while it is down, then restarted on the same file — under
//! `FailoverWithExptimeRoute` with a Gutter pool, a plain `PoolRoute`, two routers, and a
//! router killed during the outage; a full spool; spool files that are damaged or foreign.
//! No value changed during the outage is ever read again, through a router or locally.

#[path = "../../client/tests/common/mod.rs"]
mod common;

use common::router::{pool_route, Router};
use common::{eventually, free_port, Server};
use shoal_client::{Client, Options};
use std::path::PathBuf;

/// Seconds the restarted server hides what it kept (`--rejoin-hold`): long enough for the
/// routers to notice it and drain their spools on a loaded machine.
const HOLD: &str = "10";

fn network(address: &str) -> Client {
    Client::connect(address, Options { local: false, ..Options::default() }).unwrap()
}

/// A client that reads `server`'s region through shared memory.
fn local(server: &Server) -> Client {
    let mut c = Client::connect(&server.address(), Options::default()).unwrap();
    assert!(c.is_local(), "a client on the server's host reads its region locally");
    c
}

/// One `STAT <name> <value>` of a server's `stats shoal`.
fn stat(address: &str, name: &str) -> String {
    // The rejoin hold's fields are Shoal's own, in `stats shoal`.
    let stats = String::from_utf8(common::raw(address, b"stats shoal\r\n", b"END\r\n")).unwrap();
    let prefix = format!("STAT {name} ");
    stats.lines().find_map(|l| l.strip_prefix(&prefix).map(str::to_string)).unwrap_or_default()
}

/// Three `shoal server -e <file> --rejoin-hold`, each on a port of its own for life.
struct Pool {
    test: String,
    dir: PathBuf,
    servers: Vec<Option<Server>>,
    ports: Vec<u16>,
}

impl Pool {
    fn start(test: &str) -> Pool {
        let dir = std::env::temp_dir().join(format!("shoal-faults-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut pool = Pool { test: test.into(), dir, servers: Vec::new(), ports: Vec::new() };
        for i in 0..3 {
            pool.ports.push(free_port());
            pool.servers.push(None);
            pool.restart(i);
        }
        pool
    }

    /// Starts server `i` on its port and region file (a warm restart if it ran before).
    fn restart(&mut self, i: usize) {
        let region = self.dir.join(format!("{i}.region"));
        let args = ["-e", region.to_str().unwrap(), "-m", "16", "--rejoin-hold", HOLD];
        self.servers[i] = Some(Server::shoal(&format!("{}-{i}", self.test), self.ports[i], &args));
    }

    /// Kills server `i` with SIGKILL: its region is left unclean.
    fn kill(&mut self, i: usize) {
        drop(self.servers[i].take());
    }

    fn server(&self, i: usize) -> &Server {
        self.servers[i].as_ref().expect("running")
    }

    fn addresses(&self) -> Vec<String> {
        self.ports.iter().map(|p| format!("127.0.0.1:{p}")).collect()
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.servers.clear();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// What one run of the reproduction varies.
struct Outage {
    gutter: bool,
    routers: usize,
    kill_router: bool,
}

/// The reproduction: keys set, their owner killed, two thirds of its keys deleted (spread
/// over the routers) and a sixth changed while it is down, the owner restarted warm. Checked
/// right after the restart, once the routers have caught it up, and after its hold: no
/// changed key reads its old value through any router or locally; the untouched ones are
/// still there after the hold.
fn outage(test: &str, how: Outage) {
    let mut pool = Pool::start(test);
    let servers = pool.addresses();
    let list = servers.iter().map(|a| format!("\"{a}\"")).collect::<Vec<_>>().join(", ");
    let gutter = how.gutter.then(|| Server::shoal(&format!("{test}-gutter"), 0, &[]));
    let main =
        format!(r#""main": {{ "servers": [{list}], "server_timeout": 1000, "connect_timeout": 1000 }}"#);
    let config = match &gutter {
        Some(g) => format!(
            r#"{{ "pools": {{ {main}, "gutter": {{ "servers": ["{}"] }} }},
                 "route": {{ "type": "FailoverWithExptimeRoute", "normal": {}, "failover": {},
                             "failover_exptime": 10 }} }}"#,
            g.address(),
            pool_route("main"),
            pool_route("gutter")
        ),
        None => format!(r#"{{ "pools": {{ {main} }}, "route": {} }}"#, pool_route("main")),
    };
    let mut routers: Vec<Router> =
        (0..how.routers).map(|r| Router::start(&format!("{test}-{r}"), &config)).collect();
    let placement = shoal_route::Placement::from_strings(shoal_route::Hashing::Jump, &servers).unwrap();
    let keys: Vec<String> = (0..300).map(|i| format!("k{i}")).collect();
    let mut c = routers[0].client();
    for key in &keys {
        assert!(eventually(30, || c.set(key.as_bytes(), b"old", 0, 0).is_ok()), "set {key}");
    }
    let owned: Vec<&String> = keys.iter().filter(|k| placement.owner(k.as_bytes()) == 0).collect();
    assert!(owned.len() >= 30, "server 0 owns enough keys: {}", owned.len());
    let (deleted, rest) = owned.split_at(owned.len() * 2 / 3);
    let (changed, kept) = rest.split_at(rest.len() / 2);

    pool.kill(0);
    let mut clients: Vec<Client> = routers.iter().map(Router::client).collect();
    for (n, key) in deleted.iter().enumerate() {
        // Gutter takes the delete; a plain pool answers an error: spooled either way.
        let _ = clients[n % how.routers].delete(key.as_bytes());
    }
    for (n, key) in changed.iter().enumerate() {
        let _ = clients[n % how.routers].set(key.as_bytes(), b"new", 0, 0);
    }
    for router in &routers {
        assert!(
            eventually(30, || router.stat("spool_pending").parse::<u64>().unwrap_or(0) > 0),
            "the router keeps what server 0 missed"
        );
    }
    if how.kill_router {
        let mut killed = routers.remove(0);
        killed.kill();
        let dir = killed.dir.clone();
        std::mem::forget(killed); // its directory (config, spool) is the next router's
        routers.insert(0, Router::start_in(dir, free_port()));
    }

    pool.restart(0);
    let addresses: Vec<String> = routers.iter().map(Router::address).collect();
    let no_old_value = |when: &str| {
        let mut readers: Vec<(String, Client)> = addresses.iter().map(|a| (a.clone(), network(a))).collect();
        readers.push(("a local reader".into(), local(pool.server(0))));
        for (who, reader) in &mut readers {
            for key in deleted.iter().chain(changed) {
                // A read may fail while the server is caught up (a plain pool); never the old value.
                if let Ok(Some(item)) = reader.get(key.as_bytes()) {
                    assert_ne!(item.value, b"old", "{key} read stale through {who} {when}");
                }
            }
        }
    };
    no_old_value("right after the restart");
    for router in &routers {
        assert!(
            eventually(30, || {
                let stats = router.raw(b"stats\r\n", b"END\r\n");
                router.stat("spool_pending") == "0" && !stats.contains(" behind ") && !stats.contains(" tko ")
            }),
            "the router catches server 0 up"
        );
    }
    no_old_value("once the routers caught it up");
    let server = pool.server(0).address();
    assert!(
        eventually(40, || stat(&server, "rejoin_hold_remaining") == "0"),
        "the hold ends ({})",
        stat(&server, "previous_stop")
    );
    no_old_value("after the hold");
    // What nobody changed came back with the warm restart.
    let (mut near, mut through) = (local(pool.server(0)), routers[0].client());
    for key in kept {
        assert_eq!(near.get(key.as_bytes()).unwrap().map(|i| i.value), Some(b"old".to_vec()), "{key} kept");
        assert_eq!(through.get(key.as_bytes()).unwrap().map(|i| i.value), Some(b"old".to_vec()), "{key}");
    }
}

#[test]
fn gutter_and_a_warm_restart_serve_no_deleted_key() {
    outage("gutter", Outage { gutter: true, routers: 1, kill_router: false });
}

#[test]
fn a_plain_pool_and_a_warm_restart_serve_no_deleted_key() {
    outage("plain", Outage { gutter: false, routers: 1, kill_router: false });
}

#[test]
fn two_routers_each_with_different_deletes_serve_no_deleted_key() {
    outage("two", Outage { gutter: true, routers: 2, kill_router: false });
}

#[test]
fn a_router_killed_during_the_outage_delivers_what_it_spooled_after_its_restart() {
    outage("router-kill", Outage { gutter: true, routers: 1, kill_router: true });
}

/// `<dir>/spool/<file>.spool` and its `.address`, as a router left them.
fn leave_spool(dir: &std::path::Path, file: &str, address: &str, bytes: &[u8]) {
    let spool = dir.join("spool");
    std::fs::create_dir_all(&spool).unwrap();
    std::fs::write(spool.join(format!("{file}.spool")), bytes).unwrap();
    std::fs::write(spool.join(format!("{file}.address")), address).unwrap();
}

/// A spool file's name for `address`, as the spool names them.
fn spool_name(address: &str) -> String {
    address.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect()
}

fn router_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("shoal-router-faults-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn a_change_a_full_spool_cannot_keep_is_an_error_and_counted() {
    let dir = router_dir("full");
    // Nothing listens at `down`; its spool was left holding just under 1 MiB of deletes.
    let down = format!("127.0.0.1:{}", free_port());
    // One record of 100 001 deletes, 16 bytes short of 1 MiB: no other record fits.
    let deletes = "delete x\r\n".repeat(100_000);
    let body_len = (1 << 20) - 16 - format!("{} 100001 0\n", 1 << 20).len();
    let body = format!("{deletes}delete {}\r\n", "y".repeat(body_len - deletes.len() - "delete \r\n".len()));
    let record = format!("{} 100001 0\n{body}", body.len());
    assert_eq!(record.len(), (1 << 20) - 16);
    leave_spool(&dir, &spool_name(&down), &down, record.as_bytes());
    std::fs::write(
        dir.join("config.json"),
        format!(
            r#"{{ "pools": {{ "A": {{ "servers": ["{down}"], "server_timeout": 200, "connect_timeout": 200 }} }},
                 "route": {} }}"#,
            pool_route("A")
        ),
    )
    .unwrap();
    let router = Router::start_in_with_args(dir, free_port(), &["--spool-max-mb", "1"]);
    let mut c = router.client();
    match c.set(b"k", b"v", 0, 0) {
        Err(shoal_client::Error::Server(why)) => {
            assert!(why.contains("spool") && why.contains("full"), "{why}")
        }
        other => panic!("a change the spool cannot keep is an error: {other:?}"),
    }
    assert_eq!(router.stat("spool_full"), "1");
    assert_eq!(router.stat("spool_pending"), "100001", "nothing in the spool was dropped");
}

#[test]
fn damaged_truncated_and_foreign_spool_files_are_refused_by_name_and_the_router_serves() {
    let server = Server::shoal("faults-bad-spool", 0, &[]);
    let dir = router_dir("bad");
    let elsewhere = format!("127.0.0.1:{}", free_port());
    // Damaged: a header that does not parse. Foreign: named for one address, holding another's.
    leave_spool(&dir, &spool_name(&elsewhere), &elsewhere, b"garbage that is no record\ndelete a\r\n");
    leave_spool(&dir, "127_0_0_1_1", &elsewhere, b"10 1 0\ndelete b\r\n");
    // Truncated: a whole record for the live server, then one cut short.
    network(&server.address()).set(b"a", b"1", 0, 0).unwrap();
    leave_spool(&dir, &spool_name(&server.address()), &server.address(), b"10 1 0\ndelete a\r\n10 1 0\ndel");
    std::fs::write(
        dir.join("config.json"),
        format!(
            r#"{{ "pools": {{ "A": {{ "servers": ["{}"] }} }}, "route": {} }}"#,
            server.address(),
            pool_route("A")
        ),
    )
    .unwrap();
    let router = Router::start_in_with_args(dir.clone(), free_port(), &[]);
    let mut c = router.client();
    assert!(
        eventually(30, || network(&server.address()).get(b"a").unwrap().is_none()),
        "the whole record delivered"
    );
    c.set(b"k", b"v", 0, 0).unwrap();
    assert_eq!(c.get(b"k").unwrap().unwrap().value, b"v", "the router serves");
    assert_eq!(router.stat("spool_files_refused"), "2");
    let spool = dir.join("spool");
    let damaged = spool.join(format!("{}.spool", spool_name(&elsewhere)));
    let foreign = spool.join("127_0_0_1_1.spool");
    let torn = spool.join(format!("{}.spool", spool_name(&server.address())));
    let stderr = std::fs::read_to_string(dir.join("stderr")).unwrap();
    for (file, why) in [
        (&damaged, "from byte 0 on has a header that does not parse"),
        (&foreign, "it is for"),
        (&torn, "cut short"),
    ] {
        let named = stderr.lines().any(|l| l.contains(&file.display().to_string()) && l.contains(why));
        assert!(named, "{} is named with {why:?}: {stderr}", file.display());
    }
    // Set aside whole, never deleted.
    let refused = std::fs::read(spool.join(format!("{}.spool.refused", spool_name(&elsewhere)))).unwrap();
    assert_eq!(refused, b"garbage that is no record\ndelete a\r\n");
    assert_eq!(std::fs::read(spool.join("127_0_0_1_1.spool.refused")).unwrap(), b"10 1 0\ndelete b\r\n");
    assert_eq!(std::fs::read(torn.with_extension("spool.torn")).unwrap(), b"10 1 0\ndel");
}

/// The router's side of a server's return (docs/design/faults.md, "The window"): a server
/// killed with -9 behind Gutter, keys it owns deleted through the router while it is down,
/// restarted warm. The router must notice it, replay its spool, and only then read it again.
/// Measured (printed, never asserted: a loaded machine is slow, not wrong) from the moment the
/// server listens again: until its spool is drained, until the router's `stats` calls it `up`,
/// and until a read through the router is answered by it. Asserted: no read through the router
/// is answered by it before its spool has drained, and it does come back.
/// `SHOAL_RECOVERY_ROUNDS` outages (default 1) for the figures in docs/BENCHMARKS.md.
#[test]
fn a_returned_server_gets_its_deletes_before_its_reads() {
    use std::time::{Duration, Instant};
    let rounds: usize = std::env::var("SHOAL_RECOVERY_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(1);
    let mut pool = Pool::start("recovery");
    let servers = pool.addresses();
    let list = servers.iter().map(|a| format!("\"{a}\"")).collect::<Vec<_>>().join(", ");
    let gutter = Server::shoal("recovery-gutter", 0, &[]);
    let config = format!(
        r#"{{ "pools": {{ "main": {{ "servers": [{list}], "server_timeout": 1000, "connect_timeout": 1000 }},
                        "gutter": {{ "servers": ["{}"] }} }},
             "route": {{ "type": "FailoverWithExptimeRoute", "normal": {}, "failover": {},
                         "failover_exptime": 10 }} }}"#,
        gutter.address(),
        pool_route("main"),
        pool_route("gutter")
    );
    let router = Router::start("recovery", &config);
    let placement = shoal_route::Placement::from_strings(shoal_route::Hashing::Jump, &servers).unwrap();
    let owned: Vec<String> =
        (0..600).map(|i| format!("r{i}")).filter(|k| placement.owner(k.as_bytes()) == 0).collect();
    let (marker, deleted) = owned.split_first().expect("server 0 owns keys");
    let mut c = router.client();
    // The state `stats` gives server 0 (`up`, `tko`, `behind`).
    let state = || {
        let stats = router.raw(b"stats\r\n", b"END\r\n");
        let prefix = format!("STAT destination {} ", servers[0]);
        let line =
            stats.lines().find_map(|l| l.strip_prefix(&prefix).map(str::to_string)).unwrap_or_default();
        line.split(' ').next().unwrap_or_default().to_string()
    };
    let mut figures = Vec::new();
    for round in 0..rounds {
        let old = format!("old{round}");
        for key in deleted {
            assert!(eventually(30, || c.set(key.as_bytes(), old.as_bytes(), 0, 0).is_ok()), "set {key}");
        }
        pool.kill(0);
        for key in deleted {
            let _ = c.delete(key.as_bytes()); // Gutter takes it; spooled for server 0
        }
        assert!(eventually(60, || state() == "tko"), "server 0 is marked down: {}", state());
        assert_ne!(router.stat("spool_pending"), "0", "the router keeps what server 0 missed");
        pool.restart(0);
        let listening = Instant::now();
        // Written straight to the returned server, never through the router: a read through
        // the router that answers it was answered by server 0.
        let fresh = format!("fresh{round}");
        network(&pool.server(0).address()).set(marker.as_bytes(), fresh.as_bytes(), 0, 0).unwrap();
        let set_at = listening.elapsed();
        let (mut drained, mut up, mut read) = (None, None, None);
        let deadline = Instant::now() + Duration::from_secs(60);
        while read.is_none() || up.is_none() {
            assert!(Instant::now() < deadline, "server 0 came back within 60 s: {}", state());
            let answered =
                c.get(marker.as_bytes()).ok().flatten().is_some_and(|i| i.value == fresh.as_bytes());
            // Read after the get: were the spool not drained now, it was not when the get ran.
            let pending = router.stat("spool_pending");
            let now = listening.elapsed();
            if answered {
                assert_eq!(pending, "0", "server 0 answered a read before its spool drained");
                read.get_or_insert(now);
            }
            if pending == "0" {
                drained.get_or_insert(now);
            }
            if state() == "up" {
                up.get_or_insert(now);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        for key in deleted {
            let item = c.get(key.as_bytes()).unwrap();
            assert!(item.is_none_or(|i| i.value != old.as_bytes()), "{key} read stale");
        }
        let ms = |d: Option<Duration>| d.map_or(-1.0, |d| d.as_secs_f64() * 1000.0);
        figures.push((ms(drained), ms(up), ms(read)));
        eprintln!(
            "recovery round {round}: {} deletes; from listening: marker set at {:.0} ms, spool drained by {:.0} ms, \
             `up` by {:.0} ms, first read answered by it by {:.0} ms",
            deleted.len(),
            set_at.as_secs_f64() * 1000.0,
            ms(drained),
            ms(up),
            ms(read)
        );
    }
    if rounds > 1 {
        let median = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        eprintln!(
            "recovery over {rounds} rounds, medians: drained {:.0} ms, up {:.0} ms, read {:.0} ms; worst read {:.0} ms",
            median(figures.iter().map(|f| f.0).collect()),
            median(figures.iter().map(|f| f.1).collect()),
            median(figures.iter().map(|f| f.2).collect()),
            figures.iter().map(|f| f.2).fold(0.0, f64::max)
        );
    }
}
