//! Claiming tasks with leases, and publishing their output so that a re-run cannot
//! double-count.
//!
//! A task entry has three words that matter here:
//!
//! ```text
//! claim  = pid << 32 | attempt    who runs it now (0: nobody yet)
//! lease  = attempt << 32 | until  when that claim lapses (ms since the region's epoch)
//! result = area offset            the winning attempt's output (0: none yet)
//! ```
//!
//! * **Claim**: a task with no result is claimable when it was never claimed, its claimer's
//!   process is gone (`kill(pid, 0)` says `ESRCH`), or the lease of the claim's attempt has
//!   lapsed. A claimer swaps the exact claim word it judged with one compare-and-swap, so two
//!   workers cannot both take over the same lapsed attempt; then it stores its lease. A claim
//!   whose lease is not stored yet (the lease word names an older attempt) counts as live
//!   while its process lives.
//! * **Run**: an attempt writes its output into an area of its own (freshly allocated).
//! * **Publish**: one compare-and-swap of `result` from 0 to that area. The first finisher
//!   wins; a slower attempt (a worker thought dead, or a lease that lapsed while it was still
//!   working) loses the swap and its area is abandoned. Readers only follow `result`, so every
//!   task's output is counted exactly once, whichever attempts ran. A worker killed at any
//!   moment leaves either no published result (the task is re-run) or a complete one.
//! * **Renew**: a worker's heartbeat extends the leases of the claims it still holds.

use crate::layout::task;
use crate::region::JobRegion;
use std::sync::atomic::Ordering;

/// A claim this process holds on a task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Claim {
    /// The task entry.
    pub task: u64,
    /// The claim word this process stored.
    pub word: u64,
}

/// Whether the process `pid` may still be running (a pid of another user counts as alive).
pub(crate) fn pid_alive(pid: u32) -> bool {
    if pid == 0 || pid > i32::MAX as u32 {
        return false;
    }
    // SAFETY: kill with signal 0 sends nothing; it only checks that the process exists.
    let rc = unsafe { libc::kill(pid as libc::pid_t, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// Tries to claim task `t` for this process with a lease of `lease_ms`. With `None` (the
/// fixed-worker mode: every worker is a thread of this process, as in the original Phoenix)
/// only a task never claimed is taken and no lease is stored: no claim is ever taken over, so
/// neither clocks nor other processes' liveness are consulted.
pub(crate) fn try_claim(region: &JobRegion, t: u64, lease_ms: Option<u64>) -> Option<Claim> {
    if region.task(t, task::RESULT).load(Ordering::Acquire) != 0 {
        return None;
    }
    let claim = region.task(t, task::CLAIM);
    let seen = claim.load(Ordering::Acquire);
    let Some(lease_ms) = lease_ms else {
        let word = (std::process::id() as u64) << 32 | 1;
        return (seen == 0 && claim.compare_exchange(0, word, Ordering::AcqRel, Ordering::Relaxed).is_ok())
            .then_some(Claim { task: t, word });
    };
    let now = region.now_rel_ms();
    if seen != 0 && claim_live(region, t, seen, now) {
        return None;
    }
    let attempt = (seen as u32).wrapping_add(1).max(1);
    let word = (std::process::id() as u64) << 32 | attempt as u64;
    claim.compare_exchange(seen, word, Ordering::AcqRel, Ordering::Relaxed).ok()?;
    region.task(t, task::LEASE).store(lease_word(attempt, now + lease_ms), Ordering::Release);
    Some(Claim { task: t, word })
}

/// Whether the claim `word` on task `t` still stands at `now`.
fn claim_live(region: &JobRegion, t: u64, word: u64, now: u64) -> bool {
    if !pid_alive((word >> 32) as u32) {
        return false;
    }
    let lease = region.task(t, task::LEASE).load(Ordering::Acquire);
    let leased_attempt = (lease >> 32) as u32;
    leased_attempt != word as u32 || now <= lease & 0xffff_ffff
}

fn lease_word(attempt: u32, until_ms: u64) -> u64 {
    (attempt as u64) << 32 | until_ms.min(u32::MAX as u64)
}

/// Extends `claim`'s lease to `lease_ms` from now, if the claim still stands.
pub(crate) fn renew(region: &JobRegion, claim: Claim, lease_ms: u64) {
    let lease = region.task(claim.task, task::LEASE);
    let seen = lease.load(Ordering::Acquire);
    if region.task(claim.task, task::CLAIM).load(Ordering::Acquire) == claim.word
        && seen >> 32 == claim.word & 0xffff_ffff
    {
        let fresh = lease_word(claim.word as u32, region.now_rel_ms() + lease_ms);
        let _ = lease.compare_exchange(seen, fresh, Ordering::AcqRel, Ordering::Relaxed);
    }
}

/// Publishes `area` as task `t`'s output; `false` if another attempt won.
pub(crate) fn publish(region: &JobRegion, t: u64, area: u64) -> bool {
    region.task(t, task::RESULT).compare_exchange(0, area, Ordering::AcqRel, Ordering::Acquire).is_ok()
}

/// Task `t`'s published output area, if any.
pub(crate) fn result(region: &JobRegion, t: u64) -> Option<u64> {
    Some(region.task(t, task::RESULT).load(Ordering::Acquire)).filter(|&a| a != 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::region::tests::TempPath;

    #[test]
    fn a_live_claim_excludes_others_until_its_lease_lapses_or_its_process_dies() {
        let p = TempPath::new("claims");
        let region = JobRegion::create(&p.0, 4 << 20, 4 << 20, 4).unwrap();
        let first = try_claim(&region, 0, Some(60_000)).expect("an unclaimed task is claimable");
        assert_eq!(try_claim(&region, 0, Some(60_000)), None, "our own live claim stands");
        renew(&region, first, 60_000);
        assert_eq!(try_claim(&region, 0, Some(60_000)), None);
        // A lapsed lease makes it claimable again, as the next attempt.
        region.task(0, task::LEASE).store(lease_word(first.word as u32, 0), Ordering::Relaxed);
        std::thread::sleep(std::time::Duration::from_millis(2));
        let second = try_claim(&region, 0, Some(60_000)).expect("a lapsed lease is re-claimable");
        assert_eq!(second.word as u32, 2);
        // A claim by a process that is gone is re-claimable at once.
        region.task(0, task::CLAIM).store(u64::from(i32::MAX as u32) << 32 | 7, Ordering::Relaxed);
        assert_eq!(try_claim(&region, 0, Some(60_000)).map(|c| c.word as u32), Some(8));
    }

    #[test]
    fn a_wall_clock_step_at_worst_runs_a_task_twice_and_never_strands_it() {
        let p = TempPath::new("clock");
        let region = JobRegion::create(&p.0, 4 << 20, 4 << 20, 4).unwrap();
        let lease = 10_000;
        let first = try_claim(&region, 0, Some(lease)).unwrap();
        // A step back (NTP on a fresh VM), even to before the region's epoch: the claim stands,
        // and its heartbeat renews it from the clock's new now.
        region.set_clock_shift_ms(-600_000);
        assert_eq!(try_claim(&region, 0, Some(lease)), None);
        renew(&region, first, lease);
        assert_eq!(region.task(0, task::LEASE).load(Ordering::Relaxed) & 0xffff_ffff, lease);
        // A step forward past the lease: the claim is taken over, a second run of the task.
        region.set_clock_shift_ms(600_000);
        let second = try_claim(&region, 0, Some(lease)).expect("a lapsed lease is taken over");
        assert_eq!(second.word as u32, 2);
        renew(&region, first, lease);
        assert_eq!(try_claim(&region, 0, Some(lease)), None, "the first claim's heartbeat took nothing back");
        // Both runs finish: the first publication counts, the other's output is dropped.
        assert!(publish(&region, 0, 4096));
        assert!(!publish(&region, 0, 8192));
        assert_eq!(result(&region, 0), Some(4096));
    }

    #[test]
    fn the_first_publication_wins_and_a_published_task_is_not_claimable() {
        let p = TempPath::new("publish");
        let region = JobRegion::create(&p.0, 4 << 20, 4 << 20, 4).unwrap();
        assert_eq!(result(&region, 1), None);
        assert!(publish(&region, 1, 4096));
        assert!(!publish(&region, 1, 8192), "a second attempt loses");
        assert_eq!(result(&region, 1), Some(4096));
        assert_eq!(try_claim(&region, 1, Some(1000)), None);
    }

    #[test]
    fn a_fixed_worker_claims_only_tasks_never_claimed_and_stores_no_lease() {
        let p = TempPath::new("fixed-claims");
        let region = JobRegion::create(&p.0, 4 << 20, 4 << 20, 4).unwrap();
        let first = try_claim(&region, 0, None).expect("an unclaimed task is claimable");
        assert_eq!(try_claim(&region, 0, None), None, "a claim is never taken over");
        assert_eq!(region.task(0, task::LEASE).load(Ordering::Relaxed), 0);
        region.task(0, task::CLAIM).store(u64::from(i32::MAX as u32) << 32 | 1, Ordering::Relaxed);
        assert_eq!(try_claim(&region, 0, None), None, "not even a dead process's");
        assert_eq!(first.word as u32, 1);
    }

    #[test]
    fn only_missing_processes_are_dead() {
        assert!(pid_alive(std::process::id()));
        assert!(pid_alive(1), "init lives (and may belong to another user)");
        assert!(!pid_alive(0));
        assert!(!pid_alive(i32::MAX as u32));
    }
}
