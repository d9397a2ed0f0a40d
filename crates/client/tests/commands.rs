//! Extension commands (`Client::command`): a line out, `STAT` lines or one line back, within
//! the caller's bounds, against a scripted server that answers what no real one would.

mod common;

use shoal_client::{Client, CommandAnswer, Error, Options};
use shoal_proto::Limits;

const LIMITS: Limits = Limits { line: 64, value: 0, stat_lines: 3 };

fn client() -> Client {
    let (address, _) = common::scripted_server(|_, line| {
        Some(match line {
            "curve t" => b"STAT step_bytes 100\r\nSTAT hit_ratio 0 0\r\nEND\r\n".to_vec(),
            "curve none" => b"END\r\n".to_vec(),
            "tenant_memlimit t 1" => b"OK\r\n".to_vec(),
            "tenant_memlimit t 0" => b"SERVER_ERROR below its minimum\r\n".to_vec(),
            "many" => b"STAT a 1\r\nSTAT b 2\r\nSTAT c 3\r\nSTAT d 4\r\nEND\r\n".to_vec(),
            "long" => [&[b'x'; 100][..], b"\r\n"].concat(),
            _ => b"ERROR\r\n".to_vec(),
        })
    });
    Client::connect(&address, Options { local: false, ..Options::default() }).unwrap()
}

#[test]
fn stat_lines_or_one_line_come_back() {
    let mut c = client();
    assert_eq!(
        c.command("curve t", &LIMITS).unwrap(),
        CommandAnswer::Stats(vec!["step_bytes 100".into(), "hit_ratio 0 0".into()])
    );
    assert_eq!(c.command("curve none", &LIMITS).unwrap(), CommandAnswer::Stats(Vec::new()));
    assert_eq!(c.command("tenant_memlimit t 1", &LIMITS).unwrap(), CommandAnswer::Line("OK".into()));
    let refused = c.command("tenant_memlimit t 0", &LIMITS).unwrap_err();
    assert!(matches!(&refused, Error::Server(line) if line == "SERVER_ERROR below its minimum"), "{refused}");
    assert!(matches!(c.command("what", &LIMITS), Err(Error::Server(line)) if line == "ERROR"));
    assert!(matches!(c.command("two\r\nlines", &LIMITS), Err(Error::Protocol(_))));
}

#[test]
fn answers_past_the_bounds_are_refused_and_the_connection_opened_again() {
    let mut c = client();
    let many = c.command("many", &LIMITS).unwrap_err();
    assert!(matches!(&many, Error::Protocol(why) if why.contains("more than 3 STAT lines")), "{many}");
    let long = c.command("long", &LIMITS).unwrap_err();
    assert!(matches!(&long, Error::Protocol(why) if why.contains("over 64 bytes")), "{long}");
    assert_eq!(c.command("tenant_memlimit t 1", &LIMITS).unwrap(), CommandAnswer::Line("OK".into()));
}
