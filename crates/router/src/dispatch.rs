//! One key's request along the route(s) its routing prefix selects in the configuration it
//! arrived under: the step between a client's connection (`proxy.rs`, `multiget.rs`) and the
//! route handles (`route.rs`).
//!
//! ```text
//!  key ──► routing prefix ──► Routes::One(route) ── placement only? ──► Ctx::send (one server)
//!                         │                      └─ else ──► Route::execute
//!                         └─► Routes::Broadcast(/*/…/) ──► every matching route (deletes spooled)
//! ```

use crate::config::Config;
use crate::ctx::Ctx;
use crate::request::{ErrorKind, Op, Reply, Request};
use crate::route::{ok_reply, Child};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

/// What one client read's requests are carried out with: the configuration current when they
/// arrived, how its route handles send, and the router's count of requests answered with an
/// error.
pub struct Dispatch<'a> {
    pub config: Arc<Config>,
    pub ctx: Ctx,
    pub errors: &'a AtomicU64,
}

/// The route(s) of one key's request, by its routing prefix.
pub enum Routes<'a> {
    /// The route the prefix (or its absence) selects, if any.
    One(Option<&'a Child>),
    /// A wildcard prefix: every matching route (a broadcast: its deletes are spooled so none
    /// is lost).
    Broadcast(Vec<&'a Child>),
}

/// The route(s) of `request` in `config`.
pub fn routes_for<'a>(request: &Request, config: &'a Config) -> Routes<'a> {
    let routed = shoal_route::Routed::parse(&request.key);
    if routed.is_broadcast() || routed.region == Some(b"*") || routed.cluster == Some(b"*") {
        let (region, cluster) = (routed.region.unwrap_or(b"*"), routed.cluster.unwrap_or(b"*"));
        return Routes::Broadcast(config.routes_matching(region, cluster));
    }
    Routes::One(config.route_for(routed.region, routed.cluster))
}

impl Dispatch<'_> {
    /// One key's request along its route(s).
    pub async fn route_one(&self, request: &Request) -> Reply {
        let ctx = &self.ctx;
        match routes_for(request, &self.config) {
            Routes::One(Some(route)) => match route.direct(request, ctx) {
                // Placement only (a PoolRoute over servers): straight to the server.
                Some(to) if to.fail_open == ctx.fail_open => {
                    ctx.send(to.dest, request, to.keep_routing_prefix).await
                }
                _ => route.execute(request, ctx).await,
            },
            Routes::One(None) => no_route(),
            Routes::Broadcast(routes) if routes.is_empty() => no_route(),
            Routes::Broadcast(routes) => {
                let spooled = Ctx { spool: request.op == Op::Delete, ..ctx.clone() };
                let replies =
                    futures::future::join_all(routes.iter().map(|r| r.execute(request, &spooled))).await;
                replies.into_iter().find(Reply::is_error).unwrap_or_else(|| ok_reply(request))
            }
        }
    }
}

fn no_route() -> Reply {
    Reply::Error(ErrorKind::Route, "no route for this routing prefix".into())
}
