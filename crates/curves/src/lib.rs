//! # shoal-curves: hit-ratio curves and the plan that sizes tenants from them (Moirai)
//!
//! Owns the measuring and deciding half of DESIGN §8: an online, byte-weighted hit-ratio curve
//! per tenant ([`Shards`], SHARDS with a fixed sample and its correction), and the planner
//! that turns curves into partition sizes ([`plan()`]: minimums, hit-ratio objectives, then
//! marginal gain on each curve's concave hull, with hysteresis). No sockets and no threads:
//! the server feeds the trackers, the controller calls the planner.
//!
//! ```text
//!   server: every get/set ──► Shards::access(key, item bytes) ──► curve() ──┐ (protocol,
//!                                                                           │  /metrics)
//!   controller: curves + request rates + tenants' limits ──► plan() ──► sizes per tenant
//!                                                  └── optimum(): exhaustive, for tests
//! ```

mod curve;
mod fenwick;
pub mod plan;
mod shards;

pub use curve::HitRatioCurve;
pub use plan::{optimum, plan, Goal, Plan, PlanConfig, Tenant};
pub use shards::{KeyHash, Shards, ShardsConfig, DEFAULT_MAX_SAMPLES};
