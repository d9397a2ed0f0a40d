//! `shoal router` end to end: real `shoal server`s and Debian's memcached behind a router
//! started from a config file, talked to with shoal-client and raw sockets.

#[path = "../../client/tests/common/mod.rs"]
mod common;

use common::router::{pool_route, Router};
use common::{eventually, free_port, scripted_server, shoal_bin, Server};
use shoal_client::{Client, Options};
use std::process::Command;
use std::time::{Duration, Instant};

fn direct(server: &Server) -> Client {
    Client::connect(&server.address(), Options { local: false, ..Options::default() }).unwrap()
}

fn servers(test: &str, n: usize) -> Vec<Server> {
    (0..n).map(|i| Server::shoal(&format!("{test}-{i}"), 0, &[])).collect()
}

fn list(servers: &[Server]) -> String {
    servers.iter().map(|s| format!("\"{}\"", s.address())).collect::<Vec<_>>().join(", ")
}

/// A config of one pool `A` of one server at `address`, with its timeouts in milliseconds.
fn one_server(address: &str, server_timeout: u64, connect_timeout: u64) -> String {
    format!(
        r#"{{ "pools": {{ "A": {{ "servers": ["{address}"], "server_timeout": {server_timeout},
                                "connect_timeout": {connect_timeout} }} }}, "route": {} }}"#,
        pool_route("A")
    )
}

fn jump(servers: &[String]) -> shoal_route::Placement {
    shoal_route::Placement::from_strings(shoal_route::Hashing::Jump, servers).unwrap()
}

#[test]
fn a_pool_route_places_keys_as_the_routing_core_does_and_strips_prefixes() {
    let backends = servers("pool", 3);
    let config = format!(
        r#"// comments and trailing commas, as mcrouter allows
        {{ "pools": {{ "A": {{ "servers": [{}], }} }},
           "routes": [ {{ "aliases": ["/east/web/"], "route": {} }} ], }}"#,
        list(&backends),
        pool_route("A")
    );
    let router = Router::start("pool", &config);
    let mut c = router.client();
    let placement = jump(&backends.iter().map(Server::address).collect::<Vec<_>>());
    for i in 0..200 {
        let key = format!("user:{i}");
        c.set(format!("/east/web/{key}").as_bytes(), key.as_bytes(), 0, 0).unwrap();
        let owner = &backends[placement.owner(key.as_bytes())];
        let stored = direct(owner).get(key.as_bytes()).unwrap();
        assert_eq!(stored.unwrap().value, key.as_bytes(), "stored without the prefix on its owner");
    }
    // A multiget is split by destination and answered in the order asked.
    let keys: Vec<String> = (0..50).map(|i| format!("user:{i}")).collect();
    let line =
        format!("get {}\r\n", keys.iter().map(|k| format!("/east/web/{k}")).collect::<Vec<_>>().join(" "));
    let answer = router.raw(line.as_bytes(), b"END\r\n");
    let order: Vec<&str> = answer
        .lines()
        .filter_map(|l| l.strip_prefix("VALUE "))
        .map(|l| l.split(' ').next().unwrap())
        .collect();
    assert_eq!(order, keys.iter().map(String::as_str).collect::<Vec<_>>());
    // Keys without a prefix take the first route; the route lookup names the owner.
    assert_eq!(c.get(b"user:3").unwrap().unwrap().value, b"user:3");
    let lookup = router.raw(b"get __mcrouter__.route(get,user:3)\r\n", b"END\r\n");
    assert!(lookup.contains(&backends[placement.owner(b"user:3")].address()), "{lookup}");
    // Malformed requests get memcached's answers; the router's own commands answer.
    assert_eq!(router.raw(b"bogus\r\n", b"\r\n"), "ERROR\r\n");
    assert_eq!(router.raw(b"set k 0 0 z\r\n", b"\r\n"), "CLIENT_ERROR bad command line format\r\n");
    assert_eq!(router.raw(b"mn\r\n", b"\r\n"), "MN\r\n");
    assert!(router.raw(b"stats\r\n", b"END\r\n").contains("STAT destination 127.0.0.1:"));
}

#[test]
fn failover_to_gutter_with_a_clamped_ttl_and_tko() {
    let mut main = servers("gutter-main", 2);
    let gutter = Server::memcached("gutter-gutter", 0);
    let config = format!(
        r#"{{ "pools": {{ "main": {{ "servers": [{}], "server_timeout": 300, "connect_timeout": 300 }},
                       "gutter": {{ "servers": ["{}"] }} }},
             "route": {{ "type": "FailoverWithExptimeRoute", "normal": {},
                         "failover": {}, "failover_exptime": 10 }} }}"#,
        list(&main),
        gutter.address(),
        pool_route("main"),
        pool_route("gutter")
    );
    let router = Router::start("gutter", &config);
    let mut c = router.client();
    let placement = jump(&main.iter().map(Server::address).collect::<Vec<_>>());
    drop(main.remove(0));
    let key = (0..).map(|i| format!("k{i}")).find(|k| placement.owner(k.as_bytes()) == 0).unwrap();
    assert_eq!(c.set(key.as_bytes(), b"v", 0, 3600).unwrap(), shoal_client::Stored::Stored, "failed over");
    let ttl = String::from_utf8(gutter.raw(format!("mg {key} t\r\n").as_bytes(), b"\r\n")).unwrap();
    let ttl: i64 = ttl.trim().strip_prefix("HD t").unwrap().parse().unwrap();
    assert!((1..=10).contains(&ttl), "Gutter's copy expires within 10 s: {ttl}");
    assert_eq!(c.get(key.as_bytes()).unwrap().unwrap().value, b"v", "read back from Gutter");
    // After three failures the dead server is TKO: its requests fail over at once.
    c.get(key.as_bytes()).unwrap();
    assert_eq!(router.stat("destinations_tko"), "1");
    let started = Instant::now();
    for _ in 0..20 {
        c.get(key.as_bytes()).unwrap();
    }
    // Bounded by what 20 connect timeouts (300 ms) would take, loosely: a loaded machine is slow.
    assert!(started.elapsed() < Duration::from_secs(6), "TKO fails fast: {:?}", started.elapsed());
}

#[test]
fn a_destination_killed_and_restarted_is_probed_back() {
    let port = free_port();
    let backend = Server::shoal("tko-0", port, &[]);
    let router = Router::start("tko", &one_server(&backend.address(), 300, 300));
    let mut c = router.client();
    // The 300 ms timeouts can pass on a loaded machine before the first connection is up.
    assert!(eventually(30, || c.set(b"k", b"v", 0, 0).is_ok()), "the router reaches the backend");
    drop(backend);
    for _ in 0..4 {
        assert!(matches!(c.get(b"k"), Err(shoal_client::Error::Server(_))), "SERVER_ERROR while down");
    }
    assert_eq!(router.stat("destinations_tko"), "1");
    let _back = Server::shoal("tko-0b", port, &[]);
    // The whole pool is TKO, so it fails open: requests go through before the probe.
    assert_eq!(c.set(b"k", b"open", 0, 0).unwrap(), shoal_client::Stored::Stored);
    assert!(eventually(30, || router.stat("destinations_tko") == "0"), "the probe brings it back");
    assert_eq!(c.set(b"k", b"again", 0, 0).unwrap(), shoal_client::Stored::Stored);
    assert_eq!(c.get(b"k").unwrap().unwrap().value, b"again");
}

#[test]
fn all_sync_writes_everywhere_and_miss_failover_reads_on() {
    let backends = servers("all", 3);
    let config = format!(
        r#"{{ "pools": {{ "A": {{ "servers": [{}] }} }},
             "route": {{ "type": "OperationSelectorRoute",
                         "operation_policies": {{ "get": {{ "type": "MissFailoverRoute", "children": "Pool|A" }},
                                                  "delete": "AllSyncRoute|Pool|A" }},
                         "default_policy": "AllSyncRoute|Pool|A" }} }}"#,
        list(&backends)
    );
    let router = Router::start("all", &config);
    let mut c = router.client();
    c.set(b"everywhere", b"1", 0, 0).unwrap();
    for b in &backends {
        assert_eq!(direct(b).get(b"everywhere").unwrap().unwrap().value, b"1");
    }
    direct(&backends[0]).delete(b"everywhere").unwrap();
    direct(&backends[1]).delete(b"everywhere").unwrap();
    // The client's get is `gets`; the policy names `get`, which raw clients send.
    let answer = router.raw(b"get everywhere\r\n", b"END\r\n");
    assert_eq!(answer, "VALUE everywhere 0 1\r\n1\r\nEND\r\n", "the third child's hit");
    assert!(!c.delete(b"everywhere").unwrap(), "the worst reply, as mcrouter: two children had nothing");
    c.set(b"everywhere", b"2", 0, 0).unwrap();
    assert!(c.delete(b"everywhere").unwrap(), "deleted everywhere");
    assert!(backends.iter().all(|b| direct(b).get(b"everywhere").unwrap().is_none()));
}

#[test]
fn warm_up_copies_warm_hits_into_the_cold_pool() {
    let (cold, warm) = (Server::shoal("warm-cold", 0, &[]), Server::shoal("warm-warm", 0, &[]));
    let config = format!(
        r#"{{ "pools": {{ "cold": {{ "servers": ["{}"] }}, "warm": {{ "servers": ["{}"] }} }},
             "route": {{ "type": "WarmUpRoute", "cold": {}, "warm": {}, "exptime": 100 }} }}"#,
        cold.address(),
        warm.address(),
        pool_route("cold"),
        pool_route("warm")
    );
    let router = Router::start("warm", &config);
    let mut c = router.client();
    direct(&warm).set(b"w", b"from-warm", 4, 0).unwrap();
    let item = c.get(b"w").unwrap().unwrap();
    assert_eq!((item.value.as_slice(), item.flags), (&b"from-warm"[..], 4));
    assert!(eventually(30, || direct(&cold).get(b"w").unwrap().is_some()), "copied into cold");
    // gets answers with cold's CAS, so a cas through the router works.
    direct(&warm).set(b"g", b"x", 0, 0).unwrap();
    let answer = router.raw(b"gets g\r\n", b"END\r\n");
    let cas: u64 = answer.lines().next().unwrap().rsplit(' ').next().unwrap().parse().unwrap();
    assert_eq!(cas, direct(&cold).get(b"g").unwrap().unwrap().cas);
    assert_eq!(c.cas(b"g", b"y", 0, 0, cas).unwrap(), shoal_client::Stored::Stored);
    // A lease-get miss with a token is filled from warm with that token.
    direct(&warm).set(b"l", b"leased", 0, 0).unwrap();
    match c.lease_get(b"l", false).unwrap() {
        shoal_client::Lease::Hit(item) => assert_eq!(item.value, b"leased"),
        other => panic!("{other:?}"),
    }
    assert!(eventually(30, || direct(&cold).get(b"l").unwrap().is_some()), "lease-set into cold");
    // Writes go to cold only.
    c.set(b"only-cold", b"1", 0, 0).unwrap();
    assert!(direct(&warm).get(b"only-cold").unwrap().is_none());
}

#[test]
fn prefix_selector_modify_exptime_null_and_error_routes() {
    let (a, b) = (Server::shoal("prefix-a", 0, &[]), Server::shoal("prefix-b", 0, &[]));
    let config = format!(
        r#"{{ "pools": {{ "a": {{ "servers": ["{}"] }}, "b": {{ "servers": ["{}"] }} }},
             "route": {{ "type": "PrefixSelectorRoute",
                         "policies": {{ "user:": {},
                                        "user:vip:": {{ "type": "ModifyExptimeRoute", "exptime": 5, "target": {} }},
                                        "void:": "NullRoute", "broken:": "ErrorRoute|maintenance" }},
                         "wildcard": {} }} }}"#,
        a.address(),
        b.address(),
        pool_route("a"),
        pool_route("b"),
        pool_route("b")
    );
    let router = Router::start("prefix", &config);
    let mut c = router.client();
    c.set(b"user:1", b"1", 0, 0).unwrap();
    c.set(b"user:vip:1", b"1", 0, 0).unwrap();
    c.set(b"other", b"1", 0, 0).unwrap();
    assert!(direct(&a).get(b"user:1").unwrap().is_some());
    assert!(
        direct(&b).get(b"user:vip:1").unwrap().is_some() && direct(&a).get(b"user:vip:1").unwrap().is_none()
    );
    assert!(direct(&b).get(b"other").unwrap().is_some());
    assert_eq!(b.raw(b"mg user:vip:1 t\r\n", b"\r\n"), b"HD t5\r\n", "ModifyExptimeRoute set the expiry");
    assert_eq!(c.set(b"void:1", b"x", 0, 0).unwrap(), shoal_client::Stored::NotStored);
    assert_eq!(c.get(b"void:1").unwrap(), None);
    assert!(matches!(c.get(b"broken:1"), Err(shoal_client::Error::Server(m)) if m.contains("maintenance")));
}

#[test]
fn reload_applies_a_good_file_and_keeps_serving_through_a_bad_one() {
    let (a, b) = (Server::shoal("reload-a", 0, &[]), Server::shoal("reload-b", 0, &[]));
    let config = |server: &Server| {
        format!(
            r#"{{ "pools": {{ "A": {{ "servers": ["{}"] }} }}, "route": {} }}"#,
            server.address(),
            pool_route("A")
        )
    };
    let router = Router::start("reload", &config(&a));
    let mut c = router.client();
    c.set(b"k", b"on-a", 0, 0).unwrap();
    assert!(direct(&a).get(b"k").unwrap().is_some());
    router.rewrite(&config(&b));
    assert!(eventually(30, || router.stat("config_reloads") == "1"), "reloaded");
    c.set(b"k", b"on-b", 0, 0).unwrap();
    assert_eq!(direct(&b).get(b"k").unwrap().unwrap().value, b"on-b");
    router.rewrite(r#"{ "pools": {}, "route": { "type": "NoSuchRoute" } }"#);
    assert!(eventually(30, || router.stat("config_reload_failures") == "1"), "the bad file is refused");
    c.set(b"k2", b"still-b", 0, 0).unwrap();
    assert_eq!(direct(&b).get(b"k2").unwrap().unwrap().value, b"still-b", "the last good config serves");
}

#[test]
fn broadcast_deletes_are_spooled_and_survive_a_router_kill() {
    let port = free_port();
    let (east, west) = (Server::shoal("spool-east", 0, &[]), Server::shoal("spool-west", port, &[]));
    let config = format!(
        r#"{{ "pools": {{ "east": {{ "servers": ["{}"] }}, "west": {{ "servers": ["127.0.0.1:{port}"], "connect_timeout": 200 }} }},
             "routes": [ {{ "aliases": ["/east/c/"], "route": {} }}, {{ "aliases": ["/west/c/"], "route": {} }} ] }}"#,
        east.address(),
        pool_route("east"),
        pool_route("west")
    );
    let mut router = Router::start("spool", &config);
    direct(&east).set(b"gone", b"1", 0, 0).unwrap();
    drop(west);
    let mut c = router.client();
    for i in 0..20 {
        c.delete(format!("/*/*/k{i}").as_bytes()).unwrap();
    }
    assert!(c.delete(b"/*/*/gone").unwrap(), "accepted once spooled");
    assert!(
        eventually(30, || direct(&east).get(b"gone").unwrap().is_none()),
        "delivered to the live cluster"
    );
    assert!(eventually(30, || router.stat("spool_pending") == "21"), "the dead cluster's deletes wait");
    router.kill();
    let west = Server::shoal("spool-west-back", port, &[]);
    direct(&west).set(b"gone", b"stale", 0, 0).unwrap();
    let dir = router.dir.clone();
    std::mem::forget(router); // the next router delivers the spool left in its directory
    let router = Router::start_in(dir, free_port());
    assert!(eventually(30, || direct(&west).get(b"gone").unwrap().is_none()), "replayed after the restart");
    assert!(eventually(30, || router.stat("spool_pending") == "0"));
}

#[test]
fn validate_names_what_is_unsupported_and_where() {
    let dir = std::env::temp_dir().join(format!("shoal-router-validate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let check = |name: &str, config: &str| -> (bool, String) {
        let path = dir.join(name);
        std::fs::write(&path, config).unwrap();
        let out = Command::new(shoal_bin()).args(["router", "--validate"]).arg(&path).output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout),
        )
    };
    let (ok, text) =
        check("good.json", r#"{ "pools": { "A": { "servers": ["127.0.0.1:1"] } }, "route": "NullRoute", }"#);
    assert!(ok, "{text}");
    let (ok, text) = check(
        "bad-handle.json",
        r#"{ "pools": { "A": { "servers": ["127.0.0.1:1"] } },
             "route": { "type": "FailoverRoute", "children": ["NullRoute", { "type": "ShadowRoute" }] } }"#,
    );
    assert!(!ok && text.contains("route.children[1].type") && text.contains("ShadowRoute"), "{text}");
    let (ok, text) = check("bad-pool.json", r#"{ "route": "PoolRoute|missing" }"#);
    assert!(!ok && text.contains("missing"), "{text}");
    let (ok, text) =
        check("bad-server.json", r#"{ "pools": { "A": { "servers": ["nope"] } }, "route": "NullRoute" }"#);
    assert!(!ok && text.contains("pools.A.servers[0]"), "{text}");
    let (ok, text) = check("not-json.json", "{ pools: ");
    assert!(!ok && text.contains("not JSON"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn reload_under_load_loses_no_request() {
    let backends = servers("reload-load", 2);
    let config = |timeout: u32| {
        format!(
            r#"{{ "pools": {{ "A": {{ "servers": [{}], "server_timeout": {timeout} }} }}, "route": {} }}"#,
            list(&backends),
            pool_route("A")
        )
    };
    let router = Router::start("reload-load", &config(1000));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = {
        let stop = stop.clone();
        let mut c = router.client();
        std::thread::spawn(move || {
            let mut done = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let key = format!("k{}", done % 500);
                let value = format!("v{done}");
                assert_eq!(
                    c.set(key.as_bytes(), value.as_bytes(), 0, 0).unwrap(),
                    shoal_client::Stored::Stored
                );
                assert_eq!(
                    c.get(key.as_bytes()).unwrap().unwrap().value,
                    value.as_bytes(),
                    "read back after {done}"
                );
                done += 1;
            }
            done
        })
    };
    for i in 1..=6 {
        router.rewrite(&config(1000 + i));
        let reloaded = || router.stat("config_reloads").parse::<u32>().unwrap_or(0) >= i;
        assert!(eventually(30, reloaded), "reload {i} happened");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let done = load.join().expect("no request failed or read a wrong value");
    assert!(done > 100, "the load ran throughout ({done} rounds)");
    assert_eq!(router.stat("errors_total"), "0");
}

#[test]
fn the_regional_pool_example_sends_rare_keys_to_the_regional_pool() {
    // docs/examples/router-regional-pool.json as shipped: the lookup needs no live servers.
    let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../docs/examples/router-regional-pool.json");
    let router = Router::start("regional", &std::fs::read_to_string(example).unwrap());
    let rare = router.raw(b"get __mcrouter__.route(get,rare:report:7)\r\n", b"END\r\n");
    assert!(rare.contains("10.0.9.") && !rare.contains("10.0.1."), "{rare}");
    let common = router.raw(b"get __mcrouter__.route(get,user:7)\r\n", b"END\r\n");
    assert!(common.contains("10.0.1.") && !common.contains("10.0.9."), "{common}");
}

#[test]
fn meta_commands_with_base64_keys_route_on_the_decoded_key_and_answer_as_the_server_does() {
    let shoal_backend = Server::shoal("base64-0", 0, &[]);
    let memcached = Server::memcached("base64-1", 0);
    let backends = [&shoal_backend, &memcached];
    let addresses: Vec<String> = backends.iter().map(|s| s.address()).collect();
    let config = format!(
        r#"{{ "pools": {{ "A": {{ "servers": ["{}", "{}"] }} }},
             "routes": [ {{ "aliases": ["/r/c/"], "route": {} }} ] }}"#,
        addresses[0],
        addresses[1],
        pool_route("A")
    );
    let router = Router::start("base64", &config);
    let placement = jump(&addresses);
    let b64 = |key: &[u8]| {
        let mut out = Vec::new();
        shoal_proto::encode_base64(key, &mut out);
        String::from_utf8(out).unwrap()
    };
    let text = |bytes: Vec<u8>| String::from_utf8_lossy(&bytes).into_owned();
    // Keys no text command could carry (spaces, control bytes) and plain ones, with and
    // without a routing prefix (which is part of the decoded key, and comes off).
    let keys: Vec<Vec<u8>> = (0..40u8)
        .map(|i| match i % 3 {
            0 => format!("plain:{i}").into_bytes(),
            1 => vec![b'k', b' ', i, 0, 0xff, b'\r', b'\n'],
            _ => format!("with space {i}").into_bytes(),
        })
        .collect();
    let mut owners = [0usize; 2];
    for (i, key) in keys.iter().enumerate() {
        let owner = backends[placement.owner(key)];
        owners[placement.owner(key)] += 1;
        let sent = if i % 2 == 0 { [&b"/r/c/"[..], key].concat() } else { key.clone() };
        let value_end = format!("\r\nv{}\r\n", i % 10);
        let set = format!("ms {} 2 b T0 F7{value_end}", b64(&sent));
        assert_eq!(router.raw(set.as_bytes(), b"\r\n"), "HD\r\n", "{key:?}");
        // Stored on the owner of the decoded key, without the prefix: the router's answer to
        // a read is the owner's own answer to the same read.
        let read = format!("mg {} b v f k t\r\n", b64(key));
        let direct = text(owner.raw(read.as_bytes(), value_end.as_bytes()));
        assert!(direct.starts_with("VA 2 "), "on its owner: {key:?} {direct}");
        let through = format!("mg {} b v f k t\r\n", b64(&sent));
        assert_eq!(router.raw(through.as_bytes(), value_end.as_bytes()), direct, "{key:?}");
        // md and ma with base64 keys too; their answers are the owner's.
        let counter = [key.as_slice(), b"#n"].concat();
        let arith = format!("ma {} b N0 J5 v\r\n", b64(&counter));
        assert_eq!(router.raw(arith.as_bytes(), b"\r\n5\r\n"), "VA 1\r\n5\r\n", "{key:?}");
        let delete = format!("md {} b q\r\nmn\r\n", b64(&sent));
        assert_eq!(router.raw(delete.as_bytes(), b"MN\r\n"), "MN\r\n", "quiet delete: {key:?}");
        assert!(text(owner.raw(read.as_bytes(), b"\r\n")).starts_with("EN"), "deleted on its owner");
    }
    assert!(owners.iter().all(|&n| n > 0), "both servers own keys: {owners:?}");
    // A key that is not base64 is refused as memcached refuses it.
    let bad = b"mg !!notbase64 b v\r\n";
    assert_eq!(router.raw(bad, b"\r\n").as_bytes(), memcached.raw(bad, b"\r\n"));
}

#[test]
fn a_multiget_batched_per_server_answers_in_order_with_repeats_and_a_dead_server_as_misses() {
    let backends = servers("batch", 2);
    let dead = format!("127.0.0.1:{}", free_port());
    let mut addresses: Vec<String> = backends.iter().map(Server::address).collect();
    addresses.push(dead.clone());
    let config = format!(
        r#"{{ "pools": {{ "A": {{ "servers": ["{}", "{}", "{}"], "server_timeout": 2000, "connect_timeout": 2000 }} }},
             "route": {} }}"#,
        addresses[0],
        addresses[1],
        addresses[2],
        pool_route("A")
    );
    let router = Router::start("batch", &config);
    let placement = jump(&addresses);
    let mut c = router.client();
    let keys: Vec<String> = (0..30).map(|i| format!("b:{i}")).collect();
    for key in &keys {
        if placement.owner(key.as_bytes()) < 2 {
            c.set(key.as_bytes(), key.as_bytes(), 0, 0).unwrap();
        }
    }
    // Every key twice, interleaved: hits come back in the order asked, repeats included;
    // the dead server's keys are misses and the others still answer.
    let asked: Vec<&str> = keys.iter().chain(keys.iter().rev()).map(String::as_str).collect();
    let live: Vec<&str> = asked.iter().copied().filter(|k| placement.owner(k.as_bytes()) < 2).collect();
    assert!(live.len() < asked.len(), "some keys are on the dead server");
    for command in ["get", "gets"] {
        let answer = router.raw(format!("{command} {}\r\n", asked.join(" ")).as_bytes(), b"END\r\n");
        let hits: Vec<&str> = answer
            .lines()
            .filter_map(|l| l.strip_prefix("VALUE "))
            .map(|l| l.split(' ').next().unwrap())
            .collect();
        assert_eq!(hits, live, "{command}");
        for key in &live {
            assert!(answer.contains(&format!("\r\n{key}\r\n")), "{key}'s value: {answer}");
        }
    }
    assert!(
        router.stat("errors_total").parse::<u64>().unwrap() > 0,
        "the dead server's keys count as errors"
    );
}

#[test]
fn a_multiget_across_routes_keeps_each_pools_prefix_rule_and_the_order_asked() {
    let kept = Server::shoal("mixed-kept", 0, &[]);
    let stripped = servers("mixed-stripped", 2);
    let failover = servers("mixed-failover", 2);
    let config = format!(
        r#"{{ "pools": {{ "K": {{ "servers": ["{}"], "keep_routing_prefix": true }},
                       "S": {{ "servers": [{}] }},
                       "F1": {{ "servers": ["{}"] }}, "F2": {{ "servers": ["{}"] }} }},
             "routes": [ {{ "aliases": ["/k/k/"], "route": {} }},
                         {{ "aliases": ["/s/s/"], "route": {} }},
                         {{ "aliases": ["/f/f/"], "route": {{ "type": "FailoverRoute",
                            "children": ["PoolRoute|F1", "PoolRoute|F2"] }} }} ] }}"#,
        kept.address(),
        list(&stripped),
        failover[0].address(),
        failover[1].address(),
        pool_route("K"),
        pool_route("S")
    );
    let router = Router::start("mixed", &config);
    let mut c = router.client();
    let mut asked = Vec::new();
    let mut expected = Vec::new();
    for i in 0..12 {
        let (key, answered_as) = match i % 3 {
            0 => (format!("/k/k/key{i}"), format!("/k/k/key{i}")), // kept: stored and answered with it
            1 => (format!("/s/s/key{i}"), format!("key{i}")),
            _ => (format!("/f/f/key{i}"), format!("key{i}")), // not placement only: one by one
        };
        c.set(key.as_bytes(), answered_as.as_bytes(), 0, 0).unwrap();
        asked.push(key);
        expected.push(answered_as);
    }
    assert!(direct(&kept).get(b"/k/k/key0").unwrap().is_some(), "the kept pool stores the prefix");
    let answer = router.raw(format!("get {}\r\n", asked.join(" ")).as_bytes(), b"END\r\n");
    let hits: Vec<&str> = answer
        .lines()
        .filter_map(|l| l.strip_prefix("VALUE "))
        .map(|l| l.split(' ').next().unwrap())
        .collect();
    assert_eq!(hits, expected.iter().map(String::as_str).collect::<Vec<_>>(), "{answer}");
}

#[test]
fn a_stalled_destination_times_out_and_its_late_answers_go_to_no_other_request() {
    let backend = Server::shoal("stall", 0, &[]);
    let router = Router::start("stall", &one_server(&backend.address(), 300, 2000));
    let mut c = router.client();
    assert!(eventually(30, || c.set(b"first", b"1", 0, 0).is_ok()), "the router reaches the backend");
    c.set(b"second", b"2", 0, 0).unwrap();
    backend.pause();
    let started = Instant::now();
    assert!(matches!(c.get(b"first"), Err(shoal_client::Error::Server(_))), "SERVER_ERROR on a timeout");
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(250) && waited < Duration::from_secs(10), "{waited:?}");
    backend.resume();
    // The late answer to the first get arrives now, on the same connection: it is dropped,
    // not handed to the next request.
    assert_eq!(c.get(b"second").unwrap().unwrap().value, b"2");
    assert_eq!(c.get(b"first").unwrap().unwrap().value, b"1");
    assert_eq!(router.stat("destinations_tko"), "0", "one timeout is not a TKO");
}

#[test]
fn a_request_given_up_alone_on_its_connection_has_its_late_answer_read_and_dropped() {
    // AllFastestRoute answers from the first child to answer and gives up the other's request.
    // Here that request is the only one on its connection, so its own waiter was running the
    // connection's loop: once it goes, the connection's task must take over and read the late
    // answer (the timeout, a minute, is not what ends the request), and hand it to no one.
    let (quick, stalled) = (Server::shoal("given-up-0", 0, &[]), Server::shoal("given-up-1", 0, &[]));
    direct(&quick).set(b"k", b"quick", 0, 0).unwrap();
    direct(&stalled).set(b"k", b"stalled", 0, 0).unwrap();
    direct(&stalled).set(b"k2", b"second", 0, 0).unwrap();
    let config = format!(
        r#"{{ "pools": {{ "Q": {{ "servers": ["{}"], "server_timeout": 60000 }},
                        "S": {{ "servers": ["{}"], "server_timeout": 60000 }} }},
             "routes": [ {{ "aliases": ["/q/q/"], "route": {{ "type": "AllFastestRoute", "children": [{}, {}] }} }},
                         {{ "aliases": ["/s/s/"], "route": {} }} ] }}"#,
        quick.address(),
        stalled.address(),
        pool_route("Q"),
        pool_route("S"),
        pool_route("S")
    );
    // One worker thread: every request to the stalled server shares one connection.
    let router = Router::start_with_threads("given-up", &config, 1);
    let mut c = router.client();
    assert!(
        eventually(30, || c.get(b"/s/s/k").is_ok_and(|v| v.is_some_and(|v| v.value == b"stalled"))),
        "the router reaches the stalled-to-be server"
    );
    stalled.pause();
    assert_eq!(c.get(b"/q/q/k").unwrap().unwrap().value, b"quick", "the fastest answer");
    stalled.resume();
    let line = || {
        let stats = router.raw(b"stats\r\n", b"END\r\n");
        let wanted = format!("STAT destination {} ", stalled.address());
        stats.lines().find_map(|l| l.strip_prefix(&wanted).map(str::to_string)).unwrap_or_default()
    };
    assert!(eventually(30, || line().ends_with(" pending=0")), "the late answer is read: {}", line());
    assert!(line().contains(" failed=0 "), "and counted as an answer, not a failure: {}", line());
    assert_eq!(c.get(b"/s/s/k2").unwrap().unwrap().value, b"second", "handed to no later request");
}

#[test]
fn a_destination_that_answers_garbage_fails_the_request_and_is_reconnected() {
    // Answers every request line with a line no memcached sends.
    let (address, accepted) = scripted_server(|_, _| Some(b"HELLO THERE\r\n".to_vec()));
    let router = Router::start("garbage", &one_server(&address, 2000, 2000));
    for _ in 0..2 {
        let answer = router.raw(b"get k\r\n", b"\r\n");
        assert!(answer.starts_with("SERVER_ERROR ") && answer.contains("unexpected answer"), "{answer}");
    }
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 2, "a new connection after garbage");
    assert_eq!(
        router.raw(b"version\r\n", b"\r\n").split(' ').next(),
        Some("VERSION"),
        "the router still serves"
    );
}

#[test]
fn a_connection_full_of_timed_out_requests_is_replaced() {
    use std::io::Write;
    // The first connection is read and never answered; later ones (the TKO probe's, and the
    // router's next connection) are answered.
    let (address, accepted) = scripted_server(|connection, line| match connection {
        0 => None,
        _ if line.starts_with("version") => Some(b"VERSION 1\r\n".to_vec()),
        _ => Some(b"END\r\n".to_vec()),
    });
    // One worker thread, so that every client's requests share its one connection.
    let router = Router::start_with_threads("stuck", &one_server(&address, 500, 2000), 1);
    // More requests than a connection may have in flight (65 536), sent at once by three
    // clients: the first connection's queue fills, then every request on it times out.
    let clients: Vec<std::net::TcpStream> = (0..3)
        .map(|_| {
            let mut s = std::net::TcpStream::connect(router.address()).unwrap();
            s.write_all(&b"get k\r\n".repeat(22_000)).unwrap();
            s
        })
        .collect();
    let mut first = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(&clients[0]), &mut first).unwrap();
    assert!(first.starts_with("SERVER_ERROR ") && first.contains("did not answer"), "{first}");
    assert!(
        eventually(30, || router.raw(b"get k\r\n", b"\r\n") == "END\r\n"),
        "a request is answered on a new connection"
    );
    assert!(accepted.load(std::sync::atomic::Ordering::SeqCst) >= 2);
    drop(clients);
}
