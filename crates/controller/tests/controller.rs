//! `shoal controller` end to end against real `shoal server --tenants` processes: it moves
//! memory toward the tenant whose curve gains from it, shrinking before growing, skips a server
//! that is down, keeps the sizes in force when a resize is refused, and its HTTP side shows all
//! of it.

#[path = "../../client/tests/common/mod.rs"]
mod common;

mod support;

use common::{eventually, free_port, shoal_bin, Server};
use std::io::{BufRead, BufReader};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use support::{load, size, sizes, Controller, Scratch, MIB};

#[test]
fn moves_memory_to_the_tenant_whose_curve_gains_and_shows_it() {
    let scratch = Scratch::new("move");
    let tenants = scratch.tenants(&[("hot", 16, 30), ("scan", 16, 30)]);
    let server = Server::shoal("controller-move", 0, &["-m", "32", "--tenants", &tenants]);
    let total: u64 = sizes(&server).iter().map(|(_, b)| b).sum();
    assert_eq!((size(&server, "hot"), size(&server, "scan")), (16 * MIB, 16 * MIB));
    let stop = Arc::new(AtomicBool::new(false));
    // "hot" reads ~21 MiB at random: every MiB more up to there hits more. "scan" never asks
    // for a key twice: memory does nothing for it.
    let loads = [
        load(server.address(), "hot", Some(2600), stop.clone()),
        load(server.address(), "scan", None, stop.clone()),
    ];
    let down = format!("127.0.0.1:{}", free_port());
    let controller = Controller::start(&[down.clone(), server.address()], &["--goal", "global"]);
    assert!(
        eventually(60, || size(&server, "hot") > 16 * MIB),
        "hot grows: {:?}\n{:?}",
        sizes(&server),
        controller.events.lock().unwrap()
    );
    stop.store(true, Ordering::Relaxed);
    loads.into_iter().for_each(|l| l.join().unwrap());
    assert!(size(&server, "scan") < 16 * MIB, "{:?}", sizes(&server));
    assert_eq!(sizes(&server).iter().map(|(_, b)| b).sum::<u64>(), total, "the memory is moved, not added");

    // The log: the shrink before the grow, each with the planner's reason; the dead server skipped.
    let resized = controller.events("resized");
    let first_grow = resized.iter().position(|e| e["tenant"] == "hot").expect("hot resized");
    let first_shrink = resized.iter().position(|e| e["tenant"] == "scan").expect("scan resized");
    assert!(first_shrink < first_grow, "{resized:?}");
    assert!(resized[first_grow]["reason"].as_str().unwrap().contains("marginal gain"), "{resized:?}");
    assert!(resized[first_grow]["to_bytes"].as_u64() > resized[first_grow]["from_bytes"].as_u64());
    let downs = controller.events("down");
    assert!(downs.iter().any(|e| e["server"] == down.as_str()), "{downs:?}");
    assert!(controller.events("measuring").iter().all(|e| e["server"] == server.address().as_str()));

    // The HTTP side agrees with the server.
    assert!(eventually(30, || {
        let state = controller.state();
        let live = &state["servers"][1];
        let hot = live["tenants"].as_array().and_then(|t| t.iter().find(|t| t["name"] == "hot")).cloned();
        hot.is_some_and(|hot| {
            hot["size_bytes"].as_u64() == Some(size(&server, "hot"))
                && hot["planned_bytes"].as_u64() == Some(size(&server, "hot"))
                && hot["curve"]["hit_ratios"].as_array().is_some_and(|c| c.len() > 100)
                && hot["history"].as_array().is_some_and(|h| h.len() >= 2)
                && hot["last_decision"]["event"].is_string()
        }) && state["servers"][0]["up"] == false
            && live["up"] == true
    }));
    let state = controller.state();
    assert!(state["resizes"].as_u64().unwrap() >= 2, "{state}");
    assert!(state["decisions"].as_array().unwrap().iter().any(|d| d["event"] == "resized"));
    let metrics = controller.get("/metrics");
    let line =
        format!("shoal_controller_tenant_size_bytes{{server=\"{}\",tenant=\"hot\"}}", server.address());
    assert!(metrics.contains(&line), "{metrics}");
    assert!(controller.get("/").contains("data-tenant"), "the dashboard page");
}

/// A TCP proxy in front of a server that plays an operator racing the controller: just before
/// it forwards a `tenant_memlimit <grown> …`, it sets `<restored>` back to `bytes` on a
/// connection of its own, taking the memory the controller's shrink freed, so the server
/// itself refuses the grow.
fn racing_proxy(server: String, grown: &'static str, restored: &'static str, bytes: u64) -> String {
    use std::io::Write;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for downstream in listener.incoming().map_while(Result::ok) {
            let server = server.clone();
            std::thread::spawn(move || {
                let Ok(upstream) = std::net::TcpStream::connect(&server) else { return };
                let (mut back, mut down_writer) =
                    (upstream.try_clone().unwrap(), downstream.try_clone().unwrap());
                std::thread::spawn(move || std::io::copy(&mut back, &mut down_writer));
                let mut up_writer = upstream;
                for line in BufReader::new(downstream).lines().map_while(Result::ok) {
                    if line.starts_with(&format!("tenant_memlimit {grown} ")) {
                        let answer = common::raw(
                            &server,
                            format!("tenant_memlimit {restored} {bytes}\r\n").as_bytes(),
                            b"\r\n",
                        );
                        assert_eq!(answer, b"OK\r\n", "the operator's resize");
                    }
                    if up_writer.write_all(format!("{line}\r\n").as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    address
}

#[test]
fn a_refused_resize_keeps_the_sizes_in_force() {
    let scratch = Scratch::new("refuse");
    let tenants = scratch.tenants(&[("hot", 16, 30), ("scan", 16, 30)]);
    let server = Server::shoal("controller-refuse", 0, &["-m", "32", "--tenants", &tenants]);
    let stop = Arc::new(AtomicBool::new(false));
    let loads = [
        load(server.address(), "hot", Some(2600), stop.clone()),
        load(server.address(), "scan", None, stop.clone()),
    ];
    let proxy = racing_proxy(server.address(), "hot", "scan", 16 * MIB);
    let controller = Controller::start(&[proxy], &["--goal", "global"]);
    assert!(
        eventually(60, || !controller.events("refused").is_empty()),
        "the grow is refused: {:?}",
        controller.events.lock().unwrap()
    );
    let refused = controller.events("refused").remove(0);
    assert_eq!(refused["tenant"], "hot");
    let reason = refused["reason"].as_str().unwrap().to_string();
    assert!(reason.contains("the sizes in force stay"), "{reason}");
    let undone = controller.events("rolled-back");
    assert!(undone.iter().any(|e| e["tenant"] == "scan" && e["to_bytes"] == 16 * MIB), "{undone:?}");
    // No plan is tried again at once: the sizes stay, round after round.
    assert!(
        eventually(30, || !controller.events("not-retried").is_empty()),
        "{:?}",
        controller.events.lock().unwrap()
    );
    stop.store(true, Ordering::Relaxed);
    loads.into_iter().for_each(|l| l.join().unwrap());
    assert_eq!((size(&server, "hot"), size(&server, "scan")), (16 * MIB, 16 * MIB));
    let state = controller.state();
    assert!(state["refusals"].as_u64().unwrap() >= 1, "{state}");
    // The server's own words.
    assert!(reason.contains("over the memory limit"), "{reason}");
    let server_reason = state["servers"][0]["refused"]["reason"].as_str().unwrap();
    assert!(server_reason.contains("over the memory limit"), "{state}");
    let rounds: Vec<u64> =
        controller.events("refused").iter().map(|e| e["round"].as_u64().unwrap()).collect();
    assert!(rounds.windows(2).all(|w| w[1] >= w[0] + 5), "one attempt, then a pause of 5 rounds: {rounds:?}");
    assert!(controller.get("/metrics").contains("shoal_controller_refusals_total "));
}

#[test]
fn bad_arguments_are_refused_with_the_fix() {
    let run = |args: &[&str]| {
        let out = Command::new(shoal_bin()).arg("controller").args(args).output().unwrap();
        assert!(!out.status.success(), "{args:?} should fail");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    assert!(run(&["--server", "nohost"]).contains("give host:port"));
    assert!(run(&["--server", "127.0.0.1:1", "--server", "127.0.0.1:1"]).contains("twice"));
    assert!(run(&["--server", "127.0.0.1:1", "--hysteresis", "1.5"]).contains("--hysteresis 1.5"));
    assert!(run(&["--server", "127.0.0.1:1", "--interval", "0s"]).contains("a duration above 0"));
    assert!(run(&["--server", "127.0.0.1:1", "--goal", "fastest"]).contains("global"));
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = taken.local_addr().unwrap().to_string();
    assert!(run(&["--server", "127.0.0.1:1", "--http", &address]).contains("--http"));
}
