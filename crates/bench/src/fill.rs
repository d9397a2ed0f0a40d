//! `shoal bench fill`: how many items fit. Sets new keys in batches and reads `stats` after
//! each, until the server evicts, refuses a set, or stops holding more items.

use crate::engine::{Clients, Phase, Schedule};
use crate::keys::KeySpace;
use crate::load::at_least_one;
use crate::pin::CpuList;
use crate::progress::progress_bar;
use crate::target::{ServerStats, Target};
use crate::workload::{Order, RequestSource, ValueSize};
use clap::Parser;
use serde_json::{json, Value};
use std::fmt;
use std::time::{Duration, Instant};

/// Count the items a server holds when full: set new keys (16-byte keys and 100-byte values
/// by default) until evictions start, a set fails, or `curr_items` stops growing, and report
/// the most items `stats` showed. The server must start empty.
#[derive(Parser, Debug, Clone)]
#[command(name = "fill")]
pub struct FillOptions {
    /// The server and its protocol.
    #[command(flatten)]
    pub target: Target,
    /// Connections the sets are spread over.
    #[arg(long, short = 'c', default_value_t = 4, value_parser = at_least_one)]
    pub connections: usize,
    /// Sets each connection keeps in flight.
    #[arg(long, default_value_t = 32, value_parser = at_least_one)]
    pub pipeline: usize,
    /// Bytes per key.
    #[arg(long, default_value_t = 16)]
    pub key_size: usize,
    /// Bytes per value: one size, or MIN-MAX for sizes drawn uniformly.
    #[arg(long, default_value = "100")]
    pub value_size: ValueSize,
    /// Sets between two readings of `stats`.
    #[arg(long, default_value_t = 50_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub batch: u64,
    /// Give up after this many sets.
    #[arg(long, default_value_t = 100_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_sets: u64,
    /// Pin the generator thread to this CPU (taskset's syntax).
    #[arg(long)]
    pub pin: Option<CpuList>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Why a fill stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FillStop {
    /// The `evictions` counter moved.
    Evictions,
    /// A set was refused (e.g. memcached's `-M`: out of memory).
    SetErrors,
    /// A batch of new keys left `curr_items` no higher than before.
    NoGrowth,
    /// `--max-sets` reached first.
    MaxSets,
}

impl fmt::Display for FillStop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FillStop::Evictions => "evictions started",
            FillStop::SetErrors => "sets were refused",
            FillStop::NoGrowth => "curr_items stopped growing",
            FillStop::MaxSets => "--max-sets reached",
        })
    }
}

/// What a fill found.
#[derive(Debug)]
pub struct FillReport {
    /// The fill's options.
    pub options: FillOptions,
    /// The most items `curr_items` showed.
    pub items: u64,
    /// Sets sent.
    pub sets: u64,
    /// The server's memory limit (`limit_maxbytes`), if it reports one.
    pub limit_bytes: Option<u64>,
    /// Why it stopped.
    pub stop: FillStop,
    /// How long it took.
    pub elapsed: Duration,
}

impl FillReport {
    /// As one JSON object.
    pub fn to_json(&self) -> Value {
        json!({
            "server": self.options.target.server.to_string(), "key_size": self.options.key_size,
            "value_size": self.options.value_size.to_string(), "items": self.items, "sets": self.sets,
            "limit_maxbytes": self.limit_bytes, "stopped_because": self.stop.to_string(),
            "seconds": self.elapsed.as_secs_f64(),
        })
    }
}

impl fmt::Display for FillReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let limit = self.limit_bytes.map(|bytes| format!(" in {} MiB", bytes >> 20)).unwrap_or_default();
        writeln!(
            f,
            "{}: {} items fit{limit} ({} B keys, {} B values); stopped after {} sets in {:.1} s: {}",
            self.options.target.server,
            self.items,
            self.options.key_size,
            self.options.value_size,
            self.sets,
            self.elapsed.as_secs_f64(),
            self.stop
        )
    }
}

/// Fills the server and counts what it holds.
pub fn run_fill(options: &FillOptions) -> Result<FillReport, String> {
    let started = Instant::now();
    let server = &options.target.server;
    let space = KeySpace::new(options.max_sets, options.key_size)?;
    let mut clients = Clients::connect(&options.target, options.connections, 1, options.pin.clone())?;
    let connections = options.connections as u64;
    let phase = Phase { pipeline: options.pipeline, schedule: Schedule::ClosedLoop, duration: None };
    let counter = |stats: &ServerStats, name: &str| {
        stats.counter(name).ok_or_else(|| format!("{server} reports no {name} in `stats`"))
    };
    let initial = server.stats()?;
    let initial_evictions = counter(&initial, "evictions")?;
    let mut items = counter(&initial, "curr_items")?;
    if items > 0 {
        return Err(format!(
            "{server} already holds {items} items; fill counts what fits in an empty server (restart it)"
        ));
    }
    let mut sets = 0;
    let bar = progress_bar("fill", None);
    let stop = loop {
        if sets >= options.max_sets {
            break FillStop::MaxSets;
        }
        let batch_start = sets;
        let batch_end = (sets + options.batch).min(options.max_sets);
        let source_for = |connection: usize| {
            let connection = connection as u64;
            let order = Order::sequential_part(batch_start..batch_end, connection, connections);
            RequestSource::new(options.target.protocol, space, options.value_size, order, connection)
        };
        let outcome = clients.run(&phase, source_for, |_, _| bar.tick())?;
        sets = batch_end;
        let stats = server.stats()?;
        let now_items = counter(&stats, "curr_items")?;
        bar.set_message(format!("{sets} sets, {now_items} items"));
        let grew = now_items > items;
        items = items.max(now_items);
        if outcome.tally.errors > 0 {
            break FillStop::SetErrors;
        }
        if counter(&stats, "evictions")? > initial_evictions {
            break FillStop::Evictions;
        }
        if !grew {
            break FillStop::NoGrowth;
        }
    };
    bar.finish_and_clear();
    Ok(FillReport {
        options: options.clone(),
        items,
        sets,
        limit_bytes: server.stats()?.counter("limit_maxbytes"),
        stop,
        elapsed: started.elapsed(),
    })
}
