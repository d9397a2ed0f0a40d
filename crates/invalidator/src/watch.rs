//! Saying why nothing is delivered: when deletes wait and none has been acknowledged for
//! more than [`QUIET`], a line on standard error names what each part is doing — the log
//! reader (waiting for changes, holding a batch until its transactions are visible on the
//! primary, until the replica has replayed them, or while it writes them to the spools) and
//! every destination's delivery (what it holds, what its thread is doing) — again every
//! [`AGAIN`] while it lasts, and a line when deliveries resume.
//!
//! ```text
//!   follow loop ──► Progress::enter(stage, deletes in hand)    spool observer ──► Progress::delivered
//!                              └──────────► watcher thread (every second) ◄──────────┘
//!                                            + Delivery::backlog, Spools::activity ──► stderr
//! ```

use crate::delivery::Delivery;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long deletes may wait with nothing delivered before it is said.
const QUIET: Duration = Duration::from_secs(5);
/// How often it is said again while nothing is delivered.
const AGAIN: Duration = Duration::from_secs(15);

/// What the log reader (the main loop) is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Waiting for changes from the commit log.
    Reading,
    /// Holding a batch until its transactions are visible to new snapshots on the primary.
    Visibility,
    /// Holding a batch until the replica (`--wait-for-replica`) has replayed it.
    Replica,
    /// Appending a batch to the spools (written, flushed later by the group syncer), or
    /// waiting for a full one.
    Spooling,
    /// Telling the database how far the log has been read (its deletes are all spooled):
    /// a wait here is the database's, not the spools'.
    Confirming,
}

/// Where the invalidator is, shared by the main loop, the spools' observer and the watcher.
#[derive(Debug)]
pub struct Progress {
    /// The log reader's stage, since when, and the deletes it holds.
    stage: Mutex<(Stage, Instant, usize)>,
    /// The last acknowledgement from any destination.
    delivered: Mutex<Instant>,
}

impl Default for Progress {
    fn default() -> Self {
        Progress {
            stage: Mutex::new((Stage::Reading, Instant::now(), 0)),
            delivered: Mutex::new(Instant::now()),
        }
    }
}

impl Progress {
    /// The log reader enters `stage` holding `deletes` (0 while it reads).
    pub fn enter(&self, stage: Stage, deletes: usize) {
        let mut now = self.stage.lock().unwrap_or_else(|p| p.into_inner());
        if now.0 != stage || now.2 != deletes {
            *now = (stage, Instant::now(), deletes);
        }
    }

    /// A destination acknowledged deletes.
    pub fn delivered(&self) {
        *self.delivered.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }

    fn stage(&self) -> (Stage, Instant, usize) {
        *self.stage.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn last_delivery(&self) -> Instant {
        *self.delivered.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// What the log reader is doing, in words.
fn reader_text(stage: Stage, since: Instant, deletes: usize) -> String {
    let held = since.elapsed().as_secs_f64();
    match stage {
        Stage::Reading => format!("the log reader is waiting for changes ({held:.1} s)"),
        Stage::Visibility => format!(
            "the log reader holds {deletes} deletes until their transactions are visible to readers on the \
             primary ({held:.1} s)"
        ),
        Stage::Replica => {
            format!("the log reader holds {deletes} deletes until the replica has replayed them ({held:.1} s)")
        }
        Stage::Spooling => format!(
            "the log reader is writing {deletes} deletes to the spools ({held:.1} s: a full spool, or a disk too \
             slow to take a write)"
        ),
        Stage::Confirming => {
            format!("the log reader is confirming its position to the database ({held:.1} s: a database slow to answer)")
        }
    }
}

/// Watches for as long as the process runs.
pub fn spawn(progress: Arc<Progress>, delivery: Arc<Delivery>) -> std::io::Result<()> {
    std::thread::Builder::new().name("stall watch".into()).spawn(move || {
        // Since when deletes have been waiting, and when it was last said.
        let mut waiting_since: Option<Instant> = None;
        let mut said: Option<Instant> = None;
        loop {
            std::thread::sleep(Duration::from_secs(1));
            let backlog = delivery.backlog();
            let (stage, since, in_hand) = progress.stage();
            let waiting = backlog.iter().map(|(_, n)| *n).sum::<u64>()
                + if stage == Stage::Reading { 0 } else { in_hand as u64 };
            if waiting == 0 {
                if let (Some(from), Some(_)) = (waiting_since, said) {
                    eprintln!(
                        "shoal invalidator: delivering again: nothing is waiting (the wait lasted {:.1} s)",
                        from.elapsed().as_secs_f64()
                    );
                }
                (waiting_since, said) = (None, None);
                continue;
            }
            let from = *waiting_since.get_or_insert_with(Instant::now);
            let quiet = progress.last_delivery().elapsed().min(from.elapsed());
            if quiet < QUIET {
                if said.take().is_some() {
                    eprintln!("shoal invalidator: delivering again ({waiting} deletes still wait)");
                }
                continue;
            }
            if said.is_some_and(|s| s.elapsed() < AGAIN) {
                continue;
            }
            said = Some(Instant::now());
            let destinations: Vec<String> = backlog
                .iter()
                .map(|(destination, n)| match delivery.activity(destination) {
                    Some((activity, for_, held)) => format!(
                        "{destination}: {n} waiting, {held} refused or unanswered held for their next try, its \
                         delivery {activity} ({:.1} s)",
                        for_.as_secs_f64()
                    ),
                    None => format!("{destination}: {n} waiting"),
                })
                .collect();
            eprintln!(
                "shoal invalidator: nothing delivered for {:.1} s while {waiting} deletes wait: {}; {}",
                quiet.as_secs_f64(),
                reader_text(stage, since, in_hand),
                destinations.join("; ")
            );
        }
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_stage_says_what_holds_the_deletes() {
        let since = Instant::now();
        assert!(reader_text(Stage::Visibility, since, 3).contains("holds 3 deletes until their transactions"));
        assert!(reader_text(Stage::Replica, since, 2).contains("replica has replayed"));
        assert!(reader_text(Stage::Spooling, since, 1).contains("full spool"));
        assert!(reader_text(Stage::Reading, since, 0).contains("waiting for changes"));
        assert!(reader_text(Stage::Confirming, since, 0).contains("confirming its position"));
    }
}
