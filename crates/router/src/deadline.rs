//! Request deadlines kept off the workers' event loops: one thread per router sleeps until the
//! earliest armed deadline, then marks its [`Alarm`] rung and wakes the task that armed it.
//!
//! ```text
//!  connection (a worker) ──arm(at, its task's waker)──► heap of armed deadlines ──► "deadlines"
//!        ▲                                                                           thread:
//!        └──── rung, task woken ◄──── at the earliest deadline ◄────────────────── sleeps until
//! ```
//!
//! Why not tokio's timers: a runtime with its time driver works at every park (the clock read,
//! its wheel searched, more of both while a timer is registered), which on one client
//! connection was several hundred instructions a request (docs/BENCHMARKS.md, issue #29). So
//! the workers' runtimes have no time driver, and everything that waits for a time waits here:
//! a connection arms an alarm at its oldest request's deadline and arms the next only once that
//! one rang (under steady traffic this thread wakes once per server timeout per connection);
//! connects, probes and the accept loop's pause use [`sleep`] and [`timeout`].

use std::cmp::Ordering as Order;
use std::collections::BinaryHeap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, Once, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// An armed deadline, rung once it passed.
#[derive(Debug, Default)]
pub struct Alarm {
    rung: AtomicBool,
}

impl Alarm {
    /// Whether the deadline passed (the task that armed it was woken then).
    pub fn rung(&self) -> bool {
        self.rung.load(Ordering::Acquire)
    }
}

/// One armed deadline, ordered so that the heap's top is the earliest.
struct Armed {
    at: Instant,
    alarm: Arc<Alarm>,
    waker: Waker,
}

impl PartialEq for Armed {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at
    }
}

impl Eq for Armed {}

impl PartialOrd for Armed {
    fn partial_cmp(&self, other: &Self) -> Option<Order> {
        Some(self.cmp(other))
    }
}

impl Ord for Armed {
    fn cmp(&self, other: &Self) -> Order {
        other.at.cmp(&self.at)
    }
}

/// The armed deadlines, and the thread's wake-up when an earlier one is armed.
struct Clock {
    armed: Mutex<BinaryHeap<Armed>>,
    earlier: Condvar,
}

static CLOCK: Clock = Clock { armed: Mutex::new(BinaryHeap::new()), earlier: Condvar::new() };
static STARTED: Once = Once::new();

/// Starts the deadline thread (once per process; later calls do nothing). `shoal router`
/// starts it before its workers, so that a failure is told at start.
pub fn start() -> std::io::Result<()> {
    let mut result = Ok(());
    STARTED.call_once(|| {
        result = std::thread::Builder::new().name("deadlines".into()).spawn(ring).map(drop);
    });
    result
}

/// Arms an alarm at `at` that wakes `waker` when it rings.
pub fn arm(at: Instant, waker: &Waker) -> Arc<Alarm> {
    if let Err(e) = start() {
        eprintln!("shoal router: the deadline thread could not start: {e}");
    }
    let alarm = Arc::new(Alarm::default());
    let mut armed = CLOCK.armed.lock().unwrap_or_else(PoisonError::into_inner);
    let earliest = armed.peek().is_none_or(|first| at < first.at);
    armed.push(Armed { at, alarm: alarm.clone(), waker: waker.clone() });
    drop(armed);
    if earliest {
        CLOCK.earlier.notify_one();
    }
    alarm
}

/// A future ready once `duration` passed: an alarm armed when it is first polled, which wakes
/// the task that polled it.
pub fn sleep(duration: Duration) -> Sleep {
    Sleep { at: Instant::now() + duration, alarm: None }
}

/// See [`sleep`].
pub struct Sleep {
    at: Instant,
    alarm: Option<Arc<Alarm>>,
}

impl Future for Sleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if let Some(alarm) = &self.alarm {
            return if alarm.rung() { Poll::Ready(()) } else { Poll::Pending };
        }
        let at = self.at;
        if Instant::now() >= at {
            return Poll::Ready(());
        }
        self.alarm = Some(arm(at, cx.waker()));
        Poll::Pending
    }
}

/// `future`'s output, or `None` when `duration` passed first.
pub async fn timeout<F: Future>(duration: Duration, future: F) -> Option<F::Output> {
    let future = std::pin::pin!(future);
    match futures::future::select(future, sleep(duration)).await {
        futures::future::Either::Left((output, _)) => Some(output),
        futures::future::Either::Right(_) => None,
    }
}

/// The deadline thread: rings every alarm whose deadline passed, then sleeps until the next.
fn ring() {
    let mut due = Vec::new();
    let mut armed = CLOCK.armed.lock().unwrap_or_else(PoisonError::into_inner);
    loop {
        let now = Instant::now();
        while armed.peek().is_some_and(|first| first.at <= now) {
            due.push(armed.pop().expect("peeked"));
        }
        if !due.is_empty() {
            // Woken without the lock held: a worker arming meanwhile does not wait on a wake-up.
            drop(armed);
            for Armed { alarm, waker, .. } in due.drain(..) {
                alarm.rung.store(true, Ordering::Release);
                waker.wake();
            }
            armed = CLOCK.armed.lock().unwrap_or_else(PoisonError::into_inner);
            continue;
        }
        armed = match armed.peek().map(|first| first.at - now) {
            Some(wait) => CLOCK.earlier.wait_timeout(armed, wait).unwrap_or_else(PoisonError::into_inner).0,
            None => CLOCK.earlier.wait(armed).unwrap_or_else(PoisonError::into_inner),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// A waker that sends `tag` on a channel when woken.
    fn telling(tag: u32, to: mpsc::Sender<u32>) -> Waker {
        struct Tell(u32, Mutex<mpsc::Sender<u32>>);
        impl std::task::Wake for Tell {
            fn wake(self: Arc<Self>) {
                let _ = self.1.lock().unwrap().send(self.0);
            }
        }
        Waker::from(Arc::new(Tell(tag, Mutex::new(to))))
    }

    #[test]
    fn alarms_ring_in_deadline_order_and_only_once_due() {
        let (tell, told) = mpsc::channel();
        let now = Instant::now();
        let late = arm(now + Duration::from_millis(300), &telling(2, tell.clone()));
        let early = arm(now + Duration::from_millis(100), &telling(1, tell.clone()));
        let never = arm(now + Duration::from_secs(3600), &telling(3, tell));
        let first = told.recv_timeout(Duration::from_secs(30)).expect("the earlier alarm rang");
        assert!(now.elapsed() >= Duration::from_millis(100), "not before its deadline");
        let second = told.recv_timeout(Duration::from_secs(30)).expect("the later alarm rang");
        assert_eq!((first, second), (1, 2));
        assert!(now.elapsed() >= Duration::from_millis(300), "not before its deadline");
        assert!(early.rung() && late.rung() && !never.rung());
    }

    #[test]
    fn a_timeout_ends_a_future_that_takes_longer_and_keeps_one_that_does_not() {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_io().build().unwrap();
        runtime.block_on(async {
            let started = Instant::now();
            assert_eq!(timeout(Duration::from_secs(60), async { 7 }).await, Some(7));
            assert_eq!(timeout(Duration::from_millis(50), std::future::pending::<()>()).await, None);
            assert!(started.elapsed() >= Duration::from_millis(50), "not before its time");
            sleep(Duration::from_millis(20)).await;
            assert!(started.elapsed() >= Duration::from_millis(70));
        });
    }
}
