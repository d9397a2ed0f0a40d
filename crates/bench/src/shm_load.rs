//! `shoal bench load --through shm`: the same mix of gets and sets, with gets read through
//! Shoal's shared memory by shoal-client and sets sent over its connection.
//!
//! Each connection is one blocking client on its own thread (`--threads` is ignored), in a
//! closed loop: a request, its answer, the next. Pipelining and a fixed rate are network
//! ideas and are refused here.

use crate::engine::Outcome;
use crate::keys::{KeyChooser, KeySpace};
use crate::load::LoadOptions;
use crate::pin::pin_current_thread;
use crate::protocol::{Reply, RequestKind};
use crate::random::Rng;
use crate::tally::Tally;
use shoal_client::{Client, Options, Stored};
use std::time::{Duration, Instant};

/// Runs the measured phase through shared memory; `on_tick` sees (requests so far, elapsed)
/// from the first client now and then.
pub fn run(
    options: &LoadOptions,
    space: KeySpace,
    on_tick: impl Fn(u64, Duration) + Sync,
) -> Result<Outcome, String> {
    if options.pipeline > 1 || options.rate.is_some() {
        return Err(
            "--through shm runs closed loop, one request at a time: drop --pipeline and --rate".into()
        );
    }
    let address = options.target.server.to_string();
    let mut clients = Vec::with_capacity(options.connections);
    for _ in 0..options.connections {
        let mut client = Client::connect(&address, Options::default())
            .map_err(|e| format!("cannot connect to {address}: {e}"))?;
        if !client.is_local() {
            return Err(format!(
                "{address} offers no shared memory to this process: run `shoal server` on this host, as a user that may read its region"
            ));
        }
        clients.push(client);
    }
    let chooser = KeyChooser::new(options.distribution, options.keys);
    let connections = options.connections as u64;
    let start = Instant::now();
    let tallies = std::thread::scope(|scope| {
        let workers: Vec<_> = clients
            .into_iter()
            .enumerate()
            .map(|(i, client)| {
                let (chooser, on_tick) = (chooser.clone(), &on_tick);
                let quota =
                    options.requests.map(|n| n / connections + u64::from((i as u64) < n % connections));
                scope.spawn(move || {
                    if let Some(cpus) = &options.pin {
                        pin_current_thread(cpus.cpu_for(i))?;
                    }
                    let ticker = (i == 0).then_some(on_tick);
                    drive(client, options, space, chooser, quota, 0x5eed_0000 + i as u64, start, ticker)
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().expect("a load thread panicked")).collect::<Result<Vec<_>, _>>()
    })?;
    let mut tally = Tally::default();
    tallies.iter().for_each(|t| tally.merge(t));
    Ok(Outcome { tally, elapsed: start.elapsed() })
}

/// One client's closed loop until its quota or the duration is used up.
#[allow(clippy::too_many_arguments)]
fn drive(
    mut client: Client,
    options: &LoadOptions,
    space: KeySpace,
    chooser: KeyChooser,
    quota: Option<u64>,
    seed: u64,
    start: Instant,
    on_tick: Option<&(impl Fn(u64, Duration) + Sync)>,
) -> Result<Tally, String> {
    let mut rng = Rng::new(seed);
    let mut tally = Tally::default();
    let filler = options.value_size.filler();
    let deadline = start + Duration::from_secs_f64(options.duration);
    let mut keys = Vec::with_capacity(options.multiget as usize);
    let mut done = 0u64;
    while quota.map_or(Instant::now() < deadline, |q| done < q) {
        let began = Instant::now();
        let (kind, reply) = if rng.next_f64() < options.get_ratio {
            keys.clear();
            keys.extend((0..options.multiget).map(|_| space.key(chooser.next_get(&mut rng))));
            let refs: Vec<&[u8]> = keys.iter().map(|k| k.as_bytes()).collect();
            let found = client.get_many(&refs).map_err(|e| format!("get: {e}"))?.len() as u32;
            (
                RequestKind::Get { keys: options.multiget },
                Reply { hits: found, misses: options.multiget - found, errors: 0 },
            )
        } else {
            let key = space.key(chooser.next_set(&mut rng));
            let value = &filler[..options.value_size.draw(&mut rng)];
            let stored = client.set(key.as_bytes(), value, 0, 0).map_err(|e| format!("set: {e}"))?;
            (RequestKind::Set, Reply { hits: 0, misses: 0, errors: u32::from(stored != Stored::Stored) })
        };
        tally.record(kind, reply, began.elapsed());
        done += 1;
        if let Some(tick) = on_tick.filter(|_| done.is_multiple_of(1024)) {
            tick(done * options.connections as u64, start.elapsed());
        }
    }
    Ok(tally)
}
