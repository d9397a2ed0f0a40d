//! `shoal provision` end to end: it starts and stops real `shoal server`s in the pool's order
//! as a schedule's load falls and rises, and a real `shoal router` follows every transition
//! from the state file its configuration names (the configuration itself is never written).

#[path = "../../client/tests/common/mod.rs"]
mod common;

use common::router::Router;
use common::{eventually, free_port, shoal_bin};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

fn answers(address: &str) -> bool {
    std::net::TcpStream::connect_timeout(&address.parse().unwrap(), Duration::from_millis(200)).is_ok()
}

/// The body of an HTTP/1.0 GET (empty if nothing answers yet).
fn http_get(address: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(address) else { return String::new() };
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut answer = String::new();
    if s.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes()).is_err()
        || s.read_to_string(&mut answer).is_err()
    {
        return String::new();
    }
    answer
}

fn router_config(servers: &[String]) -> String {
    let list = servers.iter().map(|s| format!("\"{s}\"")).collect::<Vec<_>>().join(", ");
    format!(
        r#"{{ "pools": {{ "A": {{ "servers": [{list}] }} }},
             "route": {{ "type": "PoolRoute", "pool": "A", "hash": "proteus" }} }}"#
    )
}

/// A router configuration as an operator writes one: comments, keys in no sorted order, a
/// trailing comma, and the state file the pool follows.
fn commented_router_config(servers: &[String]) -> String {
    let list = servers.iter().map(|s| format!("\"{s}\"")).collect::<Vec<_>>().join(", ");
    format!(
        "// The cache tier: turned on and off by shoal provision.\n\
         {{\n  \"route\": {{ \"type\": \"PoolRoute\", \"pool\": \"A\", \"hash\": \"proteus\" }}, // proteus placement\n  \
         \"pools\": {{ \"A\": {{ \"servers\": [{list}], \"provisioning\": \"state.json\", \"server_timeout\": 500, }} }},\n}}\n"
    )
}

#[test]
fn follows_a_schedule_down_and_up_in_order_and_the_router_follows() {
    let servers: Vec<String> = (0..3).map(|_| format!("127.0.0.1:{}", free_port())).collect();
    let config = commented_router_config(&servers);
    let router = Router::start("provision", &config);
    let dir = router.dir.clone();
    let schedule = dir.join("schedule.txt");
    // 3 servers of 100 requests/s: 250 fits 3; 150 fits 2; 50 fits 1; 250 needs 3 again.
    std::fs::write(&schedule, "0 250\n2 150\n5 50\n10 250\n").unwrap();
    let state = dir.join("state.json");
    let metrics = format!("127.0.0.1:{}", free_port());
    let mut provision = Command::new(shoal_bin())
        .args(["provision", "--spawn", "--server-args=-U 0 -m 16", "--target-rps", "100"])
        .args(["--hysteresis", "0.2", "--drain", "2", "--interval", "0.1", "--duration", "15", "--json"])
        .arg("--schedule")
        .arg(&schedule)
        .arg("--router-config")
        .arg(dir.join("config.json"))
        .arg("--state")
        .arg(&state)
        .args(["--metrics-listen", &metrics])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // All three start; the router learns it.
    assert!(eventually(30, || servers.iter().all(|s| answers(s))), "the provisioner starts every server");
    assert!(eventually(30, || router.stat("pool").contains("active=3")), "{}", router.stat("pool"));
    let scrape = |path: &str| http_get(&metrics, path);
    assert!(
        eventually(30, || scrape("/metrics").contains("shoal_provision_active 3.0\n")),
        "{}",
        scrape("/metrics")
    );
    assert!(scrape("/metrics").contains("shoal_provision_in_transition 0.0\n"));
    assert!(scrape("/status").contains("\"active\":3"), "{}", scrape("/status"));
    let mut c = router.client();
    for i in 0..100 {
        c.set(format!("k{i}").as_bytes(), b"v", 0, 0).unwrap();
    }
    // Down to 2: the router reads moved keys from server 3 while it drains.
    assert!(
        eventually(30, || router.stat("pool").contains("active=2 transition=from=3")),
        "{}",
        router.stat("pool")
    );
    for i in 0..100 {
        assert!(c.get(format!("k{i}").as_bytes()).unwrap().is_some(), "k{i} hits while server 3 drains");
    }
    // Server 3 stops after its drain; then down to 1, and server 2 stops too.
    assert!(eventually(30, || !answers(&servers[2])), "server 3 stops after the drain");
    assert!(eventually(30, || router.stat("pool").contains("active=1")), "{}", router.stat("pool"));
    assert!(eventually(30, || !answers(&servers[1])), "server 2 stops after the drain");
    assert!(answers(&servers[0]), "the first server in the order is never turned off");
    // Up again, in the same order.
    assert!(eventually(30, || answers(&servers[1]) && answers(&servers[2])), "servers 2 and 3 start again");
    assert!(eventually(30, || router.stat("pool").contains("active=3")), "{}", router.stat("pool"));
    let lines: Vec<serde_json::Value> = BufReader::new(provision.stdout.take().unwrap())
        .lines()
        .map(|l| serde_json::from_str(&l.unwrap()).unwrap())
        .collect();
    assert!(provision.wait().unwrap().success());
    let steps: Vec<u64> = lines
        .iter()
        .filter(|l| l["event"] == "transition-start")
        .map(|l| l["active"].as_u64().unwrap())
        .collect();
    assert_eq!(steps, [2, 1, 2, 3], "one server at a time, each with its reason: {lines:?}");
    assert!(lines.iter().all(|l| l["reason"].as_str().is_some_and(|r| !r.is_empty())));
    let saved: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&state).unwrap()).unwrap();
    assert_eq!(saved["active"], 3);
    // The router learnt every step from the state file; its own configuration is untouched.
    assert_eq!(std::fs::read_to_string(dir.join("config.json")).unwrap(), config, "byte for byte");
}

#[test]
fn a_half_known_or_impossible_pool_is_refused_before_anything_starts() {
    let run = |args: &[&str]| {
        let out = Command::new(shoal_bin()).arg("provision").args(args).output().unwrap();
        assert!(!out.status.success(), "{args:?} should fail");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let twice = run(&["--servers", "127.0.0.1:1,127.0.0.1:1", "--target-rps", "10"]);
    assert!(twice.contains("the pool's servers") && twice.contains("127.0.0.1:1"), "{twice}");
    let many: Vec<String> = (1..=65).map(|p| format!("127.0.0.1:{p}")).collect();
    let too_many = run(&["--servers", &many.join(","), "--target-rps", "10"]);
    assert!(too_many.contains("64"), "{too_many}");
    let max = run(&["--servers", "127.0.0.1:1,127.0.0.1:2", "--target-rps", "10", "--max-active", "3"]);
    assert!(max.contains("--max-active 3"), "{max}");
    let one = run(&["--servers", "127.0.0.1:1", "--target-rps", "10", "--max-active", "2"]);
    assert!(one.contains("the pool has 1 server\n"), "{one}");
    let remote = run(&["--servers", "cache-host:11211", "--target-rps", "10", "--spawn"]);
    assert!(remote.contains("not 127.0.0.1:<port>"), "{remote}");
    let dir = std::env::temp_dir().join(format!("shoal-provision-refuse-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let state = dir.join("state.json");
    std::fs::write(&state, r#"{"servers": ["127.0.0.1:9"], "active": 1, "transition": null}"#).unwrap();
    let other = run(&["--servers", "127.0.0.1:1", "--target-rps", "10", "--state", state.to_str().unwrap()]);
    assert!(other.contains("it is for the servers") && other.contains("remove it"), "{other}");
    let config = dir.join("router.json");
    std::fs::write(&config, router_config(&["127.0.0.1:2".into(), "127.0.0.1:1".into()])).unwrap();
    let order = run(&[
        "--servers",
        "127.0.0.1:1,127.0.0.1:2",
        "--target-rps",
        "10",
        "--router-config",
        config.to_str().unwrap(),
    ]);
    assert!(order.contains("not the provisioning order"), "{order}");
    // A router that would not learn of the transitions: the provisioner says what to add.
    let unfollowed = run(&["--target-rps", "10", "--router-config", config.to_str().unwrap()]);
    assert!(unfollowed.contains("add \"provisioning\": \"provision-A.json\""), "{unfollowed}");
    let nowhere = run(&["--servers", "127.0.0.1:1", "--target-rps", "10"]);
    assert!(nowhere.contains("give --state FILE"), "{nowhere}");
    std::fs::remove_dir_all(&dir).unwrap();
}
