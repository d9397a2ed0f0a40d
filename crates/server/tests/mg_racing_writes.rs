//! Meta `mg` writes its answer straight into the output while the region copies the value;
//! a lookup that races a writer starts its answer over. Here one connection keeps replacing
//! a key with values of two lengths while others read it with `mg`: every answer must be one
//! whole, consistent block (the release binary, several worker threads).

#[path = "../../client/tests/common/mod.rs"]
mod common;

use common::Server;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The two versions the writer alternates: client flags, length and byte of the value.
const VERSIONS: [(u32, usize, u8); 2] = [(1, 100, b'a'), (2, 3000, b'b')];

fn connect(address: &str) -> (TcpStream, BufReader<TcpStream>) {
    let stream = TcpStream::connect(address).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let reader = BufReader::new(stream.try_clone().unwrap());
    (stream, reader)
}

fn line(reader: &mut BufReader<TcpStream>) -> String {
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    line
}

/// The version (index into [`VERSIONS`]) that flags `f<n>` name, checked against `s<len>`.
fn version_of(tokens: &[&str], answer: &str) -> usize {
    let v = VERSIONS.iter().position(|(flags, _, _)| tokens.contains(&format!("f{flags}").as_str()));
    let v = v.unwrap_or_else(|| panic!("unknown flags in {answer:?}"));
    assert!(tokens.contains(&format!("s{}", VERSIONS[v].1).as_str()), "size of another version: {answer:?}");
    v
}

#[test]
fn mg_answers_whole_blocks_while_the_value_changes_under_it() {
    let server = Server::shoal("mg-race", 0, &["-t", "4"]);
    let address = server.address();
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let (mut out, mut answers) = connect(&address);
            for i in 0.. {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let (flags, len, byte) = VERSIONS[i % 2];
                let mut request = format!("ms k {len} F{flags} T0\r\n").into_bytes();
                request.extend(std::iter::repeat_n(byte, len));
                request.extend_from_slice(b"\r\n");
                out.write_all(&request).unwrap();
                assert_eq!(line(&mut answers), "HD\r\n");
            }
        });
        let readers: Vec<_> = (0..2)
            .map(|_| {
                scope.spawn(|| {
                    let (mut out, mut answers) = connect(&address);
                    let mut seen = [0usize; 2];
                    for i in 0..4000 {
                        if i % 4 == 3 {
                            // Without `v`: the line alone, still consistent.
                            out.write_all(b"mg k f s\r\n").unwrap();
                            let answer = line(&mut answers);
                            let tokens: Vec<&str> = answer.split_whitespace().collect();
                            assert!(!tokens.is_empty(), "the connection closed");
                            if tokens[0] == "EN" {
                                continue; // before the first store
                            }
                            assert_eq!(tokens[0], "HD", "{answer:?}");
                            version_of(&tokens, &answer);
                            continue;
                        }
                        out.write_all(b"mg k v f s t O7 k\r\n").unwrap();
                        let answer = line(&mut answers);
                        let tokens: Vec<&str> = answer.split_whitespace().collect();
                        assert!(!tokens.is_empty(), "the connection closed");
                        if tokens == ["EN", "O7", "kk"] {
                            continue;
                        }
                        let tail = tokens.get(4..);
                        assert_eq!((tokens[0], tail), ("VA", Some(&["t-1", "O7", "kk"][..])), "{answer:?}");
                        let v = version_of(&tokens, &answer);
                        let (_, len, byte) = VERSIONS[v];
                        assert_eq!(tokens[1], len.to_string(), "{answer:?}");
                        let mut value = vec![0u8; len + 2];
                        answers.read_exact(&mut value).unwrap();
                        assert!(value.ends_with(b"\r\n"), "the value block of {answer:?} runs on");
                        assert!(value[..len].iter().all(|&b| b == byte), "a value mixed from two versions");
                        seen[v] += 1;
                    }
                    seen
                })
            })
            .collect();
        let seen: Vec<_> = readers.into_iter().map(|r| r.join()).collect();
        // The writer stops even when a reader failed, or the scope would wait for it forever.
        stop.store(true, Ordering::Relaxed);
        let seen: Vec<[usize; 2]> = seen.into_iter().map(|r| r.unwrap()).collect();
        let totals = seen.iter().fold([0, 0], |t, s| [t[0] + s[0], t[1] + s[1]]);
        assert!(totals[0] > 0 && totals[1] > 0, "the readers saw both versions: {totals:?}");
    });
}
