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

    /// Whether destination `dest` is marked TKO.
    pub fn is_tko(&self, dest: usize) -> bool {
        self.sender.is_tko(dest)
    }

    /// Whether destination `dest` has invalidations to catch up on (it gets no reads).
    pub fn is_behind(&self, dest: usize) -> bool {
        self.spools.is_behind(&self.sender.destinations[dest].address)
    }

    /// Sends `request` to destination `dest` and waits for its answer (or spools a delete).
    pub async fn send(&self, dest: usize, request: &Request, keep_routing_prefix: bool) -> Reply {
        let address = &self.sender.destinations[dest].address;
        if self.spool && self.spools(request) {
            let bytes = request.encode(keep_routing_prefix);
            return match self.spools.append(address, &bytes) {
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
            if let Err(e) = self.spools.append_missed(address, &invalidation(request, keep_routing_prefix)) {
                return Reply::Error(
                    ErrorKind::SpoolFull,
                    format!("{address} is down and missed this change, which its spool could not keep: {e}"),
                );
            }
        }
        reply
    }
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
