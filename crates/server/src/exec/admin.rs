//! Commands about the server rather than items: `stats`, `flush_all`, `version`, `verbosity`,
//! `quit`, `shutdown`, `refresh_certs`, and Shoal's `shm` (with `shm hints` and `shm handoff`),
//! `curve`, `tenant_memlimit` and `debugtime`.

use super::ops::flush_all;
use super::{push_u64, reply, reply_unless, Context, Flow, NO_CONNECTION};
use crate::stats;
use shoal_proto::{Request, ShutdownMode, Slabs};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::Ordering;

/// Executes a request that is not about items.
pub fn execute(cx: &mut Context<'_>, request: Request<'_>, out: &mut Vec<u8>) -> Flow {
    let shared = cx.shared;
    match request {
        Request::Stats(group) => {
            if !stats::answer(shared, group, out) {
                reply(out, b"ERROR");
            }
        }
        Request::FlushAll { delay, noreply } => {
            if flush_all(cx, delay) {
                reply_unless(noreply, out, b"OK");
            } else {
                reply(out, b"CLIENT_ERROR flush_all not allowed");
            }
        }
        Request::Version => {
            out.extend_from_slice(b"VERSION ");
            reply(out, crate::VERSION.as_bytes());
        }
        Request::Verbosity { level, noreply } => {
            shared.verbosity.store(level, Ordering::Relaxed);
            reply_unless(noreply, out, b"OK");
        }
        Request::CacheMemlimit { megabytes, noreply } => {
            reply_unless(noreply, out, cache_memlimit(shared, megabytes));
        }
        Request::TenantMemlimit { .. } if cx.bound.is_some() => {
            reply(out, b"SERVER_ERROR a tenant's own connection cannot resize tenants")
        }
        Request::TenantMemlimit { tenant, bytes } => {
            match shared.tenants.resize(tenant, bytes, shared.settings.region_bytes) {
                Ok(()) => reply(out, b"OK"),
                Err(why) => server_error(out, &why),
            }
        }
        Request::Quit => return Flow::Close,
        // memcached's answers with one class (1, as `stats items` reports; 0 is its page
        // pool) that never has a spare page: Shoal's segments are not slab pages to move.
        Request::Slabs(Slabs::Reassign { src, dst }) => reply(
            out,
            if src == dst {
                b"SAME src and dst class are identical"
            } else if !(0..=1).contains(&src) || !(0..=1).contains(&dst) {
                b"BADCLASS invalid src or dst class id"
            } else {
                b"NOSPARE source class has no spare pages"
            },
        ),
        Request::Slabs(Slabs::Automove { noreply }) => reply_unless(noreply, out, b"OK"),
        Request::Shutdown(mode) => {
            if !shared.settings.enable_shutdown {
                reply(out, b"ERROR: shutdown not enabled");
            } else if mode == ShutdownMode::Invalid {
                reply(out, b"CLIENT_ERROR invalid shutdown mode");
            } else {
                return Flow::Shutdown(mode);
            }
        }
        // A datagram proves nothing: with authentication on, the region is named only to an
        // authenticated connection (TCP and unix connections run no command before that).
        Request::Shm if cx.conn == NO_CONNECTION && shared.settings.auth_required() => reply(out, b"ERROR"),
        Request::Shm => match shared.tenants.local_tenant(cx.bound) {
            // SHM <region path> <cookie offset> <cookie>: a client that can open the path and
            // finds the cookie at the offset shares this server's memory (docs/PROTOCOL.md).
            Some(t) => {
                let writer = &shared.tenants.get(t).writer;
                out.extend_from_slice(b"SHM ");
                out.extend_from_slice(writer.path().as_os_str().as_encoded_bytes());
                out.push(b' ');
                push_u64(out, shoal_region::layout::COOKIE_OFFSET as u64);
                out.push(b' ');
                push_u64(out, writer.cookie());
                out.extend_from_slice(b"\r\n");
            }
            None => server_error(out, NO_LOCAL_TENANT),
        },
        Request::Digest => match &shared.digest {
            // VALUE digest 0 <bytes> with the snapshot (shoal_route::digest's format), END.
            Some(digest) => {
                let snapshot = digest.snapshot();
                out.extend_from_slice(b"VALUE digest 0 ");
                push_u64(out, snapshot.len() as u64);
                out.extend_from_slice(b"\r\n");
                out.extend_from_slice(&snapshot);
                out.extend_from_slice(b"\r\nEND\r\n");
            }
            None => reply(
                out,
                b"SERVER_ERROR digests are off: start the server with --digest-keys <expected keys>",
            ),
        },
        Request::Curve(Some(name)) if shared.tenants.by_name(name).is_none() => {
            server_error(out, &format!("no tenant named {}", String::from_utf8_lossy(name)))
        }
        Request::Curve(name) => {
            let i = name.and_then(|n| shared.tenants.index_of(n)).unwrap_or(shared.tenants.default_index());
            // Local clients' reads so far, not as of the last fold (up to 100 ms ago).
            shared.hints.fold(&shared.tenants, shared.local_reads());
            match shared.tenants.curve(i, &shared.tenant_counters).zip(shared.tenants.get(i).curve.as_ref()) {
                // STAT lines: the sampling rate, keys tracked, the local clients' sampled reads,
                // the step, then `hit_ratio <bytes> <ratio>` from 0 bytes up to the tenant's
                // largest size; END.
                Some(((points, rate, tracked), tracker)) => {
                    let local = tracker.local_reads();
                    let mut text = format!(
                    "STAT rate {rate}\r\nSTAT tracked {tracked}\r\nSTAT local_sampled {}\r\nSTAT local_outside {}\r\nSTAT local_refused {}\r\nSTAT local_lost {}\r\nSTAT step_bytes {}\r\n",
                    local.sampled.load(Ordering::Relaxed),
                    local.outside.load(Ordering::Relaxed),
                    local.refused.load(Ordering::Relaxed),
                    local.lost.load(Ordering::Relaxed),
                    points.step()
                );
                    for (i, ratio) in points.points().iter().enumerate() {
                        text.push_str(&format!("STAT hit_ratio {} {ratio:.6}\r\n", i as u64 * points.step()));
                    }
                    out.extend_from_slice(text.as_bytes());
                    out.extend_from_slice(b"END\r\n");
                }
                None => {
                    reply(out, b"SERVER_ERROR hit-ratio curves are off: start the server with --hit-curve")
                }
            }
        }
        Request::ShmHints(path) => {
            let path = std::path::Path::new(std::ffi::OsStr::from_bytes(path));
            let registered = match (cx.conn, shared.tenants.local_tenant(cx.bound)) {
                (NO_CONNECTION, _) => Err("hints need a connection".to_string()),
                (_, None) => Err(NO_LOCAL_TENANT.to_string()),
                (conn, Some(tenant)) => shared.hints.register(conn, tenant, path),
            };
            match registered {
                Ok(()) => reply(out, b"OK"),
                Err(why) => server_error(out, &why),
            }
        }
        // HANDOFF <token> <socket>: the token registers, on the socket, a hints area for this
        // connection (docs/PROTOCOL.md). Like `shm`, only an authenticated connection runs it.
        Request::ShmHandoff => match (cx.conn, shared.tenants.local_tenant(cx.bound)) {
            (NO_CONNECTION, _) => server_error(out, "hints need a connection"),
            (_, None) => server_error(out, NO_LOCAL_TENANT),
            (conn, Some(tenant)) => match shared.hints.offer(conn, tenant) {
                Ok((token, socket)) => {
                    shoal_proto::handoff::push_answer(out, &token, socket.as_os_str().as_bytes())
                }
                Err(why) => server_error(out, &why),
            },
        },
        // memcached's answers: OK, the loading error, or TLS being off.
        Request::RefreshCerts => match &shared.tls {
            Some(tls) => match tls.refresh(shared.clock.now()) {
                Ok(()) => reply(out, b"OK"),
                Err(why) => reply(out, why.as_bytes()),
            },
            None => reply(out, b"Error TLS not enabled"),
        },
        Request::DebugTime(seconds) => {
            if !shared.settings.test_mode {
                reply(out, b"ERROR");
            } else if seconds < 0 {
                reply(out, b"CLIENT_ERROR the clock only moves forward");
            } else {
                shared.clock.advance(seconds as u32, &shared.tenants);
                reply(out, b"OK");
            }
        }
        // Item commands are dispatched before this function.
        _ => reply(out, b"ERROR"),
    }
    Flow::Continue
}

/// `SERVER_ERROR <why>`.
fn server_error(out: &mut Vec<u8>, why: &str) {
    out.extend_from_slice(b"SERVER_ERROR ");
    reply(out, why.as_bytes());
}

/// `cache_memlimit <megabytes>`, with memcached's answers. The limit is on item memory (the
/// region's segments, whole ones), as memcached's is on slab memory — the index, like
/// memcached's hash table, is not counted. Shrinking evicts the oldest segments and gives
/// their memory back; growing uses the room the region was created with (`--memory-max`,
/// [`crate::memory`]), and past it fails.
fn cache_memlimit(shared: &crate::state::Shared, megabytes: u32) -> &'static [u8] {
    if shared.tenants.configured() {
        return b"SERVER_ERROR with --tenants, size each tenant with tenant_memlimit <tenant> <bytes>";
    }
    if megabytes < 8 {
        return b"MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m";
    }
    if megabytes > 1_000_000_000 {
        return b"MEMLIMIT_ADJUST_FAILED input value is megabytes not bytes";
    }
    let bytes = megabytes as usize * (1 << 20);
    match shared.tenants.default_tenant().writer.set_limit(bytes) {
        Ok(_) => {
            shared.memlimit.store(bytes as u64, Ordering::Relaxed);
            b"OK"
        }
        Err(_) => b"MEMLIMIT_ADJUST_FAILED out of bounds or unable to adjust",
    }
}

/// Why `shm` names no region to a connection whose keys may be several tenants'.
const NO_LOCAL_TENANT: &str =
    "local reads need a connection bound to one tenant (its own listener or user): keys here go to tenants by prefix";
