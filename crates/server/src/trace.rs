//! `-vv`: every command and answer on stderr, in memcached's notation.
//!
//! memcached prints `<fd command` for each command line it reads, `>fd answer` for each status
//! line it sends, `>fd sending key K` for each value (never the data itself) and `<fd
//! connection closed.` when a client goes. The connection loop calls [`exchange`] after each
//! request with the bytes it consumed and the answer it appended, so tracing costs nothing but
//! one relaxed load per batch when it is off.

use std::io::Write;

/// Prints one request's command line and its answer.
pub fn exchange(id: u64, request: &[u8], answer: &[u8]) {
    let mut err = std::io::stderr().lock();
    // A trace line that cannot be written (stderr closed) is not worth failing the request.
    let _ = write_exchange(&mut err, id, request, answer);
}

/// Prints that a connection closed.
pub fn closed(id: u64) {
    eprintln!("<{id} connection closed.");
}

fn write_exchange(w: &mut impl Write, id: u64, request: &[u8], answer: &[u8]) -> std::io::Result<()> {
    writeln!(w, "<{id} {}", String::from_utf8_lossy(first_line(request)))?;
    let mut rest = answer;
    while !rest.is_empty() {
        let line = first_line(rest);
        rest = rest.get(line.len() + 2..).unwrap_or_default();
        let mut words = line.split(|&b| b == b' ');
        let (head, second) = (words.next().unwrap_or_default(), words.next().unwrap_or_default());
        // The data block after `VALUE k f n` or `VA n …` is skipped by its declared length.
        let data_len = match head {
            b"VALUE" => words.nth(1),
            b"VA" => Some(second),
            _ => None,
        }
        .and_then(|n| std::str::from_utf8(n).ok()?.parse::<usize>().ok());
        if head == b"VALUE" {
            writeln!(w, ">{id} sending key {}", String::from_utf8_lossy(second))?;
        } else {
            writeln!(w, ">{id} {}", String::from_utf8_lossy(line))?;
        }
        if let Some(n) = data_len {
            rest = rest.get(n + 2..).unwrap_or_default();
        }
    }
    Ok(())
}

/// The bytes before the first `\r\n` (or `\n`), or all of them.
fn first_line(bytes: &[u8]) -> &[u8] {
    let end = bytes.iter().position(|&b| b == b'\n').unwrap_or(bytes.len());
    let line = &bytes[..end];
    line.strip_suffix(b"\r").unwrap_or(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(request: &[u8], answer: &[u8]) -> String {
        let mut out = Vec::new();
        write_exchange(&mut out, 7, request, answer).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn values_are_named_not_printed() {
        let answer = b"VALUE a 0 5\r\nx\r\nyz\r\nVALUE b 3 0 9\r\n\r\nEND\r\n";
        assert_eq!(trace(b"get a b\r\n", answer), "<7 get a b\n>7 sending key a\n>7 sending key b\n>7 END\n");
    }

    #[test]
    fn status_lines_and_meta_values() {
        assert_eq!(trace(b"set a 0 0 1\r\nx\r\n", b"STORED\r\n"), "<7 set a 0 0 1\n>7 STORED\n");
        assert_eq!(trace(b"mg a v\r\n", b"VA 2 f0\r\nhi\r\nMN\r\n"), "<7 mg a v\n>7 VA 2 f0\n>7 MN\n");
        assert_eq!(trace(b"set a 0 0 1 noreply\r\nx\r\n", b""), "<7 set a 0 0 1 noreply\n");
    }

    #[test]
    fn a_truncated_or_lying_answer_does_not_panic() {
        assert_eq!(trace(b"get a", b"VALUE a 0 999\r\nx"), "<7 get a\n>7 sending key a\n");
        assert_eq!(trace(b"", b"VA x\r\n"), "<7 \n>7 VA x\n");
    }
}
