//! Spools against a fake destination: deletes delivered in order with their stamps, a spool
//! left by a killed process delivered from its recorded offset, a full spool refusing.

use shoal_spool::{Delivered, Observer, Spools};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod common;
use common::{destination, scratch};

fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(60), "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn deletes_are_delivered_in_order_and_the_observer_gets_each_records_stamp() {
    let (address, received) = destination();
    let seen: Arc<Mutex<Vec<(String, u32, u64)>>> = Arc::default();
    let observer: Observer = {
        let seen = seen.clone();
        Arc::new(move |to: &str, d: Delivered| {
            seen.lock().unwrap().push((to.to_string(), d.answers, d.stamp))
        })
    };
    let dir = scratch("order");
    let spools = Spools::open_with(&dir, 1 << 20, "test", true, Some(observer)).unwrap();
    spools.append(&address, b"delete a\r\n").unwrap();
    spools.append_batch(&address, b"delete b\r\ndelete c\r\n", 2, 7).unwrap();
    eventually("three deletes delivered", || {
        spools.delivered.load(std::sync::atomic::Ordering::Relaxed) == 3
    });
    assert_eq!(*received.lock().unwrap(), ["delete a", "delete b", "delete c"]);
    assert_eq!(spools.depths(), [(address.clone(), 0)]);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen, [(address.clone(), 1, 0), (address, 2, 7)]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_spool_left_by_a_killed_process_is_delivered_from_its_offset_and_a_torn_record_set_aside() {
    let (address, received) = destination();
    let dir = scratch("restart");
    std::fs::create_dir_all(&dir).unwrap();
    // What a process killed mid-append leaves: one record delivered (the offset after it), one
    // not, and the start of a third whose writing was cut short.
    let name: String = address.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    let delivered = b"10 1 0\ndelete a\r\n";
    let pending = b"10 1 0\ndelete b\r\n";
    let torn = b"10 1 0\ndel";
    std::fs::write(dir.join(format!("{name}.spool")), [&delivered[..], pending, torn].concat()).unwrap();
    std::fs::write(dir.join(format!("{name}.address")), &address).unwrap();
    std::fs::write(dir.join(format!("{name}.offset")), delivered.len().to_string()).unwrap();
    let spools = Spools::open(&dir, 1 << 20, "test").unwrap();
    spools.append(&address, b"delete c\r\n").unwrap();
    eventually("the rest delivered", || received.lock().unwrap().len() == 2);
    assert_eq!(*received.lock().unwrap(), ["delete b", "delete c"]);
    assert_eq!(std::fs::read(dir.join(format!("{name}.spool.torn"))).unwrap(), torn);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_destination_that_missed_deletes_is_behind_until_its_spool_drains() {
    let dir = scratch("behind");
    let (address, received) = destination();
    let spools = Spools::open(&dir, 1 << 20, "test").unwrap();
    assert!(!spools.is_behind(&address));
    spools.append(&address, b"delete a\r\n").unwrap();
    eventually("a broadcast delete delivered", || received.lock().unwrap().len() == 1);
    assert!(!spools.is_behind(&address), "a delete spooled for a live destination is no outage");
    spools.append_missed(&address, b"delete b\r\n").unwrap();
    eventually("caught up", || !spools.is_behind(&address));
    assert_eq!(*received.lock().unwrap(), ["delete a", "delete b"]);
    // Nothing listens here: it stays behind, and so does it for the next process.
    let down = "127.0.0.1:1";
    spools.append_missed(down, b"delete c\r\n").unwrap();
    assert!(spools.is_behind(down));
    let again = Spools::open(&dir, 1 << 20, "test").unwrap();
    assert!(again.is_behind(down), "a spool left undelivered is behind");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_full_spool_refuses_and_says_whose_it_is() {
    let dir = scratch("full");
    // Nothing listens there: the records stay.
    let address = "127.0.0.1:1";
    let spools = Spools::open(&dir, 32, "test").unwrap();
    spools.append(address, b"delete a\r\n").unwrap();
    let refused = spools.append(address, b"delete b\r\n").unwrap_err().to_string();
    assert!(refused.contains("spool of 127.0.0.1:1 is full (32 bytes)"), "{refused}");
    assert_eq!(spools.depths(), [(address.to_string(), 1)]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_file_is_scanned_record_by_record_and_a_header_that_cannot_be_is_refused() {
    let dir = scratch("scan");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("a.spool");
    // Two complete records, then an append a kill cut short.
    std::fs::write(&path, b"10 1 7\ndelete a\r\n10 1 8\ndelete b\r\n10 1 9\ndel").unwrap();
    assert_eq!(shoal_spool::scan(&path, 0), Ok((2, 34)));
    assert_eq!(shoal_spool::scan(&path, 17), Ok((1, 34)));
    // More answers than bytes to answer: the delivery would wait for ever.
    std::fs::write(&path, b"1 5 0\nx").unwrap();
    assert!(shoal_spool::scan(&path, 0).unwrap_err().contains("damaged"));
    std::fs::write(&path, b"ten 1 0\ndelete a\r\n").unwrap();
    assert!(shoal_spool::scan(&path, 0).is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}
