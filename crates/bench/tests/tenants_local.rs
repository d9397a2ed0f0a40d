//! `shoal bench tenants --local` against a real `shoal server`: the share of reads asked for is
//! read from the region through shoal-client (the rest over the network), a key set after a miss
//! is found by the next local read, and `--curves` reports the server's curve with the sampled
//! local reads it took.

#[path = "../../client/tests/common/mod.rs"]
mod common;

use common::Server;
use shoal_bench::tenants::{run_tenants, TenantsOptions};

fn options(server: &Server, local: f64) -> TenantsOptions {
    TenantsOptions {
        server: server.address(),
        tenants: vec!["name=hot,keys=2000,dist=zipf:1.0,value=100".parse().unwrap()],
        rounds: 2000,
        seconds: 600.0,
        local,
        curves: true,
        batch: 50,
        changes: Vec::new(),
        interval: 1.0,
        trace: None,
        offline_memory_mb: None,
        unit_mb: 1,
        seed: 1,
        json: true,
    }
}

#[test]
fn ninety_per_cent_of_reads_are_local_and_reach_the_curve() {
    let server = Server::shoal("bench-tenants-local", 0, &["--hit-curve", "-m", "64"]);
    // Local reads are sampled once the server has published its threshold (every 100 ms).
    let mut client =
        shoal_client::Client::connect(&server.address(), shoal_client::Options::default()).unwrap();
    let region = shoal_region::Reader::open(client.local_region_path().expect("local")).unwrap();
    assert!(common::eventually(60, || region.curve_threshold() != 0), "the threshold is published");
    let report = run_tenants(&options(&server, 0.9)).unwrap().to_json();
    let tenant = &report["tenants"][0];
    let (gets, local) = (tenant["gets"].as_f64().unwrap(), tenant["local_reads"].as_f64().unwrap());
    assert_eq!(gets, 2000.0 * 50.0, "{report}");
    assert!((0.87..=0.93).contains(&(local / gets)), "about 90 % local: {report}");
    // 2 000 keys fit: after the first misses, reads hit whether local or not.
    assert!(tenant["hit_ratio"].as_f64().unwrap() > 0.95, "{report}");
    let curve = &report["curves"][0];
    assert_eq!(curve["tenant"], "default", "{report}");
    assert!(curve["local"]["local_sampled"].as_u64().unwrap() > 0, "local reads reached the curve: {report}");
    assert!(curve["curve_hit_ratio"].as_f64().unwrap() > 0.9, "{report}");
}

#[test]
fn local_reads_need_a_region_this_process_can_read() {
    // A tenant reached by prefix shares its port with others: `shm` names no region there.
    let dir = std::env::temp_dir().join(format!("bench-tenants-prefix-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("tenants.toml");
    std::fs::write(
        &file,
        "default = \"a\"\n[[tenant]]\nname = \"a\"\nsize_mb = 8\n[[tenant]]\nname = \"b\"\nsize_mb = 8\nprefixes = [\"b:\"]\n",
    )
    .unwrap();
    let server = Server::shoal("bench-tenants-prefix", 0, &["--tenants", file.to_str().unwrap(), "-m", "32"]);
    let error = run_tenants(&options(&server, 0.9)).err().expect("refused");
    assert!(error.contains("own listener"), "{error}");
    assert!(run_tenants(&options(&server, 0.0)).is_ok(), "over the network it runs");
    let _ = std::fs::remove_dir_all(&dir);
}
