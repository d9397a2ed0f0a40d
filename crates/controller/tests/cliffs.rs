//! Issue 27, item 4, against a real `shoal server --tenants` and a real `shoal controller`:
//! the planner keeps off cliffs. A scan tenant (keys read in turn: its curve is flat up to its
//! working set, then jumps) shares a server with a tenant whose every MiB buys hits; the scan
//! would be given a size short of its cliff, which buys nothing, so it gets its minimum
//! instead (and at most the memory it already held and nobody gains from), never a size
//! within the curve's error of its cliff; the other tenant gets the memory, and the decision
//! log says why.

#[path = "../../client/tests/common/mod.rs"]
mod common;

mod support;

use common::{eventually, Server};
use serde_json::Value;
use shoal_client::{Client, Options};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use support::{size, sizes, Controller, Scratch, MIB};

/// The planner's margin for a curve's error (`shoal_curves::SIZE_ERROR`).
const ERROR: f64 = 0.03;

/// Gets from one thread until `stop`, a set of 8 KiB on each miss: three of tenant `zipf`
/// (uniform over 5 000 keys, 40 MiB: up to its maximum of 24 MiB each MiB buys hits)
/// for each of tenant `scan` (2 560 keys read in turn, 20 MiB: a curve of 0 up to its working
/// set and 1 past it). One thread, so the rates keep that ratio however loaded the machine:
/// the scan's hull (a quarter of the rate over 18 MiB) gains less per MiB than `zipf` (three
/// quarters over 40), so `zipf` is planned its units first and the scan is left the few that
/// remain, short of its cliff.
fn mixed_load(address: String, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut client = Client::connect(&address, Options { local: false, ..Options::default() }).unwrap();
        let value = vec![b'v'; 8 << 10];
        let (mut i, mut random) = (0u64, 0x9E37_79B9_7F4A_7C15u64);
        while !stop.load(Ordering::Relaxed) {
            let key = if i % 4 == 3 {
                format!("scan:{}", i / 4 % 2560)
            } else {
                format!("zipf:{}", support::xorshift(&mut random) % 5000)
            };
            if client.get(key.as_bytes()).unwrap().is_none() {
                client.set(key.as_bytes(), &value, 0, 0).unwrap();
            }
            i += 1;
        }
    })
}

/// The smallest size at which `tenant`'s curve (as the controller read it) reaches half its
/// top: where the scan's cliff is.
fn cliff(state: &Value, tenant: &str) -> Option<u64> {
    let tenants = state["servers"][0]["tenants"].as_array()?;
    let curve = &tenants.iter().find(|t| t["name"] == tenant)?["curve"];
    let step = curve["step_bytes"].as_u64()?;
    let ratios: Vec<f64> = curve["hit_ratios"].as_array()?.iter().filter_map(Value::as_f64).collect();
    let top = ratios.iter().cloned().fold(0.0, f64::max);
    (top > 0.5).then(|| ratios.iter().position(|&h| h >= top / 2.0).unwrap() as u64 * step)
}

#[test]
fn a_scan_short_of_its_cliff_gets_its_minimum_and_the_memory_goes_where_it_buys_hits() {
    let scratch = Scratch::new("cliff");
    let tenants = scratch.tenants(&[("zipf", 16, 24), ("scan", 16, 30)]);
    let server = Server::shoal("controller-cliff", 0, &["-m", "32", "--tenants", &tenants]);
    let stop = Arc::new(AtomicBool::new(false));
    let load = mixed_load(server.address(), stop.clone());
    // The controller starts once the scan has been read twice over, so that its first plan
    // sees the cliff however slowly a loaded machine runs the load.
    let scan_top = || {
        let answer = String::from_utf8(server.raw(b"curve scan\r\n", b"END\r\n")).unwrap();
        let ratios = answer
            .lines()
            .filter_map(|l| l.strip_prefix("STAT hit_ratio ")?.rsplit(' ').next()?.parse().ok());
        ratios.fold(0.0, f64::max)
    };
    assert!(eventually(60, || scan_top() > 0.3), "the scan's curve has its cliff: {}", scan_top());
    let controller = Controller::start(&[server.address()], &["--goal", "global"]);
    let log = || format!("{:?}\n{:?}", sizes(&server), controller.events.lock().unwrap());
    assert!(
        eventually(60, || size(&server, "zipf") > 16 * MIB && !controller.events("resized").is_empty()),
        "zipf gets the memory: {}",
        log()
    );
    // The curve the plan came from shows the scan's cliff at its working set (20 MiB of items,
    // a little more in the region's bytes).
    let mut at = None;
    assert!(eventually(30, || {
        at = cliff(&controller.state(), "scan");
        at.is_some()
    }));
    let cliff = at.unwrap();
    assert!((20 * MIB..24 * MIB).contains(&cliff), "the scan's cliff at {} MiB", cliff / MIB);
    stop.store(true, Ordering::Relaxed);
    load.join().unwrap();

    // Every size the scan was given is off its cliff by the curve's error: below it with the
    // margin (its minimum, or memory it held that nobody gains from), or past it with the margin.
    let off = |bytes: u64| {
        (bytes as f64) * (1.0 + ERROR) < cliff as f64 || bytes as f64 >= cliff as f64 * (1.0 + ERROR)
    };
    let scan: Vec<Value> =
        controller.events("resized").into_iter().filter(|e| e["tenant"] == "scan").collect();
    assert!(!scan.is_empty(), "the scan was resized: {}", log());
    for event in &scan {
        assert!(off(event["to_bytes"].as_u64().unwrap()), "{event}\ncliff at {cliff} bytes");
    }
    assert!(off(size(&server, "scan")), "{}", log());
    assert_eq!(size(&server, "scan") + size(&server, "zipf"), 32 * MIB, "{}", log());
    // The decision log says why: the units short of the cliff would buy nothing.
    let reason = scan.last().unwrap()["reason"].as_str().unwrap().to_string();
    assert!(reason.contains("would buy nothing"), "{reason}");
    assert!(scan.iter().all(|e| e["to_bytes"].as_u64() <= Some(16 * MIB)), "the scan only shrank: {scan:?}");
}
