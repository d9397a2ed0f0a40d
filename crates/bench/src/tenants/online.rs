//! The online side of `shoal bench tenants`: each tenant's rounds against a real server, with a
//! share of its reads (`--local`) served from the tenant's region through shoal-client's
//! shared-memory path, and at the end, with `--curves`, what the server's curves predict at the
//! sizes in force.
//!
//! ```text
//!  round, per tenant: keys ─┬─ dice < --local ─► Client::get_many (region, no system call;
//!                           │                    sampled reads reach the curve via the hints)
//!                           └─ otherwise ──────► get k1 k2 … on the tenant's connection
//!                  misses ─► set … noreply on that connection, then `mn` (the sets are in
//!                            before the next round reads locally)
//!  --curves: stats tenants + curve <t> ─► size, the curve's hit ratio there, on a cliff?
//! ```

use super::TenantsOptions;
use crate::random::Rng;
use serde_json::{json, Value};
use shoal_client::{Client, CommandAnswer, Options};
use shoal_curves::{parse_curve, SIZE_ERROR};
use shoal_proto::{Limits, MAX_VALUE_BYTES};
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Where one tenant's requests go: its own connection (to its `server=` listener, else
/// `--server`) and, with `--local`, a client reading the region that listener names.
pub(super) struct Endpoint {
    writer: BufWriter<TcpStream>,
    reader: BufReader<TcpStream>,
    local: Option<Client>,
    /// Which reads are local: its own stream, so the keys stay those `--offline` replays.
    dice: Rng,
    line: String,
    value: Vec<u8>,
}

/// What one batch of reads found.
pub(super) struct Found {
    pub hits: Vec<bool>,
    pub local_reads: u64,
}

impl Endpoint {
    /// Connects to `address`; with `local > 0`, also reads through its region, or says why not.
    pub(super) fn connect(address: &str, local: f64, seed: u64) -> Result<Endpoint, String> {
        let stream = TcpStream::connect(address).map_err(|e| format!("{address}: {e}"))?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        stream.set_read_timeout(Some(Duration::from_secs(30))).map_err(|e| e.to_string())?;
        let reader = BufReader::new(stream.try_clone().map_err(|e| e.to_string())?);
        let local = if local > 0.0 {
            let mut client =
                Client::connect(address, Options::default()).map_err(|e| format!("{address}: {e}"))?;
            if !client.is_local() {
                return Err(format!(
                    "{address} offers no shared memory to this process: --local needs a `shoal server` on this host and, with tenants by prefix, each tenant's own listener (server=<its address> in --tenant)"
                ));
            }
            Some(client)
        } else {
            None
        };
        Ok(Endpoint {
            writer: BufWriter::new(stream),
            reader,
            local,
            dice: Rng::new(seed ^ 0x10ca_1d1c_e000_0000),
            line: String::new(),
            value: Vec::new(),
        })
    }

    /// Reads `keys`, a `local` share of them from the region; which were found.
    pub(super) fn read(&mut self, keys: &[String], local: f64) -> Result<Found, String> {
        let mut hits = vec![false; keys.len()];
        let (mut near, mut far) = (Vec::new(), Vec::new());
        for i in 0..keys.len() {
            if self.local.is_some() && self.dice.next_f64() < local {
                near.push(i);
            } else {
                far.push(i);
            }
        }
        if let Some(client) = &mut self.local {
            let asked: Vec<&[u8]> = near.iter().map(|&i| keys[i].as_bytes()).collect();
            let items = client.get_many(&asked).map_err(|e| format!("local read: {e}"))?;
            mark_found(&near, keys, items.iter().map(|(k, _)| k.as_slice()), &mut hits);
        }
        if !far.is_empty() {
            let asked: Vec<&str> = far.iter().map(|&i| keys[i].as_str()).collect();
            let found = multiget(&mut self.writer, &mut self.reader, &asked, &mut self.line)?;
            for (&i, hit) in far.iter().zip(found) {
                hits[i] = hit;
            }
        }
        Ok(Found { hits, local_reads: near.len() as u64 })
    }

    /// Sets the keys read and missed (look-aside: the application fills from its database).
    pub(super) fn fill(&mut self, keys: &[String], hits: &[bool], value_bytes: usize) -> Result<(), String> {
        self.value.resize(value_bytes, b'v');
        let w = &mut self.writer;
        for (key, _) in keys.iter().zip(hits).filter(|(_, hit)| !**hit) {
            write!(w, "set {key} 0 0 {value_bytes} noreply\r\n")
                .and_then(|()| w.write_all(&self.value))
                .and_then(|()| w.write_all(b"\r\n"))
                .map_err(|e| e.to_string())?;
        }
        if self.local.is_some() {
            // Local reads do not queue behind the connection: wait until the sets are in.
            w.write_all(b"mn\r\n").and_then(|()| w.flush()).map_err(|e| e.to_string())?;
            self.line.clear();
            self.reader.read_line(&mut self.line).map_err(|e| format!("waiting for mn: {e}"))?;
            if self.line != "MN\r\n" {
                return Err(format!("unexpected answer to mn: {:?}", self.line));
            }
        }
        Ok(())
    }

    pub(super) fn flush(&mut self) -> Result<(), String> {
        self.writer.flush().map_err(|e| e.to_string())
    }
}

/// Marks `hits[asked[j]]` for each key found, given in the order asked.
fn mark_found<'a>(
    asked: &[usize],
    keys: &[String],
    found: impl Iterator<Item = &'a [u8]>,
    hits: &mut [bool],
) {
    let mut at = 0;
    for key in found {
        while at < asked.len() && keys[asked[at]].as_bytes() != key {
            at += 1;
        }
        if at < asked.len() {
            hits[asked[at]] = true;
            at += 1;
        }
    }
}

/// One multiget; which keys were found.
fn multiget(
    writer: &mut BufWriter<TcpStream>,
    reader: &mut BufReader<TcpStream>,
    keys: &[&str],
    line: &mut String,
) -> Result<Vec<bool>, String> {
    writer.write_all(b"get").map_err(|e| e.to_string())?;
    for k in keys {
        writer.write_all(b" ").and_then(|()| writer.write_all(k.as_bytes())).map_err(|e| e.to_string())?;
    }
    writer.write_all(b"\r\n").and_then(|()| writer.flush()).map_err(|e| e.to_string())?;
    let mut found = vec![false; keys.len()];
    let mut at = 0;
    loop {
        line.clear();
        reader.read_line(line).map_err(|e| format!("reading the server's answer: {e}"))?;
        if line == "END\r\n" {
            return Ok(found);
        }
        let mut words = line.split_ascii_whitespace();
        let (Some("VALUE"), Some(key), _, Some(len)) =
            (words.next(), words.next(), words.next(), words.next())
        else {
            return Err(format!("unexpected answer to a get: {line:?}"));
        };
        let len: usize = len.parse().map_err(|_| format!("bad length in {line:?}"))?;
        // Answers come in request order: find the key from where the last one was.
        while at < keys.len() && keys[at] != key {
            at += 1;
        }
        if at < keys.len() {
            found[at] = true;
            at += 1;
        }
        std::io::copy(&mut reader.by_ref().take(len as u64 + 2), &mut std::io::sink())
            .map_err(|e| e.to_string())?;
    }
}

/// Bounds on the answers `--curves` reads: a curve has a few hundred lines.
const LIMITS: Limits = Limits { line: 4096, value: MAX_VALUE_BYTES, stat_lines: 100_000 };

/// Per tenant the server lists: its size, its curve's hit ratio there and whether that size
/// is on one of its curve's cliffs (within [`SIZE_ERROR`] and a step above a steep drop).
pub(super) fn curves_at_sizes(o: &TenantsOptions) -> Result<Value, String> {
    let options = Options { local: false, ..Options::default() };
    let mut client =
        Client::connect(&o.server, options).map_err(|e| format!("--server {}: {e}", o.server))?;
    let mut ask = |command: &str| match client.command(command, &LIMITS) {
        Ok(CommandAnswer::Stats(lines)) => Ok(lines),
        Ok(CommandAnswer::Line(line)) => Err(format!("{command}: {line}")),
        Err(e) => Err(format!("{command}: {e}")),
    };
    let mut sizes: Vec<(String, u64)> = Vec::new();
    for line in ask("stats tenants")? {
        let Some((name, value)) = line.split_once(' ') else { continue };
        if let Some(tenant) = name.strip_suffix(":limit_maxbytes") {
            sizes.push((tenant.to_string(), value.parse().map_err(|_| format!("{line:?}: size"))?));
        }
    }
    let mut tenants = Vec::new();
    for (tenant, size) in sizes {
        let answer = ask(&format!("curve {tenant}"))?;
        let curve = parse_curve(&answer)?;
        // What the clients' sampled local reads did (local_sampled, local_outside, local_lost, …).
        let local: serde_json::Map<String, Value> = answer
            .iter()
            .filter_map(|l| l.split_once(' ').filter(|(name, _)| name.starts_with("local_")))
            .map(|(name, value)| (name.to_string(), value.parse::<u64>().map_or(Value::Null, Value::from)))
            .collect();
        tenants.push(json!({"tenant": tenant, "size_bytes": size, "curve_hit_ratio": curve.hit_ratio(size),
            "on_cliff": curve.on_cliff(size, SIZE_ERROR), "curve_step_bytes": curve.step(),
            "local": local, "curve": curve.points()}));
    }
    Ok(Value::Array(tenants))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn found_keys_are_marked_in_the_order_asked() {
        let keys: Vec<String> = ["a", "b", "c", "d"].iter().map(|k| k.to_string()).collect();
        let mut hits = vec![false; 4];
        mark_found(&[0, 2, 3], &keys, [b"c".as_slice(), b"d".as_slice()].into_iter(), &mut hits);
        assert_eq!(hits, [false, false, true, true]);
    }
}
