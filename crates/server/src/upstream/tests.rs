use super::*;
use std::io::{Read, Write};
use std::net::TcpListener;

fn settings(address: &str, timeout: Duration) -> NearSettings {
    NearSettings { address: Address::parse(address).unwrap(), admit: Policy::All, near_ttl: 10, timeout }
}

/// An upstream on loopback that answers each request it reads with the next of `answers`
/// (a `None` answer: read the request, never answer).
fn scripted(answers: Vec<Option<&'static [u8]>>) -> (String, std::thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let thread = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut buf = [0u8; 4096];
        for answer in answers {
            if s.read(&mut buf).unwrap_or(0) == 0 {
                return;
            }
            match answer {
                Some(a) => s.write_all(a).unwrap(),
                None => {
                    // Hold the connection open, silent, until the client gives up.
                    let _ = s.read(&mut buf);
                    return;
                }
            }
        }
    });
    (address, thread)
}

#[test]
fn a_fetch_reads_the_value_flags_and_cas_or_a_miss() {
    let (address, thread) = scripted(vec![Some(b"VALUE k 5 3 77\r\nabc\r\nEND\r\n"), Some(b"END\r\n")]);
    let up = Upstream::new(settings(&address, Duration::from_secs(30)), 1 << 20);
    let found = up.fetch(b"k").unwrap().unwrap();
    assert_eq!(found, Fetched { flags: 5, cas: 77, value: b"abc".to_vec() });
    assert_eq!(up.fetch(b"k").unwrap(), None, "the same pooled connection, a miss");
    thread.join().unwrap();
    assert_eq!(up.counters.fetches.load(Ordering::Relaxed), 2);
    assert_eq!(up.counters.fetch_hits.load(Ordering::Relaxed), 1);
}

#[test]
fn bad_answers_are_errors_that_say_what_came() {
    for (answer, says) in [
        (&b"VALUE other 0 1 1\r\nx\r\nEND\r\n"[..], "another key"),
        (b"SERVER_ERROR busy\r\n", "an error"),
        (b"ERROR\r\n", "an error"),
        (b"LVALUE k 9 0 0\r\n\r\nEND\r\n", "not a VALUE"),
        (b"HELLO\r\n", "unexpected answer"),
        (b"VALUE k 0 2000000 1\r\n", "bytes"),
        (b"VALUE k 0 1 1\r\nxyz\r\nEND\r\n", "\\r\\n"),
    ] {
        let (address, thread) = scripted(vec![Some(answer)]);
        let up = Upstream::new(settings(&address, Duration::from_secs(30)), 1 << 20);
        match up.fetch(b"k") {
            Err(UpError::BadAnswer(why)) => assert!(why.contains(says), "{why} for {answer:?}"),
            other => panic!("{other:?} for {answer:?}"),
        }
        assert_eq!(up.counters.bad_answers.load(Ordering::Relaxed), 1);
        thread.join().unwrap();
    }
}

#[test]
fn an_upstream_that_is_down_is_a_quick_error_and_is_left_alone_for_a_while() {
    // A port nothing listens on.
    let address = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let up = Upstream::new(settings(&address, Duration::from_secs(30)), 1 << 20);
    assert!(matches!(up.fetch(b"k"), Err(UpError::Unavailable(_))));
    // Within DOWN_FOR, not even tried.
    match up.fetch(b"k") {
        Err(UpError::Unavailable(why)) => assert!(why.contains("a moment ago"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(up.counters.unavailable.load(Ordering::Relaxed), 2);
}

#[test]
fn a_silent_upstream_costs_one_timeout() {
    let (address, thread) = scripted(vec![None]);
    let up = Upstream::new(settings(&address, Duration::from_millis(200)), 1 << 20);
    let started = Instant::now();
    assert!(matches!(up.fetch(b"k"), Err(UpError::Unavailable(_))));
    // Bounded by the deadline (with a margin for a loaded machine), never a hang.
    assert!(started.elapsed() < Duration::from_secs(30));
    drop(up);
    thread.join().unwrap();
}

#[test]
fn epochs_move_with_writes_and_leases_remember_them() {
    let up = Upstream::new(settings("127.0.0.1:1", Duration::from_secs(1)), 1 << 20);
    let before = up.epoch(b"a");
    up.lease_taken(b"a");
    assert!(up.lease_unchanged(b"a"));
    up.invalidate(b"a");
    assert_ne!(up.epoch(b"a"), before);
    assert!(!up.lease_unchanged(b"a"), "a delete since the lease-get");
    up.lease_taken(b"a");
    assert!(up.lease_unchanged(b"a"));
}

#[test]
fn stats_lines_are_stat_lines() {
    let up = Upstream::new(settings("127.0.0.1:1", Duration::from_secs(1)), 1 << 20);
    let mut out = Vec::new();
    up.settings_stats(&mut out);
    up.counter_stats(&mut out);
    let text = String::from_utf8(out).unwrap();
    assert!(text.starts_with("STAT near_upstream 127.0.0.1:1\r\nSTAT near_admit all\r\n"));
    assert!(text.lines().all(|l| l.starts_with("STAT ") && l.split(' ').count() == 3), "{text}");
}

#[test]
fn flags_become_settings_and_bad_ones_say_what_to_fix() {
    use clap::Parser;
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        near: NearArgs,
    }
    let parse = |argv: &[&str]| {
        Cli::try_parse_from(std::iter::once("server").chain(argv.iter().copied()))
            .map_err(|e| e.to_string())
            .and_then(|c| c.near.settings())
    };
    assert!(parse(&[]).unwrap().is_none(), "no --upstream: no near cache");
    let s = parse(&["--upstream", "127.0.0.1:5000"]).unwrap().unwrap();
    assert_eq!((s.admit, s.near_ttl, s.timeout), (Policy::Reuse, 10, Duration::from_secs(1)));
    let s = parse(&["--upstream", "r:1", "--admit", "hot", "--near-ttl", "3", "--upstream-timeout", "50"])
        .unwrap()
        .unwrap();
    assert_eq!((s.admit, s.near_ttl, s.timeout), (Policy::Hot, 3, Duration::from_millis(50)));
    assert!(parse(&["--upstream", "r"]).unwrap_err().contains("expected host:port"));
    assert!(parse(&["--upstream", "r:1", "--admit", "lfu"]).unwrap_err().contains("one of all, reuse"));
    assert!(parse(&["--upstream", "r:1", "--near-ttl", "0"]).is_err());
    assert!(parse(&["--admit", "all"]).unwrap_err().contains("--upstream"));
}
