//! Route handles: the tree a configuration builds, and how each one carries out a request.
//!
//! Semantics follow mcrouter's handles of the same names. Every handle is asynchronous; the
//! leaves send to destinations through [`Ctx`]. Deletes under `AllAsyncRoute` (and `/*/*/`
//! broadcasts) are written to each destination's spool before the client hears back, and
//! delivered from there in order (see `shoal-spool`): nothing is lost if a destination is down
//! or the router is killed. Hot keys' replicas are `hot`'s.

pub(crate) mod hot;

use crate::ctx::Ctx;
use crate::provisioned::{Provisioned, MIGRATE_TTL};
pub use crate::request::Op;
use crate::request::{ErrorKind, Reply, Request};
use hot::{HotPool, Plan};
use shoal_route::{Placement, ProteusRing};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// `AllSyncRoute` and its siblings: how a request sent to every child is answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllMode {
    /// Wait for every child; answer the worst reply (an error, else a miss, else the first).
    Sync,
    /// Answer at once; the children are sent to in the background (deletes: spooled first).
    Async,
    /// Answer the first child's reply; the others in the background.
    Initial,
    /// Answer the first reply that is not an error.
    Fastest,
    /// Answer once a majority of children agree (hit, miss or error).
    Majority,
}

/// `ModifyExptimeRoute`'s action.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExptimeAction {
    /// Replace the expiry.
    Set,
    /// At most this expiry: 0 (never) and anything later become it (Gutter's clamp).
    Min,
}

/// Which errors send a request on to the next child of a `FailoverRoute`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FailoverErrors {
    pub connect: bool,
    pub timeout: bool,
    pub tko: bool,
    pub remote: bool,
}

impl FailoverErrors {
    /// mcrouter's default: every error fails over.
    pub fn all() -> FailoverErrors {
        FailoverErrors { connect: true, timeout: true, tko: true, remote: true }
    }

    /// None yet (a `failover_errors` list adds them).
    pub fn none() -> FailoverErrors {
        FailoverErrors { connect: false, timeout: false, tko: false, remote: false }
    }

    fn covers(self, kind: ErrorKind) -> bool {
        match kind {
            ErrorKind::Connect => self.connect,
            ErrorKind::Timeout => self.timeout,
            ErrorKind::Tko => self.tko,
            ErrorKind::Remote | ErrorKind::Route => self.remote,
            ErrorKind::SpoolFull => false,
        }
    }
}

/// A child route, shared (background sends keep it alive after the client's answer).
pub type Child = Arc<Route>;

/// A route handle.
#[derive(Debug)]
pub enum Route {
    /// One server (index into the configuration's destinations).
    Destination { dest: usize, keep_routing_prefix: bool },
    /// `PoolRoute` / `HashRoute`: the child the placement names for the key (of a
    /// power-proportional pool: among its active servers, see `provisioned.rs`).
    /// With `hot`, a hot key is read from one of its replicas and changes delete the copies
    /// (`hot.rs`).
    Hash {
        children: Vec<Child>,
        placement: Arc<Placement>,
        provisioned: Option<Arc<Provisioned>>,
        hot: Option<Arc<HotPool>>,
    },
    /// `FailoverRoute` (and `FailoverWithExptimeRoute`): the first child, then the next while
    /// the reply is an error of a covered kind.
    Failover { children: Vec<Child>, errors: FailoverErrors },
    /// `MissFailoverRoute`: reads go on to the next child while they miss.
    MissFailover(Vec<Child>),
    /// `All*Route`.
    All(AllMode, Vec<Child>),
    /// `LatestRoute`: a failover over `failover_count` children chosen once per router.
    Latest { children: Vec<Child>, failover_count: usize },
    /// `WarmUpRoute`: a cold pool filled from a warm one on misses.
    WarmUp { cold: Child, warm: Child, exptime: i64 },
    /// `OperationSelectorRoute`.
    OperationSelector { policies: Vec<(Op, Child)>, default: Option<Child> },
    /// `PrefixSelectorRoute`: the longest matching key prefix's route, else the wildcard.
    PrefixSelector { policies: Vec<(Vec<u8>, Child)>, wildcard: Option<Child> },
    /// `ModifyExptimeRoute`.
    ModifyExptime { target: Child, exptime: i64, action: ExptimeAction },
    /// `NullRoute`: answers as if nothing were there, sends nothing.
    Null,
    /// `ErrorRoute`: answers `SERVER_ERROR <message>`.
    Error(String),
}

/// A request's one destination under a placement-only route ([`Route::direct`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Direct {
    pub dest: usize,
    pub keep_routing_prefix: bool,
    /// Its pool is mostly TKO: send regardless of the marks.
    pub fail_open: bool,
}

/// A future a route handle returns.
pub type Routing<'a> = Pin<Box<dyn Future<Output = Reply> + 'a>>;

/// The expiry `ModifyExptimeRoute` gives a request.
pub fn modified_exptime(exptime: i64, target: i64, action: ExptimeAction) -> i64 {
    match action {
        ExptimeAction::Set => target,
        ExptimeAction::Min if exptime < 0 => exptime,
        ExptimeAction::Min if exptime == 0 || exptime > target => target,
        ExptimeAction::Min => exptime,
    }
}

impl Route {
    /// Carries out `request` along this route.
    pub fn execute<'a>(self: &'a Arc<Self>, request: &'a Request, ctx: &'a Ctx) -> Routing<'a> {
        Box::pin(async move {
            match &**self {
                Route::Destination { dest, keep_routing_prefix } => {
                    ctx.send(*dest, request, *keep_routing_prefix).await
                }
                Route::Hash { children, placement, provisioned, hot } => {
                    let open;
                    let ctx = if !ctx.fail_open && mostly_tko(children, ctx) {
                        // Too much of the pool is marked down to trust the marks: fail open.
                        open = Ctx { fail_open: true, ..ctx.clone() };
                        &open
                    } else {
                        ctx
                    };
                    let owner = async {
                        match (provisioned, placement.proteus()) {
                            (Some(p), Some(ring)) => proteus(p, ring, children, request, ctx).await,
                            _ => children[placement.owner(request.routed_key())].execute(request, ctx).await,
                        }
                    };
                    let Some(hot) = hot else { return owner.await };
                    match hot.plan(placement, provisioned.as_deref(), request) {
                        Plan::Owner => owner.await,
                        Plan::ReadCopyMoved { copy, owner: new_owner } => {
                            let (copy, new_owner) = (&children[copy], &children[new_owner]);
                            crate::route::hot::read_copy_moved(hot, copy, new_owner, owner, request, ctx)
                                .await
                        }
                        Plan::ReadCopy { copy, owner } => {
                            crate::route::hot::read_copy(hot, &children[copy], &children[owner], request, ctx)
                                .await
                        }
                        Plan::WriteAll(replicas, refill) => {
                            let reply = owner.await;
                            crate::route::hot::delete_copies(&replicas, children, request, ctx).await;
                            if let Some(refill) = refill {
                                crate::route::hot::refill_copies(hot, refill, children, request, &reply, ctx)
                                    .await;
                            }
                            reply
                        }
                    }
                }
                Route::Failover { children, errors } => failover(children, *errors, request, ctx).await,
                Route::Latest { children, failover_count } => {
                    let start = ctx.latest_seed % children.len();
                    let chosen: Vec<Child> = (0..(*failover_count).min(children.len()))
                        .map(|i| children[(start + i) % children.len()].clone())
                        .collect();
                    failover(&chosen, FailoverErrors::all(), request, ctx).await
                }
                Route::MissFailover(children) => {
                    let mut last = children[0].execute(request, ctx).await;
                    if request.op.is_read() {
                        for child in &children[1..] {
                            if last.is_hit() {
                                break;
                            }
                            last = child.execute(request, ctx).await;
                        }
                    }
                    last
                }
                Route::All(mode, children) => all(*mode, children, request, ctx).await,
                Route::WarmUp { cold, warm, exptime } => warm_up(cold, warm, *exptime, request, ctx).await,
                Route::OperationSelector { policies, default } => {
                    match policies
                        .iter()
                        .find(|(op, _)| *op == request.op)
                        .map(|(_, r)| r)
                        .or(default.as_ref())
                    {
                        Some(route) => route.execute(request, ctx).await,
                        None => null_reply(request),
                    }
                }
                Route::PrefixSelector { policies, wildcard } => {
                    let key = request.routed_key();
                    match policies
                        .iter()
                        .find(|(p, _)| key.starts_with(p))
                        .map(|(_, r)| r)
                        .or(wildcard.as_ref())
                    {
                        Some(route) => route.execute(request, ctx).await,
                        None => null_reply(request),
                    }
                }
                Route::ModifyExptime { target, exptime, action } => {
                    if request.op.sets_expiry() {
                        let modified =
                            request.with_exptime(modified_exptime(request.exptime, *exptime, *action));
                        target.execute(&modified, ctx).await
                    } else {
                        target.execute(request, ctx).await
                    }
                }
                Route::Null => null_reply(request),
                Route::Error(message) => Reply::Error(ErrorKind::Route, message.clone()),
            }
        })
    }

    /// Where `request` goes when this route is nothing but placement (a server, or a
    /// `PoolRoute`/`HashRoute` over servers), so that a multiget's keys for one server can
    /// travel together; `None` for any other handle, and for a destination catching up on
    /// invalidations it missed (its reads fail one by one, as the route says).
    pub fn direct(&self, request: &Request, ctx: &Ctx) -> Option<Direct> {
        let direct = self.placed(request, ctx)?;
        (!ctx.is_behind(direct.dest)).then_some(direct)
    }

    /// [`Route::direct`]'s destination, behind or not.
    fn placed(&self, request: &Request, ctx: &Ctx) -> Option<Direct> {
        match self {
            Route::Destination { dest, keep_routing_prefix } => Some(Direct {
                dest: *dest,
                keep_routing_prefix: *keep_routing_prefix,
                fail_open: ctx.fail_open,
            }),
            // During a Proteus transition old owners may be asked: key by key, not batched.
            Route::Hash { provisioned: Some(p), .. } if p.in_transition() => None,
            // A hot key's read or change goes through the route: replicas, not just the owner.
            Route::Hash { hot: Some(hot), .. } if hot.spreads(request) => None,
            Route::Hash { children, placement, provisioned, .. } => {
                match &*children[hash_owner(placement, provisioned.as_deref(), request.routed_key())] {
                    Route::Destination { dest, keep_routing_prefix } => Some(Direct {
                        dest: *dest,
                        keep_routing_prefix: *keep_routing_prefix,
                        fail_open: ctx.fail_open || mostly_tko(children, ctx),
                    }),
                    _ => None,
                }
            }
            _ => None,
        }
    }

    /// The destinations `request` would be sent to (the route lookup of `stats` and
    /// `__mcrouter__.route(op,key)`): every child of an `All*` route, the first of a failover.
    pub fn destinations(&self, request: &Request, out: &mut Vec<usize>) {
        match self {
            Route::Destination { dest, .. } => out.push(*dest),
            Route::Hash { children, placement, provisioned, .. } => children
                [hash_owner(placement, provisioned.as_deref(), request.routed_key())]
            .destinations(request, out),
            Route::Failover { children, .. }
            | Route::MissFailover(children)
            | Route::Latest { children, .. } => children[0].destinations(request, out),
            Route::All(_, children) => children.iter().for_each(|c| c.destinations(request, out)),
            Route::WarmUp { cold, warm, .. } => {
                cold.destinations(request, out);
                if request.op.is_read() {
                    warm.destinations(request, out);
                }
            }
            Route::OperationSelector { policies, default } => {
                if let Some(r) =
                    policies.iter().find(|(op, _)| *op == request.op).map(|(_, r)| r).or(default.as_ref())
                {
                    r.destinations(request, out)
                }
            }
            Route::PrefixSelector { policies, wildcard } => {
                let key = request.routed_key();
                if let Some(r) =
                    policies.iter().find(|(p, _)| key.starts_with(p)).map(|(_, r)| r).or(wildcard.as_ref())
                {
                    r.destinations(request, out)
                }
            }
            Route::ModifyExptime { target, .. } => target.destinations(request, out),
            Route::Null | Route::Error(_) => {}
        }
    }
}

/// The child a hash route sends `key` to (for a power-proportional pool: among its active
/// servers, ignoring any transition).
fn hash_owner(placement: &Placement, provisioned: Option<&Provisioned>, key: &[u8]) -> usize {
    match (provisioned, placement.proteus()) {
        (Some(p), Some(ring)) => ring.owner_with(p.active, key).expect("active counts are checked at load"),
        _ => placement.owner(key),
    }
}

/// What a request gets when nothing answers it: a miss, or "not stored"/"not found".
pub fn null_reply(request: &Request) -> Reply {
    use crate::request::Shape;
    Reply::Answer(match (request.shape(), request.op) {
        (Shape::Values, _) => Vec::new(),
        (Shape::Meta, Op::MetaGet) => b"EN\r\n".to_vec(),
        (Shape::Meta, _) => b"NS\r\n".to_vec(),
        (_, Op::Delete | Op::Incr | Op::Decr | Op::Touch) => b"NOT_FOUND\r\n".to_vec(),
        _ => b"NOT_STORED\r\n".to_vec(),
    })
}

/// Whether more than half of a pool's servers are TKO.
fn mostly_tko(children: &[Child], ctx: &Ctx) -> bool {
    let dests = children.iter().filter_map(|c| match **c {
        Route::Destination { dest, .. } => Some(dest),
        _ => None,
    });
    ctx.count_tko(dests) * 2 > children.len()
}

/// Runs `request` along `route` in the background; its answer is dropped.
pub(crate) fn background(route: Child, request: Request, ctx: &Ctx) {
    let ctx = ctx.clone();
    tokio::task::spawn_local(async move {
        route.execute(&request, &ctx).await;
    });
}

/// Carries out `request` on the power-proportional pool `children` placed by `ring` (see
/// `provisioned.rs`).
async fn proteus(
    pool: &Provisioned,
    ring: &ProteusRing,
    children: &[Child],
    request: &Request,
    ctx: &Ctx,
) -> Reply {
    let key = request.routed_key();
    let owner = |active: usize| ring.owner_with(active, key).expect("active counts are checked at load");
    let now = &children[owner(pool.active)];
    let Some(transition) = pool.transition.as_ref().filter(|t| t.in_progress()) else {
        return now.execute(request, ctx).await;
    };
    let before_index = owner(transition.from);
    let before = &children[before_index];
    if Arc::ptr_eq(before, now) {
        return now.execute(request, ctx).await;
    }
    match request.op {
        Op::Get | Op::Gets => {
            let first = now.execute(request, ctx).await;
            if first.is_hit() || first.is_error() {
                return first;
            }
            if transition.digest_lacks(before_index, key) {
                pool.digest_skips.fetch_add(1, Ordering::Relaxed);
                return first;
            }
            let Some(found) = copy_on_miss(now, before, MIGRATE_TTL, request, ctx).await else {
                return first;
            };
            pool.migrated.fetch_add(1, Ordering::Relaxed);
            found
        }
        op if op.is_read() => now.execute(request, ctx).await,
        Op::FlushAll => now.execute(request, ctx).await,
        _ => {
            // A write: the new owner takes it, and the old owner's copy goes so that a later
            // miss on the new owner cannot bring the older value back.
            let reply = now.execute(request, ctx).await;
            background(before.clone(), Request::delete(&request.key, request.prefix_len), ctx);
            reply
        }
    }
}

async fn failover(children: &[Child], errors: FailoverErrors, request: &Request, ctx: &Ctx) -> Reply {
    let mut reply = children[0].execute(request, ctx).await;
    for child in &children[1..] {
        match reply.error_kind() {
            Some(kind) if errors.covers(kind) => reply = child.execute(request, ctx).await,
            _ => break,
        }
    }
    reply
}

/// How bad a reply is, for `AllSyncRoute`'s "worst reply" and majority counting, as
/// mcrouter orders results: an error, then a miss or "not found"/"not stored", then success.
fn rank(reply: &Reply) -> u8 {
    const NEGATIVE: [&[u8]; 6] = [b"NOT_FOUND", b"NOT_STORED", b"EXISTS", b"EN", b"NF", b"NS"];
    match reply {
        _ if reply.is_error() => 2,
        Reply::Answer(a) if a.is_empty() || NEGATIVE.iter().any(|n| a.starts_with(n)) => 1,
        _ => 0,
    }
}

async fn all(mode: AllMode, children: &[Child], request: &Request, ctx: &Ctx) -> Reply {
    use futures::future::join_all;
    use futures::stream::{FuturesUnordered, StreamExt};
    match mode {
        AllMode::Async if ctx.spools(request) => {
            // Durable first: each destination's spool holds the delete before the client
            // hears back; delivery goes on from there.
            let spooled = Ctx { spool: true, ..ctx.clone() };
            let replies = join_all(children.iter().map(|c| c.execute(request, &spooled))).await;
            replies.into_iter().find(Reply::is_error).unwrap_or_else(|| ok_reply(request))
        }
        AllMode::Async => {
            for child in children {
                background(child.clone(), request.clone(), ctx);
            }
            ok_reply(request)
        }
        AllMode::Initial => {
            for child in &children[1..] {
                background(child.clone(), request.clone(), ctx);
            }
            children[0].execute(request, ctx).await
        }
        AllMode::Sync => {
            let replies = join_all(children.iter().map(|c| c.execute(request, ctx))).await;
            replies
                .into_iter()
                .enumerate()
                .max_by_key(|(i, r)| (rank(r), std::cmp::Reverse(*i)))
                .map(|(_, r)| r)
                .expect("children")
        }
        AllMode::Fastest => {
            let mut replies: FuturesUnordered<_> = children.iter().map(|c| c.execute(request, ctx)).collect();
            let mut last = None;
            while let Some(reply) = replies.next().await {
                if !reply.is_error() {
                    return reply;
                }
                last = Some(reply);
            }
            last.expect("at least one child")
        }
        AllMode::Majority => {
            let need = children.len() / 2 + 1;
            let mut replies: FuturesUnordered<_> = children.iter().map(|c| c.execute(request, ctx)).collect();
            let mut seen: Vec<Reply> = Vec::new();
            while let Some(reply) = replies.next().await {
                let class = rank(&reply);
                if seen.iter().filter(|s| rank(s) == class).count() + 1 >= need {
                    return reply;
                }
                seen.push(reply);
            }
            seen.into_iter().max_by_key(rank).expect("at least one child")
        }
    }
}

/// The success a request gets when its children answer later (`AllAsyncRoute`, broadcasts).
pub fn ok_reply(request: &Request) -> Reply {
    use crate::request::Shape;
    Reply::Answer(match (request.shape(), request.op) {
        (Shape::Values, _) => Vec::new(),
        (Shape::Meta, Op::MetaGet) => b"EN\r\n".to_vec(),
        (Shape::Meta, _) => b"HD\r\n".to_vec(),
        (_, Op::Delete) => b"DELETED\r\n".to_vec(),
        (_, Op::Touch) => b"TOUCHED\r\n".to_vec(),
        _ => b"STORED\r\n".to_vec(),
    })
}

/// A read that missed on `primary`, answered from `secondary`: a hit there is copied into
/// `primary` with `add` (and `exptime`, so a value written meanwhile wins) and answered — for
/// `gets` after the copy, from `primary`, so the CAS handed out is `primary`'s. `None` when
/// `secondary` has nothing either. WarmUpRoute's fill and a Proteus transition's migration.
pub async fn copy_on_miss(
    primary: &Child,
    secondary: &Child,
    exptime: i64,
    request: &Request,
    ctx: &Ctx,
) -> Option<Reply> {
    let found = secondary.execute(&request.as_get(), ctx).await;
    let (flags, data) = found.value()?;
    let copy = request.as_add(flags, data, exptime);
    if request.op == Op::Gets {
        primary.execute(&copy, ctx).await;
        let again = primary.execute(request, ctx).await;
        return Some(if again.is_hit() { again } else { found });
    }
    background(primary.clone(), copy, ctx);
    Some(found)
}

/// mcrouter's WarmUpRoute: `get` — cold, else warm, copying a warm hit into cold with `add`
/// (and `exptime`); `gets` — the same, then `gets` from cold again, so the CAS is cold's;
/// `lease-get` — cold; on a miss that holds a token, a warm hit is `lease-set` into cold with
/// that token and answered as a hit; everything else goes to cold only.
async fn warm_up(cold: &Child, warm: &Child, exptime: i64, request: &Request, ctx: &Ctx) -> Reply {
    match request.op {
        Op::Get | Op::Gets | Op::MetaGet => {
            let first = cold.execute(request, ctx).await;
            if first.is_hit()
                || request.op == Op::MetaGet
                    && !first.is_error()
                    && first != Reply::Answer(b"EN\r\n".to_vec())
            {
                return first;
            }
            if !request.has_text_key() {
                return first; // a base64 key that no text `get` can carry: cold only
            }
            match copy_on_miss(cold, warm, exptime, request, ctx).await {
                None => first,
                // A meta read's flags are cold's to answer; the copy is on its way.
                Some(_) if request.op == Op::MetaGet => first,
                Some(found) => found,
            }
        }
        Op::LeaseGet => {
            let first = cold.execute(request, ctx).await;
            let Some(token) = first.lease_token().filter(|&t| t >= 2) else { return first };
            let from_warm = warm.execute(&request.as_get(), ctx).await;
            let Some((flags, data)) = from_warm.value() else { return first };
            background(cold.clone(), request.as_lease_set(token, flags, data, exptime), ctx);
            from_warm
        }
        _ => cold.execute(request, ctx).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gutter_clamps_and_set_replaces() {
        assert_eq!(modified_exptime(0, 10, ExptimeAction::Min), 10);
        assert_eq!(modified_exptime(3600, 10, ExptimeAction::Min), 10);
        assert_eq!(modified_exptime(5, 10, ExptimeAction::Min), 5);
        assert_eq!(modified_exptime(-1, 10, ExptimeAction::Min), -1);
        assert_eq!(modified_exptime(5, 60, ExptimeAction::Set), 60);
    }
}
