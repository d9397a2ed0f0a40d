//! # shoal-controller: Shoal's control plane
//!
//! Owns the daemons that reshape a serving cluster (docs/design/proteus.md, tenants.md). The
//! **provisioner** (`shoal provision`, Proteus): it follows a load signal and turns the
//! servers of a power-proportional pool on and off, one at a time, in the pool's fixed order,
//! announcing each transition through the state files routers and clients follow (a router's
//! configuration names its file; the provisioner never writes a router's configuration).
//!
//! ```text
//!  load signal ── servers' `stats` (cmd_get + cmd_set per second) or a schedule file
//!       │         (`shoal_curves::Schedule`, which `shoal bench ycsb` reads too)
//!       │
//!       ▼
//!  Planner (target load per server, hysteresis, min/max) ── n → n±1 ──► transition
//!       │                                                                │
//!       │  on:  start server n+1 (--spawn), wait until it answers ───────┤
//!       ▼                                                                ▼
//!  State file {active, transition {from, until}} ──► and each state file a router config's
//!       │                                            pool names ("provisioning"; it reloads)
//!       └─ after the drain period: transition over; off: stop the server (--spawn)
//! ```
//!
//! One transition at a time, and never from a half-known state: the state file is written
//! before anything is announced, and a provisioner that restarts resumes the transition it
//! finds there.
//!
//! The **tenant controller** (`shoal controller`, [`tenants`], Moirai) sizes the tenants of
//! every server from their hit-ratio curves:
//!
//! ```text
//!  stats tenants + curve <t> ──► rates ──► shoal_curves::plan (goal, hysteresis) ──► sizes
//!        ▲                                                                          │
//!        └──────── next round ◄── tenant_memlimit: shrinks, then grows ◄────────────┘
//!  decisions ──► log (text / --json) and --http: dashboard, /api/state, /metrics
//! ```

pub mod provision;
pub mod tenants;
