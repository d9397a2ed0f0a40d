use super::*;
use std::io::{Read, Write};
use std::net::TcpListener;

fn settings(address: &str, timeout: Duration) -> NearSettings {
    NearSettings {
        address: Address::parse(address).unwrap(),
        admit: Policy::All,
        near_ttl: 10,
        timeout,
        owed_file: None,
        invalidation_listen: None,
    }
}

/// An upstream on loopback that answers each request it reads with the next of `answers`
/// (a `None` answer: read the request, never answer); its thread returns what it read.
fn scripted(answers: Vec<Option<&'static [u8]>>) -> (String, std::thread::JoinHandle<Vec<Vec<u8>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let thread = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut buf = [0u8; 4096];
        let mut read = Vec::new();
        for answer in answers {
            let n = s.read(&mut buf).unwrap_or(0);
            if n == 0 {
                break;
            }
            read.push(buf[..n].to_vec());
            match answer {
                Some(a) => s.write_all(a).unwrap(),
                None => {
                    // Hold the connection open, silent, until the client gives up.
                    let _ = s.read(&mut buf);
                    break;
                }
            }
        }
        read
    });
    (address, thread)
}

#[test]
fn a_fetch_reads_the_value_flags_cas_and_ttl_or_a_miss() {
    let (address, thread) = scripted(vec![Some(b"VA 3 f5 t100 c77 kk\r\nabc\r\n"), Some(b"EN\r\n")]);
    let up = Upstream::new(settings(&address, Duration::from_secs(30)), 1 << 20);
    let found = up.fetch(b"k").unwrap().unwrap();
    assert_eq!(found, Fetched { flags: 5, cas: 77, value: b"abc".to_vec(), ttl: Some(100) });
    assert_eq!(up.fetch(b"k").unwrap(), None, "the same pooled connection, a miss");
    thread.join().unwrap();
    assert_eq!(up.counters.fetches.load(Ordering::Relaxed), 2);
    assert_eq!(up.counters.fetch_hits.load(Ordering::Relaxed), 1);
}

#[test]
fn a_batch_of_keys_is_one_exchange_answered_in_order() {
    // One request read, one answer written: the three meta gets were pipelined.
    let answer = b"VA 1 f1 t-1 c11 ka\r\nA\r\nEN kb\r\nVA 2 f3 t5 c33 kc\r\nCC\r\n";
    let (address, thread) = scripted(vec![Some(answer)]);
    let up = Upstream::new(settings(&address, Duration::from_secs(30)), 1 << 20);
    let found = up.fetch_many(&[b"a", b"b", b"c"]).unwrap();
    assert_eq!(found[0], Some(Fetched { flags: 1, cas: 11, value: b"A".to_vec(), ttl: None }));
    assert_eq!(found[1], None);
    assert_eq!(found[2], Some(Fetched { flags: 3, cas: 33, value: b"CC".to_vec(), ttl: Some(5) }));
    thread.join().unwrap();
    assert_eq!(up.counters.fetches.load(Ordering::Relaxed), 3);
    assert_eq!(up.counters.fetch_hits.load(Ordering::Relaxed), 2);
}

#[test]
fn a_near_copy_lives_no_longer_than_the_upstreams() {
    let with = |ttl| Fetched { flags: 0, cas: 0, value: Vec::new(), ttl };
    assert_eq!(with(None).near_ttl(10), Some(10), "no expiry upstream: --near-ttl");
    assert_eq!(with(Some(3)).near_ttl(10), Some(3));
    assert_eq!(with(Some(300)).near_ttl(10), Some(10));
    assert_eq!(with(Some(0)).near_ttl(10), None, "expiring within the second: not kept");
}

#[test]
fn bad_answers_are_errors_that_say_what_came() {
    for (answer, says) in [
        (&b"VA 1 f0 t-1 c1 kother\r\nx\r\n"[..], "another key"),
        (b"EN kother\r\n", "another key"),
        (b"SERVER_ERROR busy\r\n", "an error"),
        (b"ERROR\r\n", "an error"),
        (b"VALUE k 0 1 1\r\nx\r\nEND\r\n", "unexpected answer"),
        (b"HELLO\r\n", "unexpected answer"),
        (b"VA 2000000 f0 t-1 c1 kk\r\n", "bytes"),
        (b"VA 1 f0 t-1 c1 kk\r\nxyz\r\n", "\\r\\n"),
        (b"VA 1 f0 c1 kk\r\nx\r\n", "without the flags"),
        (b"VA 1 f0 t-1 c1\r\nx\r\n", "without its key"),
        (b"VA 1 f0 t-2 c1 kk\r\nx\r\n", "bad TTL"),
        (b"VA 1 fx t-1 c1 kk\r\nx\r\n", "bad flags"),
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
            .and_then(|c| c.near.settings(Some(std::path::Path::new("/dev/shm/near"))))
    };
    assert!(parse(&[]).unwrap().is_none(), "no --upstream: no near cache");
    let s = parse(&["--upstream", "127.0.0.1:5000"]).unwrap().unwrap();
    assert_eq!((s.admit, s.near_ttl, s.timeout), (Policy::Reuse, 10, Duration::from_secs(1)));
    assert_eq!(s.owed_file.unwrap(), std::path::Path::new("/dev/shm/near.owed"), "beside -e");
    let s = parse(&["--upstream", "r:1", "--admit", "hot", "--near-ttl", "3", "--upstream-timeout", "50"])
        .unwrap()
        .unwrap();
    assert_eq!((s.admit, s.near_ttl, s.timeout), (Policy::Hot, 3, Duration::from_millis(50)));
    let s = parse(&["--upstream", "r:1", "--owed-deletes", "/var/near.owed"]).unwrap().unwrap();
    assert_eq!(s.owed_file.unwrap(), std::path::Path::new("/var/near.owed"));
    assert!(parse(&["--owed-deletes", "f"]).unwrap_err().contains("--upstream"));
    assert!(parse(&["--upstream", "r"]).unwrap_err().contains("expected host:port"));
    assert!(parse(&["--upstream", "r:1", "--admit", "lfu"]).unwrap_err().contains("one of all, reuse"));
    assert!(parse(&["--upstream", "r:1", "--near-ttl", "0"]).is_err());
    assert!(parse(&["--admit", "all"]).unwrap_err().contains("--upstream"));
}

#[test]
fn a_key_lease_read_here_and_absent_upstream_is_left_to_its_lease_get() {
    let up = Upstream::new(settings("127.0.0.1:1", Duration::from_secs(1)), 1 << 20);
    assert!(!up.leaves_to_lease(b"a"), "never lease-read: fetched");
    up.note_lease_read(b"a", true);
    assert!(up.leaves_to_lease(b"a"), "a token or a hot miss: absent upstream");
    assert!(!up.leaves_to_lease(b"b"), "another key");
    up.note_absent(b"b", false);
    assert!(up.leaves_to_lease(b"a"), "a note of another key leaves it");
    up.note_absent(b"a", false);
    assert!(!up.leaves_to_lease(b"a"), "filled upstream: fetched");
    up.note_absent(b"a", true);
    assert!(up.leaves_to_lease(b"a"), "deleted: absent again");
    up.note_lease_read(b"a", false);
    assert!(!up.leaves_to_lease(b"a"), "a lease-get found the value");
    up.note_absent(b"c", true);
    assert!(!up.leaves_to_lease(b"c"), "a delete of a key not lease-read here: fetched");
    assert_eq!(up.counters.left_to_lease.load(Ordering::Relaxed), 3);
}

#[test]
fn a_delete_that_did_not_reach_the_upstream_is_sent_before_the_next_exchange() {
    // Down: the delete stays owed, and the fetch is not sent.
    let closed = TcpListener::bind("127.0.0.1:0").unwrap();
    let down = closed.local_addr().unwrap().to_string();
    drop(closed);
    let up = Upstream::new(settings(&down, Duration::from_secs(30)), 1 << 20);
    up.owe_delete(b"delete k\r\n").unwrap();
    assert!(matches!(up.fetch(b"k"), Err(UpError::Unavailable(_))));
    assert_eq!(up.owed_count.load(Ordering::Relaxed), 1);

    // Back: the delete goes first, in an exchange of its own; then the fetch.
    let (address, thread) = scripted(vec![Some(b"DELETED\r\nNOT_FOUND\r\n"), Some(b"EN\r\n")]);
    let up = Upstream::new(settings(&address, Duration::from_secs(30)), 1 << 20);
    up.owe_delete(b"delete k\r\n").unwrap();
    up.owe_delete(b"delete other\r\n").unwrap();
    assert_eq!(up.fetch(b"k").unwrap(), None);
    let read = thread.join().unwrap();
    assert_eq!(read.concat(), b"delete k\r\ndelete other\r\nmg k v f t c k\r\n".to_vec());
    assert_eq!(up.owed_count.load(Ordering::Relaxed), 0);
    assert_eq!(up.counters.deletes_owed.load(Ordering::Relaxed), 2);
    assert_eq!(up.counters.deletes_paid.load(Ordering::Relaxed), 2);
    assert!(up.may_keep());
}

#[test]
fn owed_deletes_outlive_the_process_and_are_refused_past_the_bound() {
    let dir = std::env::temp_dir().join(format!("shoal-near-owed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("near.owed");
    let closed = TcpListener::bind("127.0.0.1:0").unwrap();
    let down = closed.local_addr().unwrap().to_string();
    drop(closed);
    let with_file = |address: &str| NearSettings {
        owed_file: Some(path.clone()),
        ..settings(address, Duration::from_secs(30))
    };
    // Owed while the upstream is down: on disk before owe_delete returns.
    let up = Upstream::open(with_file(&down), 1 << 20).unwrap();
    up.owe_delete(b"delete k\r\n").unwrap();
    assert!(String::from_utf8_lossy(&std::fs::read(&path).unwrap()).ends_with("delete k\r\n"));
    drop(up); // as a kill -9 would: nothing more is written

    // Restarted against another upstream: the file is refused, naming it.
    let Err(refused) = Upstream::open(with_file("127.0.0.1:2"), 1 << 20) else { panic!("accepted") };
    assert!(refused.contains(&path.display().to_string()), "{refused}");

    // Restarted against the same one, now up: the delete goes before the first fetch.
    let (address, thread) = scripted(vec![Some(b"DELETED\r\n"), Some(b"EN\r\n")]);
    let file = std::fs::read(&path).unwrap();
    std::fs::write(&path, String::from_utf8_lossy(&file).replace(&down, &address)).unwrap();
    let up = Upstream::open(with_file(&address), 1 << 20).unwrap();
    assert_eq!(up.owed_now(), 1);
    assert_eq!(up.fetch(b"k").unwrap(), None);
    assert_eq!(thread.join().unwrap().concat(), b"delete k\r\nmg k v f t c k\r\n".to_vec());
    assert_eq!(up.owed_now(), 0);
    assert!(
        !String::from_utf8_lossy(&std::fs::read(&path).unwrap()).contains("delete k"),
        "paid: gone from the file"
    );
    drop(up);

    // Full: the next delete is refused with a clear error, counted, and nothing fetched is kept.
    let up = Upstream::new(settings(&down, Duration::from_secs(30)), 1 << 20);
    for i in 0..MAX_OWED {
        up.owe_delete(format!("delete k{i}\r\n").as_bytes()).unwrap();
    }
    let why = up.owe_delete(b"delete one-too-many\r\n").unwrap_err();
    assert!(why.contains("16384 deletes are owed"), "{why}");
    assert_eq!(up.counters.deletes_refused.load(Ordering::Relaxed), 1);
    assert!(!up.may_keep());
    std::fs::remove_dir_all(&dir).unwrap();
}
