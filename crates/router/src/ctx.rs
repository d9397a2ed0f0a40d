//! [`Ctx`], what a route handle needs to carry out a request: the transport's [`Sender`] for
//! the destinations of the configuration the request started with, the spools, and how to
//! send (spooled or not, TKO marks heeded or not). The layer between the route tree
//! (`route.rs`) and the transport (`dest.rs`), which knows nothing of routes.
//!
//! It also keeps invalidations across outages (docs/design/faults.md): a change (any request
//! but a read or `flush_all`) that a destination does not take because it is down, TKO or too
//! slow is spooled for it as a delete of the key, delivered when it answers again; until its
//! spool drains the destination is *behind*: the answers to its reads are not used (they fail
//! as if it were TKO, so failover routes read elsewhere meanwhile).

use crate::dest::Sender;
use crate::request::{ErrorKind, Op, Reply, Request};
use shoal_spool::Spools;
use std::sync::Arc;

/// What a route handle needs to carry out a request.
#[derive(Clone)]
pub struct Ctx {
    /// Sends to the configuration's destinations, by index, from this worker.
    pub sender: Sender,
    /// Spools of deletes that must reach their destination.
    pub spools: Arc<Spools>,
    /// Deletes are written to spools instead of sent (under `AllAsyncRoute`, `/*/*/`).
    pub spool: bool,
    /// Ignore TKO marks (too many of a pool are TKO: fail open).
    pub fail_open: bool,
    /// Picks `LatestRoute`'s children, once per router.
    pub latest_seed: usize,
}

impl Ctx {
    /// Whether `request` goes to spools under `AllAsyncRoute` (deletes do).
    pub fn spools(&self, request: &Request) -> bool {
        request.op == Op::Delete
    }

    /// How many of the destinations `dests` are marked TKO.
    pub fn count_tko(&self, dests: impl IntoIterator<Item = usize>) -> usize {
        self.sender.count_tko(dests)
    }

    /// Whether destination `dest` has invalidations to catch up on (it gets no reads).
    pub fn is_behind(&self, dest: usize) -> bool {
        self.spools.is_behind(&self.sender.destinations[dest].address)
    }

    /// Sends `request` to destination `dest` and waits for its answer (or spools a delete).
    pub async fn send(&self, dest: usize, request: &Request, keep_routing_prefix: bool) -> Reply {
        let address = &self.sender.destinations[dest].address;
        if self.spool && self.spools(request) {
            let (spools, to, bytes) =
                (Arc::clone(&self.spools), address.clone(), request.encode(keep_routing_prefix));
            return match off_worker(move || spools.append(&to, &bytes)).await {
                Ok(()) => Reply::Answer(b"DELETED\r\n".to_vec()),
                Err(e) => Reply::Error(ErrorKind::Connect, format!("spool for {address}: {e}")),
            };
        }
        // A read of a destination catching up is still sent, so that its health counts as
        // before (a down one goes TKO), but its answer, which may be stale, is not used.
        let behind = request.op.is_read() && self.spools.is_behind(address);
        let encode = |out: &mut Vec<u8>| request.encode_into(keep_routing_prefix, out);
        let reply = self.sender.exchange(dest, encode, request.shape(), self.fail_open).await;
        if behind && !reply.is_error() {
            return Reply::Error(
                ErrorKind::Tko,
                format!(
                    "{address} is catching up on invalidations it missed (no reads until its spool drains)"
                ),
            );
        }
        let missed =
            matches!(reply.error_kind(), Some(ErrorKind::Connect | ErrorKind::Timeout | ErrorKind::Tko));
        if missed && changes(request.op) {
            let (spools, to, record) =
                (Arc::clone(&self.spools), address.clone(), invalidation(request, keep_routing_prefix));
            if let Err(e) = off_worker(move || spools.append_missed(&to, &record)).await {
                return Reply::Error(
                    ErrorKind::SpoolFull,
                    format!("{address} is down and missed this change, which its spool could not keep: {e}"),
                );
            }
        }
        reply
    }
}

/// Runs a spool append off this worker. The router's spools fsync before an append returns
/// (a change a down destination missed must survive a `kill -9` before the client hears
/// back), and a worker is one single-threaded runtime: a slow flush run on it would stall
/// every connection it serves, requests to healthy destinations among them. On a blocking
/// thread only the request whose answer needs the flush waits for it.
async fn off_worker(append: impl FnOnce() -> std::io::Result<()> + Send + 'static) -> std::io::Result<()> {
    tokio::task::spawn_blocking(append)
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(format!("the spool's append stopped: {e}"))))
}

/// Whether `op` changes or removes its key (what a destination that missed it must delete).
fn changes(op: Op) -> bool {
    !op.is_read() && op != Op::FlushAll
}

/// The delete that stands for a change a destination missed: `delete <key>`, or for a key no
/// text command can carry, `md <base64 key> b`.
pub(crate) fn invalidation(request: &Request, keep_routing_prefix: bool) -> Vec<u8> {
    let key = if keep_routing_prefix { &request.key[..] } else { request.routed_key() };
    if shoal_proto::valid_key(key) {
        return Request::delete(&request.key, request.prefix_len).encode(keep_routing_prefix);
    }
    let mut line = b"md ".to_vec();
    shoal_proto::encode_base64(key, &mut line);
    line.extend_from_slice(b" b\r\n");
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slow_flush_stalls_only_the_append_waiting_for_it_not_its_worker() {
        use shoal_spool::{Durability, Syncer};
        use std::sync::{Condvar, Mutex};
        let dir = std::env::temp_dir().join(format!("shoal-router-ctx-{}", std::process::id()));
        // A disk whose flush waits until the test lets it go.
        let gate = Arc::new((Mutex::new(false), Condvar::new()));
        let held = Arc::clone(&gate);
        let syncer = Syncer::new(move |_| {
            let (open, turned) = &*held;
            let guard = open.lock().unwrap();
            let (_guard, waited) =
                turned.wait_timeout_while(guard, std::time::Duration::from_secs(60), |open| !*open).unwrap();
            assert!(!waited.timed_out(), "the test never let the flush go");
            Ok(())
        });
        let spools =
            Spools::open_durable(&dir, 1 << 20, "test", Durability::EveryAppend, syncer, None).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let appending = {
                let spools = Arc::clone(&spools);
                tokio::spawn(off_worker(move || spools.append_missed("127.0.0.1:1", b"delete k\r\n")))
            };
            // The worker serves other tasks while the flush is held: this one runs to the end.
            let other = tokio::spawn(async { tokio::task::yield_now().await });
            tokio::time::timeout(std::time::Duration::from_secs(30), other).await.unwrap().unwrap();
            assert!(!appending.is_finished(), "the append waits for its flush");
            *gate.0.lock().unwrap() = true;
            gate.1.notify_all();
            let appended = tokio::time::timeout(std::time::Duration::from_secs(30), appending).await;
            appended.expect("the append ends once its flush does").unwrap().unwrap();
        });
        assert!(spools.is_behind("127.0.0.1:1"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_missed_change_is_spooled_as_a_delete_of_its_key() {
        let text = Request::delete(b"/a/b/k", 5);
        assert_eq!(invalidation(&text, false), b"delete k\r\n");
        assert_eq!(invalidation(&text, true), b"delete /a/b/k\r\n");
        let spaced = Request::delete(b"a b", 0);
        assert_eq!(invalidation(&spaced, false), b"md YSBi b\r\n");
        assert!(changes(Op::Set) && changes(Op::MetaDelete) && changes(Op::Touch) && changes(Op::LeaseSet));
        assert!(!changes(Op::Get) && !changes(Op::LeaseGet) && !changes(Op::FlushAll));
    }
}
