//! `shoal region …` (feature `cli`): region files from the command line, and the region's own
//! benchmark ([`bench`](mod@bench)). The `shoal` program parses it into [`RegionArgs`] and
//! calls [`run`].

pub mod bench;

use crate::layout::{BUCKET_SLOTS, COOKIE_OFFSET};
use crate::{Config, Layout, Lookup, Reader, RegionError, Writer};
use clap::{Args, Subcommand};
use serde_json::json;
use std::path::{Path, PathBuf};

/// Default region path: POSIX shared memory.
pub const DEFAULT_REGION: &str = "/dev/shm/shoal-default";

#[derive(Args)]
pub struct RegionArgs {
    #[command(subcommand)]
    command: RegionCommand,
}

#[derive(Subcommand)]
enum RegionCommand {
    /// Create a region (or attach to an existing compatible one) and print its layout.
    Create(CreateArgs),
    /// Print the layout and counters of an existing region, read-only.
    Info(InfoArgs),
    /// Store a value (attaches as the writer, so no server may be running on the region).
    Set(SetArgs),
    /// Read a value through a read-only mapping, as a co-located client does.
    Get(GetArgs),
    /// Measure get/set cost and metadata per item (see docs/BENCHMARKS.md).
    Bench(bench::BenchArgs),
}

/// Size options shared by every subcommand that may create a region.
#[derive(Args, Clone)]
pub struct SizeArgs {
    /// Region size in MiB (the memory limit, index included).
    #[arg(short = 'm', long, default_value_t = 64)]
    pub memory_mb: usize,
    /// Maximum item size in bytes (memcached's -I).
    #[arg(short = 'I', long, default_value_t = 1 << 20)]
    pub max_item_bytes: usize,
    /// Average item size the index is sized for (header + key + value bytes).
    #[arg(long, default_value_t = 128)]
    pub avg_item_bytes: usize,
}

impl SizeArgs {
    pub fn config(&self) -> Config {
        Config {
            region_bytes: self.memory_mb << 20,
            max_item_bytes: self.max_item_bytes,
            avg_item_bytes: self.avg_item_bytes,
        }
    }
}

#[derive(Args)]
struct CreateArgs {
    /// Region file (POSIX shm, tmpfs, hugetlbfs or a device).
    #[arg(long, default_value = DEFAULT_REGION)]
    path: PathBuf,
    #[command(flatten)]
    size: SizeArgs,
    /// Replace whatever the file holds with a fresh region.
    #[arg(long)]
    force: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct InfoArgs {
    /// Region file.
    #[arg(default_value = DEFAULT_REGION)]
    path: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct SetArgs {
    /// Key (text-protocol rules: no spaces or control characters).
    key: String,
    /// Value.
    value: String,
    /// Region file.
    #[arg(long, default_value = DEFAULT_REGION)]
    path: PathBuf,
    /// Client flags.
    #[arg(long, default_value_t = 0)]
    flags: u32,
    /// Expiry (memcached rules: 0 never, up to 30 days relative, else Unix time).
    #[arg(long, default_value_t = 0)]
    exptime: i64,
}

#[derive(Args)]
struct GetArgs {
    /// Key.
    key: String,
    /// Region file.
    #[arg(long, default_value = DEFAULT_REGION)]
    path: PathBuf,
}

pub fn run(args: RegionArgs) -> Result<(), String> {
    match args.command {
        RegionCommand::Create(a) => create(a),
        RegionCommand::Info(a) => info(a),
        RegionCommand::Set(a) => set(a),
        RegionCommand::Get(a) => get(a),
        RegionCommand::Bench(a) => bench::run(a),
    }
}

fn at(path: &Path) -> impl FnOnce(RegionError) -> String + '_ {
    move |e| format!("{}: {e}", path.display())
}

fn create(a: CreateArgs) -> Result<(), String> {
    let config = a.size.config();
    let writer = if a.force && a.path.exists() {
        Writer::format(&a.path, &config, true)
    } else {
        Writer::open_or_create(&a.path, &config, true)
    }
    .map_err(at(&a.path))?;
    print_layout(&a.path, writer.layout(), writer.generation(), writer.clock(), a.json);
    Ok(())
}

fn info(a: InfoArgs) -> Result<(), String> {
    let reader = Reader::open(&a.path).map_err(at(&a.path))?;
    print_layout(&a.path, reader.layout(), reader.generation(), reader.clock(), a.json);
    Ok(())
}

fn print_layout(path: &Path, l: &Layout, generation: u64, clock: u32, as_json: bool) {
    let item_capacity = l.bucket_count * BUCKET_SLOTS;
    if as_json {
        let v = json!({
            "path": path, "layout_version": l.version(),
            "region_bytes": l.region_bytes, "segment_bytes": l.segment_bytes,
            "segment_count": l.segment_count, "bucket_count": l.bucket_count,
            "index_slots": item_capacity, "index_offset": l.index_offset,
            "table_offset": l.table_offset, "segments_offset": l.segments_offset,
            "max_item_bytes": l.max_item_bytes, "cookie_offset": COOKIE_OFFSET,
            "cookie": format!("{:016x}", l.cookie), "generation": generation, "clock": clock,
        });
        println!("{v:#}");
        return;
    }
    println!("region        {}", path.display());
    println!("layout        version {}", l.version());
    println!("size          {} bytes ({} MiB)", l.region_bytes, l.region_bytes >> 20);
    println!("header        0..{}", l.index_offset);
    println!(
        "index         {}..{}  {} buckets × 7 slots = {} slots ({} MiB)",
        l.index_offset,
        l.index_offset + l.index_bytes(),
        l.bucket_count,
        item_capacity,
        l.index_bytes() >> 20
    );
    println!("segment table {}..{}", l.table_offset, l.segments_offset);
    println!(
        "segments      {}..{}  {} × {} KiB",
        l.segments_offset,
        l.segments_offset + l.segment_count * l.segment_bytes,
        l.segment_count,
        l.segment_bytes >> 10
    );
    println!("max item      {} bytes", l.max_item_bytes);
    println!("cookie        {:016x} at offset {}", l.cookie, COOKIE_OFFSET);
    println!("generation    {generation}");
    println!("server clock  {clock}");
}

fn set(a: SetArgs) -> Result<(), String> {
    check_text_key(&a.key)?;
    let writer = Writer::open(&a.path, true).map_err(at(&a.path))?;
    let outcome =
        writer.set(a.key.as_bytes(), a.value.as_bytes(), a.flags, a.exptime).map_err(|e| e.to_string())?;
    println!("{outcome:?}");
    Ok(())
}

fn get(a: GetArgs) -> Result<(), String> {
    check_text_key(&a.key)?;
    let reader = Reader::open(&a.path).map_err(at(&a.path))?;
    let mut value = Vec::new();
    match reader.get(a.key.as_bytes(), &mut value).map_err(|e| e.to_string())? {
        Lookup::Hit(info) => {
            println!("VALUE {} {} {} cas {}", a.key, info.flags, value.len(), info.cas);
            println!("{}", String::from_utf8_lossy(&value));
            Ok(())
        }
        miss => Err(format!("{}: {miss:?}", a.key)),
    }
}

/// The text protocol's key rule, with the fix in the message.
fn check_text_key(key: &str) -> Result<(), String> {
    if shoal_proto::valid_key(key.as_bytes()) {
        Ok(())
    } else {
        Err(format!(
            "invalid key {key:?}: keys are 1 to {} bytes without spaces or control characters",
            shoal_proto::KEY_MAX
        ))
    }
}
