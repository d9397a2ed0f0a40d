//! # shoal-controller: Shoal's control plane
//!
//! Owns the daemons that change a cluster's shape while it serves (DESIGN §8). Today that is
//! the **provisioner** (`shoal provision`, Proteus): it follows a load signal and turns the
//! servers of a power-proportional pool on and off, one at a time, in the pool's fixed order,
//! announcing each transition to the routers through their configuration files.
//!
//! ```text
//!  load signal ── servers' `stats` (cmd_get + cmd_set per second) or a schedule file
//!       │
//!       ▼
//!  Planner (target load per server, hysteresis, min/max) ── n → n±1 ──► transition
//!       │                                                                │
//!       │  on:  start server n+1 (--spawn), wait until it answers ───────┤
//!       ▼                                                                ▼
//!  State file {active, transition {from, until}} ──► every router config's pool: "active",
//!       │                                            "transition" (the router reloads it)
//!       └─ after the drain period: transition over; off: stop the server (--spawn)
//! ```
//!
//! One transition at a time, and never from a half-known state: the state file is written
//! before anything is announced, and a provisioner that restarts resumes the transition it
//! finds there.

pub mod provision;
pub mod tenants;
