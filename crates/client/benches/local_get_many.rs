//! Issue #29's Rust local multiget, alone: a 100-key `Pool::get_many_each` of 100-byte values
//! read through the shared memory of Shoal servers on this host (`shoal bench pool`'s
//! shared-memory row without the TCP rows, so that a profiler sees this path only).
//!
//! `cargo bench -p shoal-client --bench local_get_many -- <host:port,…> [calls] [hashing] [whole]`
//! prints the p50 and mean in µs of the whole multiget (alone with `whole`, for a profiler)
//! and of two of its parts, each timed
//! alone over the same keys: the placement (`Pool::server_for` of every key) and the bare
//! region reads (`shoal_region::Reader::get` of every key on its server's region, without
//! hints, freshness checks or batch bookkeeping). With no servers it prints how to run it
//! and succeeds (so `cargo bench` alone does not fail).

use shoal_client::{Client, Hashing, Options, Pool, PoolOptions};
use shoal_region::Reader;
use std::time::Instant;

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let Some(servers) = args.first() else {
        println!("usage: local_get_many <host:port,…> [calls] [hashing]: Shoal servers on this host");
        return Ok(());
    };
    let servers: Vec<&str> = servers.split(',').collect();
    let calls: usize = args.get(1).map_or(Ok(30_000), |n| n.parse()).map_err(|e| format!("calls: {e}"))?;
    let hashing: Hashing = args.get(2).map_or("jump", String::as_str).parse().map_err(|e| format!("{e}"))?;
    let pool = |local: bool| {
        let client = Options { local, ..Options::default() };
        Pool::new(&servers, PoolOptions { hashing, client, ..PoolOptions::default() })
            .map_err(|e| e.to_string())
    };
    let keys: Vec<Vec<u8>> = (0..100).map(|i| format!("bench:pool:{i}").into_bytes()).collect();
    let keys: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    let value = [b'v'; 100];
    let items: Vec<(&[u8], &[u8])> = keys.iter().map(|k| (*k, &value[..])).collect();
    let failed = pool(false)?.set_many(&items, 0, 0).map_err(|e| e.to_string())?;
    if !failed.is_empty() {
        return Err(format!("{} keys not stored", failed.len()));
    }
    let mut local = pool(true)?;
    local.get_many_each(&keys, |_, _| {}).map_err(|e| e.to_string())?;
    if calls == 0 {
        return Err("calls must be at least 1".into());
    }
    if local.local_servers().len() != servers.len() {
        return Err("not every server offers shared memory to this process".into());
    }
    let mut hits = 0;
    let whole = time(calls, || get_many_whole(&mut local, &keys, &mut hits))?;
    if hits != (calls + 1) * keys.len() * value.len() {
        return Err(format!("{hits} value bytes read, not every key a hit"));
    }
    if args.get(3).is_some_and(|a| a == "whole") {
        println!("get_many_each        p50 {:>6.2} µs, mean {:>6.2} µs over {calls} calls", whole.0, whole.1);
        return Ok(());
    }
    let placement = time(calls, || {
        keys.iter().try_for_each(|k| local.server_for(k).map(drop)).map_err(|e| e.to_string())
    })?;
    // Each key's region, as the pool places it.
    let mut readers = Vec::new();
    for server in &servers {
        let mut client = Client::connect(server, Options::default()).map_err(|e| e.to_string())?;
        let path = client.local_region_path().ok_or("no region")?;
        readers.push((server.to_string(), Reader::open(path).map_err(|e| e.to_string())?));
    }
    let mut placed = Vec::new();
    for key in &keys {
        let owner = local.server_for(key).map_err(|e| e.to_string())?;
        placed.push((readers.iter().position(|(s, _)| s == owner).ok_or("unknown server")?, *key));
    }
    let mut buffer = Vec::new();
    let reads = time(calls, || {
        for &(r, key) in &placed {
            readers[r].1.get(key, &mut buffer).map_err(|e| e.to_string())?;
        }
        Ok(())
    })?;
    for (row, (p50, mean)) in
        [("get_many_each", whole), ("placement alone", placement), ("region reads alone", reads)]
    {
        println!("{row:<20} p50 {p50:>6.2} µs, mean {mean:>6.2} µs over {calls} calls");
    }
    Ok(())
}

/// One whole multiget, its hits' value bytes added to `hits`: a function of its own, so that
/// a profiler counts the call alone (`valgrind --tool=callgrind
/// --toggle-collect='*get_many_whole*'`; the pool's functions it calls may be inlined).
#[inline(never)]
fn get_many_whole(pool: &mut Pool, keys: &[&[u8]], hits: &mut usize) -> Result<(), String> {
    pool.get_many_each(keys, |_, item| *hits += item.value.len()).map_err(|e| e.to_string())
}

/// (p50, mean) in µs of `calls` calls of `call`, each timed alone (one call first, untimed).
fn time(calls: usize, mut call: impl FnMut() -> Result<(), String>) -> Result<(f64, f64), String> {
    call()?;
    let mut took = Vec::with_capacity(calls);
    for _ in 0..calls {
        let start = Instant::now();
        call()?;
        took.push(start.elapsed().as_nanos() as f64 / 1000.0);
    }
    let mean = took.iter().sum::<f64>() / calls as f64;
    took.sort_by(f64::total_cmp);
    Ok((took[calls / 2], mean))
}
