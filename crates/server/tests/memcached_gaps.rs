//! What memcached's own suite (`t/*.t`) checks and a client or operator can observe, tested
//! here without the suite: reads of items stored expired or flushed count in `get_expired` and
//! `get_flushed`, the restart metadata file beside `-e`, and tiny memory limits (the release
//! binary, on loopback).

#[path = "../../client/tests/common/mod.rs"]
mod common;

use common::Server;

/// The value of `name` in a `stats` answer.
fn stat(server: &Server, name: &str) -> String {
    let stats = String::from_utf8_lossy(&server.raw(b"stats\r\n", b"END\r\n")).into_owned();
    let prefix = format!("STAT {name} ");
    stats.lines().find_map(|l| l.strip_prefix(&prefix).map(str::to_owned)).unwrap_or_default()
}

#[test]
fn reads_of_items_stored_expired_or_flushed_are_counted_as_memcached_counts_them() {
    let server = Server::shoal("gaps-expired", 0, &[]);
    // An absolute exptime in 1970 and a negative one: stored (memcached stores them too), then
    // found expired by the read that follows. Each pair travels in one write, so the reads
    // come long before the two seconds after which the dead segment may be reclaimed.
    let answer = server.raw(b"set old 0 2678400 1\r\nx\r\nget old\r\n", b"END\r\n");
    assert_eq!(answer, b"STORED\r\nEND\r\n");
    let answer = server.raw(b"set neg 0 -1 1\r\nx\r\nget neg\r\n", b"END\r\n");
    assert_eq!(answer, b"STORED\r\nEND\r\n");
    assert_eq!(stat(&server, "get_expired"), "2");
    assert_eq!(stat(&server, "get_flushed"), "0");

    let answer = server.raw(b"set live 0 0 1\r\nx\r\nflush_all\r\nget live\r\n", b"END\r\n");
    assert_eq!(answer, b"STORED\r\nOK\r\nEND\r\n");
    assert_eq!(stat(&server, "get_flushed"), "1");
    // A dead item is never a hit.
    assert_eq!(stat(&server, "get_hits"), "0");
}

#[test]
fn a_store_over_a_flushed_item_reclaims_it() {
    // memcached's issue_183.t, on a server with nothing else dead.
    let server = Server::shoal("gaps-reclaimed", 0, &[]);
    let answer =
        server.raw(b"set again 0 0 1\r\nx\r\nflush_all\r\nset again 0 0 1\r\ny\r\n", b"OK\r\nSTORED\r\n");
    assert_eq!(answer, b"STORED\r\nOK\r\nSTORED\r\n");
    assert_eq!(stat(&server, "reclaimed"), "1");
}

/// Reads what a server sends on `stream` until it closes the connection (or 60 s pass).
fn read_to_close(stream: &mut std::net::TcpStream) -> Vec<u8> {
    use std::io::Read;
    stream.set_read_timeout(Some(std::time::Duration::from_secs(60))).unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    answer
}

#[test]
fn read_buf_mem_limit_caps_the_answers_a_connection_holds() {
    use std::io::Write;
    // memcached's conn-limits.t: 1 MB over 32 workers allows a connection 28 answers unsent.
    let server = Server::shoal("gaps-answers", 0, &["-o", "read_buf_mem_limit=1", "-t", "32", "-R", "500"]);
    let keys = vec!["foo"; 500].join(" ");
    let answer = server.raw(format!("get {keys}\r\n").as_bytes(), b"\r\n");
    assert_eq!(answer, b"SERVER_ERROR out of memory writing get response\r\n");
    assert_eq!(stat(&server, "response_obj_oom"), "1");
    // Within the limit, a multiget answers as ever.
    let keys = vec!["foo"; 20].join(" ");
    assert_eq!(server.raw(format!("get {keys}\r\n").as_bytes(), b"\r\n"), b"END\r\n");

    // 500 pipelined requests in one write: the connection is closed before answering them
    // all (what the server read before the 29th unsent answer may have gone out).
    let mut pipelined = std::net::TcpStream::connect(server.address()).unwrap();
    pipelined.write_all("mg foo v\r\n".repeat(500).as_bytes()).unwrap();
    let answered = read_to_close(&mut pipelined);
    assert!(answered.len() < "EN\r\n".len() * 500, "{} bytes answered", answered.len());
    assert_eq!(stat(&server, "response_obj_oom"), "2");

    // Without the option, no limit.
    let plain = Server::shoal("gaps-answers-plain", 0, &["-t", "32"]);
    let keys = vec!["foo"; 500].join(" ");
    assert_eq!(plain.raw(format!("get {keys}\r\n").as_bytes(), b"\r\n"), b"END\r\n");
    assert_eq!(stat(&plain, "response_obj_oom"), "0");
}

#[test]
fn dash_m_2_starts_and_dash_capital_m_refuses_stores_once_full() {
    // memcached's dash-M.t: the smallest -m, and -M (no eviction) answering out of memory.
    let server = Server::shoal("gaps-dash-m", 0, &["-M", "-m", "2"]);
    let value = "B".repeat(8192);
    let mut stored = 0;
    loop {
        let request = format!("set dash{stored} 0 0 {}\r\n{value}\r\n", value.len());
        let answer = server.raw(request.as_bytes(), b"\r\n");
        if answer != b"STORED\r\n" {
            assert_eq!(answer, b"SERVER_ERROR out of memory storing object\r\n");
            break;
        }
        stored += 1;
        assert!(stored < 10_000, "-m 2 never filled");
    }
    assert!(stored > 100, "only {stored} items of 8 KiB in -m 2");
    assert_eq!(stat(&server, "store_no_memory"), "1");
    assert_eq!(stat(&server, "evictions"), "0");
    for i in 0..stored {
        let answer = server.raw(format!("get dash{i}\r\n").as_bytes(), b"END\r\n");
        assert!(answer.starts_with(format!("VALUE dash{i} 0 8192\r\n").as_bytes()), "dash{i} lost");
    }
}

#[test]
fn watch_evictions_logs_each_item_a_store_evicts() {
    use std::io::{BufRead, BufReader, Write};
    let server = Server::shoal("gaps-watch-evictions", 0, &["-m", "4"]);
    let mut watcher = std::net::TcpStream::connect(server.address()).unwrap();
    watcher.set_read_timeout(Some(std::time::Duration::from_secs(60))).unwrap();
    watcher.write_all(b"watch evictions\r\n").unwrap();
    let mut lines = BufReader::new(watcher);
    let mut line = String::new();
    lines.read_line(&mut line).unwrap();
    assert_eq!(line, "OK\r\n");
    // Far more than -m 4 holds, in one connection's writes.
    let value = "B".repeat(11000);
    let mut fill = Vec::new();
    for i in 0..1000 {
        fill.extend_from_slice(format!("set n,foo{i} 0 0 {} noreply\r\n{value}\r\n", value.len()).as_bytes());
    }
    fill.extend_from_slice(b"version\r\n");
    assert!(server.raw(&fill, b"\r\n").starts_with(b"VERSION "));
    let evictions: u64 = stat(&server, "evictions").parse().unwrap();
    assert!(evictions > 0);
    // One line per evicted item, in memcached's format.
    line.clear();
    lines.read_line(&mut line).unwrap();
    assert!(line.starts_with("ts="), "{line:?}");
    assert!(line.contains(" type=eviction key=n%2Cfoo") && line.contains(" fetch=no ttl=-1 "), "{line:?}");
}

#[test]
fn the_restart_metadata_file_follows_memcacheds_rules() {
    let dir = std::env::temp_dir().join(format!("shoal-gaps-restart-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let region = dir.join("region");
    let meta = dir.join("region.meta");
    let region_arg = region.to_str().unwrap();

    // An empty metadata file stops the start before anything is created (memcached aborts).
    std::fs::write(&meta, b"").unwrap();
    let mut refused = std::process::Command::new(common::shoal_bin())
        .args(["server", "-p", "-1", "-U", "0", "-l", "127.0.0.1", "-e", region_arg])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    assert!(common::eventually(60, || refused.try_wait().unwrap().is_some()), "it started");
    assert!(!refused.wait().unwrap().success());
    assert!(!region.exists(), "nothing created");
    std::fs::remove_file(&meta).unwrap();

    let start = |m: &str| Server::shoal("gaps-restart", 0, &["-m", m, "-e", region_arg]);
    let set = |s: &Server| assert_eq!(s.raw(b"set kept 0 0 1\r\nx\r\n", b"\r\n"), b"STORED\r\n");
    let has = |s: &Server| s.raw(b"get kept\r\n", b"END\r\n").starts_with(b"VALUE kept");

    // A graceful stop writes it; the next start with the same settings is warm and removes it.
    let server = start("8");
    set(&server);
    server.stop_with("USR1");
    assert!(std::fs::read_to_string(&meta).unwrap().starts_with("Tshoal\nKmaxbytes 8388608\n"));
    let server = start("8");
    assert!(has(&server), "warm restart");
    assert!(!meta.exists(), "read once");

    // Changed settings in it: a clean start (memcached's rule), not a refusal.
    server.stop_with("USR1");
    let server = start("16");
    assert!(!has(&server), "a clean cache");
    assert_eq!(stat(&server, "limit_maxbytes"), (16 << 20).to_string());

    // Without it (a stop that was not graceful), the region itself restarts warm.
    set(&server);
    server.stop_with("TERM");
    assert!(!meta.exists());
    let server = start("16");
    assert!(has(&server), "Shoal's own warm restart");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// memcached's `item_size_max.t`: `-I` past 8 MiB, up to half of `-m`. `-m 64 -I 32m` is the
/// tightest memcached starts with (the region is raised to hold two 32 MiB segments), and a
/// 20 MiB value travels over the network both ways and is read through shared memory, by the
/// client's local reads and by a region reader of its own.
#[test]
fn a_20_mib_value_is_stored_and_read_over_the_network_and_through_shared_memory() {
    use shoal_client::{Client, Options};
    let server = Server::shoal("gaps-large-item", 0, &["-m", "64", "-I", "32m"]);
    let settings = String::from_utf8(server.raw(b"stats settings\r\n", b"END\r\n")).unwrap();
    assert!(settings.contains("STAT item_size_max 33554432\r\n"), "{settings}");
    let value: Vec<u8> = (0..20usize << 20).map(|i| (i % 251) as u8 ^ (i >> 16) as u8).collect();

    let mut network =
        Client::connect(&server.address(), Options { local: false, ..Options::default() }).unwrap();
    network.set(b"big", &value, 5, 0).unwrap();
    let item = network.get(b"big").unwrap().expect("a hit over the network");
    assert!(item.value == value && item.flags == 5, "the network read differs");

    let mut local =
        Client::connect(&server.address(), Options { local: true, ..Options::default() }).unwrap();
    assert!(local.is_local());
    let item = local.get(b"big").unwrap().expect("a hit through shared memory");
    assert!(item.value == value && item.flags == 5, "the local read differs");
    let reader = shoal_region::Reader::open(local.local_region_path().unwrap()).unwrap();
    let mut got = Vec::new();
    let info = reader.get(b"big", &mut got).unwrap().hit().expect("a hit in the region");
    assert!(got == value && info.value_len == 20 << 20 && info.cas == item.cas, "the region read differs");

    // Past the limit: refused as memcached refuses it, which also removes the old value (a
    // failed `set` leaves no stale data).
    let mut over = format!("set big 0 0 {}\r\n", (32 << 20) + 1).into_bytes();
    over.resize(over.len() + (32 << 20) + 1, b'x');
    over.extend_from_slice(b"\r\n");
    assert_eq!(server.raw(&over, b"\r\n"), b"SERVER_ERROR object too large for cache\r\n");
    assert!(network.get(b"big").unwrap().is_none());
}

/// The value of `name` in a `stats settings` answer.
fn setting(server: &Server, name: &str) -> String {
    let stats = String::from_utf8_lossy(&server.raw(b"stats settings\r\n", b"END\r\n")).into_owned();
    let prefix = format!("STAT {name} ");
    stats.lines().find_map(|l| l.strip_prefix(&prefix).map(str::to_owned)).unwrap_or_default()
}

/// Stores `count` values of 64 KiB (memcached's dyn-maxbytes.t and lru-maintainer.t size)
/// under `prefix<n>` with `exptime`, one write, and checks every one was stored.
fn store_64k(server: &Server, prefix: &str, count: usize, exptime: u32) {
    let value = "B".repeat(66560);
    let mut requests = Vec::new();
    for i in 0..count {
        requests.extend_from_slice(format!("set {prefix}{i} 0 {exptime} 66560\r\n{value}\r\n").as_bytes());
    }
    let answers = server.raw(&requests, "STORED\r\n".repeat(count).as_bytes());
    assert_eq!(answers, "STORED\r\n".repeat(count).as_bytes(), "{prefix}: every store");
}

#[test]
fn cache_memlimit_raises_the_limit_past_dash_m_within_memory_max() {
    // memcached's dyn-maxbytes.t, with the room to grow named (the default is 4 × -m, at
    // least 64 MB).
    let server = Server::shoal("gaps-memlimit", 0, &["-m", "3", "--memory-max", "16"]);
    assert_eq!(setting(&server, "memory_max"), (16 << 20).to_string());
    let file = std::path::PathBuf::from(setting(&server, "memory_file"));
    let meta = std::fs::metadata(&file).unwrap();
    assert!(meta.len() >= 16 << 20, "the region file has the room: {} bytes", meta.len());
    {
        use std::os::unix::fs::MetadataExt;
        assert!(meta.blocks() * 512 < 8 << 20, "the room costs no memory: {} bytes", meta.blocks() * 512);
    }
    store_64k(&server, "key", 40, 0);
    let evicted = stat(&server, "evictions");
    assert_ne!(evicted, "0", "-m 3 is full");

    assert_eq!(server.raw(b"cache_memlimit 8\r\n", b"\r\n"), b"OK\r\n");
    assert_eq!(setting(&server, "maxbytes"), (8 << 20).to_string());
    assert_eq!(stat(&server, "limit_maxbytes"), (8 << 20).to_string());
    assert_eq!(server.raw(b"cache_memlimit 16\r\n", b"\r\n"), b"OK\r\n");
    // 16 MiB of segments hold what -m 3 could not: nothing more is evicted.
    store_64k(&server, "more", 150, 0);
    assert_eq!(stat(&server, "evictions"), evicted);
    assert!(server.raw(b"get more0\r\n", b"END\r\n").starts_with(b"VALUE more0 0 66560\r\n"));

    // Past the room: memcached's answer for a limit it cannot set, and the limit stays.
    let refused = b"MEMLIMIT_ADJUST_FAILED out of bounds or unable to adjust\r\n";
    assert_eq!(server.raw(b"cache_memlimit 64\r\n", b"\r\n"), refused);
    assert_eq!(setting(&server, "maxbytes"), (16 << 20).to_string());
    // Back down: whole segments are evicted and given back.
    assert_eq!(server.raw(b"cache_memlimit 8\r\n", b"\r\n"), b"OK\r\n");
    assert_ne!(stat(&server, "evictions"), evicted);
    assert_eq!(
        server.raw(b"cache_memlimit 7\r\n", b"\r\n"),
        b"MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m\r\n"
    );
}

#[test]
fn temporary_ttl_keeps_short_lived_items_through_a_flood_of_long_lived_ones() {
    // memcached's lru-maintainer.t, TEMP_LRU part.
    let plain = Server::shoal("gaps-temp-off", 0, &["-m", "2"]);
    assert_eq!((setting(&plain, "temp_lru"), setting(&plain, "temporary_ttl")), ("no".into(), "61".into()));
    store_64k(&plain, "canary", 1, 30);
    store_64k(&plain, "key", 100, 3600);
    assert_eq!(plain.raw(b"get canary0\r\n", b"END\r\n"), b"END\r\n", "without it, FIFO evicts the canary");

    let server =
        Server::shoal("gaps-temp", 0, &["-m", "2", "-o", "lru_maintainer,lru_crawler,temporary_ttl=61"]);
    assert_eq!(
        (setting(&server, "temp_lru"), setting(&server, "temporary_ttl")),
        ("yes".into(), "61".into())
    );
    store_64k(&server, "canary", 1, 30);
    store_64k(&server, "key", 100, 3600);
    assert_ne!(stat(&server, "evictions"), "0");
    let canary = server.raw(b"get canary0\r\n", b"END\r\n");
    assert!(canary.starts_with(b"VALUE canary0 0 66560\r\n"), "the temporary item was evicted");
}
