//! The load engine: connections spread over generator threads, each thread driving its
//! connections with one mio poller, in closed loop (a new request as soon as a pipeline slot
//! frees up) or open loop (each connection on a fixed schedule).
//!
//! The connections outlive a phase, so a prefill and the measured run that follows it (or
//! the batches of a fill) use the same ones; each phase gets new threads and sources.

use crate::connection::Connection;
use crate::pin::{pin_current_thread, CpuList};
use crate::protocol::Protocol;
use crate::tally::Tally;
use crate::target::{ServerAddress, Target};
use crate::workload::RequestSource;
use mio::{Events, Poll, Token};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How often the caller hears of progress, and the longest a thread sleeps in its poller.
const TICK: Duration = Duration::from_millis(100);

/// A server that leaves requests unanswered this long has stopped answering.
const STALL_LIMIT: Duration = Duration::from_secs(10);

/// Pollers wake up with millisecond resolution, so a thread whose next request is due
/// sooner than this spins instead of sleeping (open loop only).
const POLL_RESOLUTION: Duration = Duration::from_millis(1);

/// When requests go out.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Schedule {
    /// As soon as the connection's pipeline has room: throughput is whatever the server
    /// sustains, and latency is from the actual send.
    ClosedLoop,
    /// At a fixed total rate in requests per second, spread evenly over the connections.
    /// Latency is measured from when each request was due, so a server that falls behind
    /// is charged for the wait (no coordinated omission).
    OpenLoop {
        /// Requests per second, all connections together.
        rate: f64,
    },
}

/// One run of requests over the connections.
#[derive(Clone, Copy, Debug)]
pub struct Phase {
    /// Most requests a connection has in flight.
    pub pipeline: usize,
    /// When requests go out.
    pub schedule: Schedule,
    /// Stop sending after this long (requests in flight are still awaited); `None`: when
    /// every source is exhausted.
    pub duration: Option<Duration>,
}

/// What a phase measured.
#[derive(Debug)]
pub struct Outcome {
    /// Everything the threads counted.
    pub tally: Tally,
    /// From the first request to the last reply.
    pub elapsed: Duration,
}

/// The connections of one generator thread, with their poller.
struct Group {
    poll: Poll,
    /// Each connection with its index among all connections (which seeds its source).
    connections: Vec<(usize, Connection)>,
}

/// The load generator's connections to one server, spread over its threads.
pub struct Clients {
    address: ServerAddress,
    protocol: Protocol,
    groups: Vec<Group>,
    pin: Option<CpuList>,
    connection_count: usize,
}

/// What the threads of one phase share.
struct PhaseContext<'a> {
    phase: &'a Phase,
    protocol: Protocol,
    connection_count: usize,
    start: Instant,
    deadline: Option<Instant>,
    /// Requests completed by all threads so far (updated once per poll round).
    completed: AtomicU64,
    /// Set when a thread fails, so that the others stop.
    abort: AtomicBool,
}

impl Clients {
    /// Opens `connections` connections, dealt round-robin to `threads` threads (which are
    /// pinned to `pin`'s CPUs in turn, when given).
    pub fn connect(
        target: &Target,
        connections: usize,
        threads: usize,
        pin: Option<CpuList>,
    ) -> Result<Self, String> {
        let address = &target.server;
        if threads == 0 || connections < threads {
            return Err(format!(
                "need at least one connection per thread ({connections} for {threads} threads)"
            ));
        }
        let mut groups = (0..threads)
            .map(|_| Ok(Group { poll: Poll::new()?, connections: Vec::new() }))
            .collect::<std::io::Result<Vec<_>>>()
            .map_err(|e| format!("cannot create a poller: {e}"))?;
        let tls = target.tls()?;
        for index in 0..connections {
            let mut connection = Connection::open(address, tls.as_ref())?;
            let group = &mut groups[index % threads];
            connection
                .register(group.poll.registry(), Token(group.connections.len()))
                .map_err(|e| format!("cannot poll a connection to {address}: {e}"))?;
            group.connections.push((index, connection));
        }
        Ok(Clients {
            address: address.clone(),
            protocol: target.protocol,
            groups,
            pin,
            connection_count: connections,
        })
    }

    /// How many connections there are.
    pub fn connection_count(&self) -> usize {
        self.connection_count
    }

    /// Runs one phase: `source_for(i)` gives connection `i` its requests; `on_tick` is
    /// called about every 100 ms with the requests completed so far and the time elapsed.
    pub fn run(
        &mut self,
        phase: &Phase,
        mut source_for: impl FnMut(usize) -> RequestSource,
        mut on_tick: impl FnMut(u64, Duration),
    ) -> Result<Outcome, String> {
        let start = Instant::now();
        let context = PhaseContext {
            phase,
            protocol: self.protocol,
            connection_count: self.connection_count,
            start,
            deadline: phase.duration.map(|duration| start + duration),
            completed: AtomicU64::new(0),
            abort: AtomicBool::new(false),
        };
        let pin = self.pin.as_ref();
        let (results_tx, results_rx) = mpsc::channel();
        std::thread::scope(|scope| {
            for (thread, group) in self.groups.iter_mut().enumerate() {
                let sources: Vec<RequestSource> =
                    group.connections.iter().map(|&(i, _)| source_for(i)).collect();
                let (context, results_tx) = (&context, results_tx.clone());
                let cpu = pin.map(|cpus| cpus.cpu_for(thread));
                let spawned = std::thread::Builder::new().name(format!("load-{thread}")).spawn_scoped(
                    scope,
                    move || {
                        let result = cpu
                            .map_or(Ok(()), pin_current_thread)
                            .and_then(|()| drive(group, sources, context));
                        if result.is_err() {
                            context.abort.store(true, Ordering::Relaxed);
                        }
                        // The receiver outlives the scope.
                        let _ = results_tx.send(result);
                    },
                );
                if let Err(e) = spawned {
                    context.abort.store(true, Ordering::Relaxed);
                    return Err(format!("cannot start a load thread: {e}"));
                }
            }
            drop(results_tx);
            let mut total = Tally::default();
            let mut last_reply = start;
            let mut first_error = None;
            loop {
                match results_rx.recv_timeout(TICK) {
                    Ok(Ok((tally, finished))) => {
                        total.merge(&tally);
                        last_reply = last_reply.max(finished);
                    }
                    Ok(Err(error)) => {
                        first_error.get_or_insert(error);
                    }
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        on_tick(context.completed.load(Ordering::Relaxed), start.elapsed())
                    }
                    Err(mpsc::RecvTimeoutError::Disconnected) => break,
                }
            }
            match first_error {
                Some(error) => Err(format!("{}: {error}", self.address)),
                None => Ok(Outcome { tally: total, elapsed: last_reply - start }),
            }
        })
    }
}

/// One connection as a thread drives it in a phase.
struct Lane<'a> {
    connection: &'a mut Connection,
    source: RequestSource,
    /// Open loop: when the next request is due.
    next_due: Option<Instant>,
    exhausted: bool,
}

impl Lane<'_> {
    /// Queues requests while the pipeline has room and (in open loop) requests are due.
    fn top_up(&mut self, now: Instant, pipeline: usize, interval: Option<Duration>) {
        while !self.exhausted && self.connection.in_flight() < pipeline {
            let intended = match (self.next_due.as_mut(), interval) {
                (Some(due), Some(interval)) => {
                    if *due > now {
                        break;
                    }
                    let intended = *due;
                    *due += interval;
                    intended
                }
                _ => now,
            };
            self.exhausted = !self.connection.queue(&mut self.source, intended);
        }
    }

    /// Open loop: when this lane next wants to send, if it could.
    fn wants_to_send_at(&self, pipeline: usize) -> Option<Instant> {
        let has_room = !self.exhausted && self.connection.in_flight() < pipeline;
        self.next_due.filter(|_| has_room)
    }
}

/// A thread's loop over its connections for one phase; returns what it counted and when its
/// last reply came.
fn drive(
    group: &mut Group,
    sources: Vec<RequestSource>,
    context: &PhaseContext,
) -> Result<(Tally, Instant), String> {
    let PhaseContext { phase, protocol, start, deadline, .. } = *context;
    let interval = match phase.schedule {
        Schedule::ClosedLoop => None,
        Schedule::OpenLoop { rate } => Some(Duration::from_secs_f64(context.connection_count as f64 / rate)),
    };
    let mut lanes: Vec<Lane> = group
        .connections
        .iter_mut()
        .zip(sources)
        .map(|((index, connection), source)| Lane {
            connection,
            source,
            // Connections take turns: together they send one request every 1/rate seconds.
            next_due: interval
                .map(|interval| start + interval.mul_f64(*index as f64 / context.connection_count as f64)),
            exhausted: false,
        })
        .collect();
    let mut tally = Tally::default();
    let mut events = Events::with_capacity(lanes.len().max(16));
    let mut reported = 0;
    let mut last_reply = Instant::now();
    loop {
        let now = Instant::now();
        let sending = deadline.is_none_or(|deadline| now < deadline);
        for lane in &mut lanes {
            if sending {
                lane.top_up(now, phase.pipeline, interval);
            }
            lane.connection.flush().map_err(|e| format!("sending: {e}"))?;
        }
        let in_flight: usize = lanes.iter().map(|lane| lane.connection.in_flight()).sum();
        let more_to_send = sending && lanes.iter().any(|lane| !lane.exhausted);
        if context.abort.load(Ordering::Relaxed) || (in_flight == 0 && !more_to_send) {
            break;
        }
        if in_flight > 0 && now.duration_since(last_reply) > STALL_LIMIT {
            // A text-only server reads binary packets as the start of a line that never ends.
            let hint = if protocol == Protocol::Binary {
                "; a server that does not accept the binary protocol waits like this: start it with -B auto"
            } else {
                ""
            };
            return Err(format!(
                "no reply for {} s ({in_flight} requests in flight){hint}",
                STALL_LIMIT.as_secs()
            ));
        }
        let mut wake_at = now + TICK;
        if sending {
            wake_at = wake_at.min(deadline.unwrap_or(wake_at));
            if let Some(due) = lanes.iter().filter_map(|lane| lane.wants_to_send_at(phase.pipeline)).min() {
                wake_at = wake_at.min(due);
            }
        }
        let wait = wake_at.saturating_duration_since(now);
        let timeout = if wait < POLL_RESOLUTION { Duration::ZERO } else { wait - POLL_RESOLUTION };
        group.poll.poll(&mut events, Some(timeout)).map_err(|e| format!("polling: {e}"))?;
        for event in &events {
            let lane = &mut lanes[event.token().0];
            if event.is_readable() || event.is_read_closed() || event.is_error() {
                lane.connection.receive(protocol, &mut tally)?;
            }
            if event.is_writable() {
                lane.connection.flush().map_err(|e| format!("sending: {e}"))?;
            }
        }
        if tally.requests() > reported {
            context.completed.fetch_add(tally.requests() - reported, Ordering::Relaxed);
            reported = tally.requests();
            last_reply = Instant::now();
        }
    }
    if let (Some(deadline), Some(interval)) = (deadline, interval) {
        tally.behind_schedule = lanes
            .iter()
            .filter_map(|lane| lane.next_due.filter(|&due| due < deadline && !lane.exhausted))
            .map(|due| (deadline - due).as_nanos().div_ceil(interval.as_nanos()) as u64)
            .sum();
    }
    Ok((tally, last_reply))
}
