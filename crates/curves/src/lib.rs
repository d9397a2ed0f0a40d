//! # shoal-curves: hit-ratio curves and the plan that sizes tenants from them (Moirai)
//!
//! Owns measuring and deciding (docs/design/tenants.md): an online, byte-weighted hit-ratio curve
//! per tenant ([`Shards`], SHARDS with a fixed sample and its correction), and the planner
//! that turns curves into partition sizes ([`plan()`]: minimums, hit-ratio objectives, then
//! marginal gain on each curve's concave hull, off cliffs, with hysteresis). No sockets and no threads:
//! the server feeds the trackers, the controller calls the planner.
//!
//! ```text
//!   server: every get/set, and the sampled reads local clients report through their hints
//!                         ──► Shards::access(key, item bytes) ──► curve() ──┐ (protocol,
//!     delete, flush, expiry ──► remove / flush / advance (forgotten)        │  /metrics)
//!   controller: curves + request rates + tenants' limits ──► plan() ──► sizes per tenant
//!                                                  └── optimum(): exhaustive, for tests
//! ```
//!
//! The load over time is a curve too: a [`Schedule`] file (requests per second by time) is what
//! `shoal provision --schedule` follows and what `shoal bench ycsb --rate-schedule` generates.

mod curve;
mod fenwick;
pub mod plan;
pub mod schedule;
mod shards;

pub use curve::{parse_curve, HitRatioCurve, SIZE_ERROR};
pub use plan::{optimum, plan, Goal, Plan, PlanConfig, Tenant};
pub use schedule::Schedule;
pub use shards::{KeyHash, Shards, ShardsConfig, DEFAULT_MAX_SAMPLES};
