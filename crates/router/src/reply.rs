//! Finding a destination's answer to one request in the bytes read so far, by its [`Shape`],
//! with every size bounded: a destination that sends garbage, an endless line or a value larger
//! than the router allows fails (`InvalidData`), and the connection is closed rather than read
//! any further.

use crate::request::Shape;
use std::io::{Error, ErrorKind};

/// The longest answer line accepted (memcached's are a few hundred bytes).
const MAX_LINE: usize = 64 << 10;

fn garbage(what: String) -> Error {
    Error::new(ErrorKind::InvalidData, what)
}

/// A whole answer at the start of the bytes read.
#[derive(Debug, PartialEq, Eq)]
pub struct Frame {
    /// Bytes the answer takes.
    pub len: usize,
    /// Bytes of it handed on: all but, for [`Shape::Values`], the `END` line (so that a
    /// multiget's pieces can be joined).
    pub answer: usize,
}

/// The end of the line that starts at `at` (just past its `\r\n`), if it is all there.
fn line_end(bytes: &[u8], at: usize) -> Result<Option<usize>, Error> {
    let window = &bytes[at..bytes.len().min(at + MAX_LINE)];
    match window.iter().position(|&b| b == b'\n') {
        Some(i) if i > 0 && window[i - 1] == b'\r' => Ok(Some(at + i + 1)),
        Some(_) => Err(garbage("an answer line without \\r\\n".into())),
        None if window.len() == MAX_LINE => Err(garbage(format!("an answer line of over {MAX_LINE} bytes"))),
        None => Ok(None),
    }
}

/// The end of a data block of `n` bytes and its `\r\n` that starts at `at`, if it is all there.
fn data_end(bytes: &[u8], at: usize, n: usize, max: usize) -> Result<Option<usize>, Error> {
    if n > max {
        return Err(garbage(format!("a value of {n} bytes (at most {max})")));
    }
    let end = at + n + 2;
    match bytes.get(end - 2..end) {
        None => Ok(None),
        Some(b"\r\n") => Ok(Some(end)),
        Some(_) => Err(garbage("a value block did not end in \\r\\n".into())),
    }
}

/// Whether a line is an error answer, which ends any reply.
fn is_error_line(line: &[u8]) -> bool {
    line == b"ERROR\r\n" || line.starts_with(b"SERVER_ERROR ") || line.starts_with(b"CLIENT_ERROR ")
}

/// The number word at `index` of a line, as a length.
fn length(line: &[u8], index: usize) -> Option<usize> {
    let text = std::str::from_utf8(line.strip_suffix(b"\r\n")?).ok()?;
    text.split(' ').nth(index)?.parse().ok()
}

/// The answer of `shape` at the start of `bytes`: `None` while it is not all there, an error
/// (`InvalidData`) when it cannot be one.
pub fn frame(bytes: &[u8], shape: Shape, max_value: usize) -> Result<Option<Frame>, Error> {
    let Some(first) = line_end(bytes, 0)? else { return Ok(None) };
    let whole = |len| Ok(Some(Frame { len, answer: len }));
    match shape {
        Shape::Line => whole(first),
        Shape::Meta if bytes.starts_with(b"VA ") => {
            let n = length(&bytes[..first], 1).ok_or_else(|| garbage("a VA line without a length".into()))?;
            data_end(bytes, first, n, max_value)?.map_or(Ok(None), whole)
        }
        Shape::Meta => whole(first),
        Shape::Values if is_error_line(&bytes[..first]) => whole(first),
        Shape::Values => {
            let (mut at, mut end) = (0, first);
            loop {
                let line = &bytes[at..end];
                if line == b"END\r\n" {
                    return Ok(Some(Frame { len: end, answer: at }));
                }
                // VALUE <key> <flags> <bytes> [<cas>]; LVALUE <key> <token> <flags> <bytes>
                let n = if line.starts_with(b"VALUE ") {
                    length(line, 3)
                } else if line.starts_with(b"LVALUE ") {
                    length(line, 4)
                } else {
                    None
                };
                let n = n.ok_or_else(|| {
                    garbage(format!("unexpected answer {:?}", String::from_utf8_lossy(line)))
                })?;
                let Some(data) = data_end(bytes, end, n, max_value)? else { return Ok(None) };
                let Some(next) = line_end(bytes, data)? else { return Ok(None) };
                (at, end) = (data, next);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The answer `frame` finds, which must not be found in any shorter prefix; cut short,
    /// the bytes are "not all there" (or garbage already).
    fn read(bytes: &[u8], shape: Shape) -> std::io::Result<Vec<u8>> {
        let found = frame(bytes, shape, 1000)?;
        let Frame { len, answer } = found.ok_or(Error::from(ErrorKind::UnexpectedEof))?;
        for cut in 0..len {
            assert!(!matches!(frame(&bytes[..cut], shape, 1000), Ok(Some(_))), "found in {cut} bytes");
        }
        Ok(bytes[..answer].to_vec())
    }

    #[test]
    fn answers_of_each_shape() {
        assert_eq!(read(b"STORED\r\nextra", Shape::Line).unwrap(), b"STORED\r\n");
        assert_eq!(
            read(b"VALUE k 0 2 9\r\nhi\r\nEND\r\n", Shape::Values).unwrap(),
            b"VALUE k 0 2 9\r\nhi\r\n"
        );
        assert_eq!(read(b"END\r\n", Shape::Values).unwrap(), b"");
        assert_eq!(read(b"LVALUE k 5 0 0\r\n\r\nEND\r\n", Shape::Values).unwrap(), b"LVALUE k 5 0 0\r\n\r\n");
        assert_eq!(read(b"SERVER_ERROR busy\r\n", Shape::Values).unwrap(), b"SERVER_ERROR busy\r\n");
        assert_eq!(read(b"VA 2 f1\r\nhi\r\n", Shape::Meta).unwrap(), b"VA 2 f1\r\nhi\r\n");
        assert_eq!(read(b"EN\r\n", Shape::Meta).unwrap(), b"EN\r\n");
    }

    #[test]
    fn garbage_and_oversize_are_refused() {
        for (bytes, shape) in [
            (&b"VALUE k 0 5000\r\n"[..], Shape::Values),
            (b"HELLO\r\n", Shape::Values),
            (b"VALUE k 0 2\r\nhiXX", Shape::Values),
            (b"VA x\r\n", Shape::Meta),
            (b"no newline", Shape::Line),
        ] {
            let e = read(bytes, shape).unwrap_err();
            assert!(matches!(e.kind(), ErrorKind::InvalidData | ErrorKind::UnexpectedEof), "{e}");
        }
        let long = vec![b'x'; MAX_LINE + 10];
        assert_eq!(read(&long, Shape::Line).unwrap_err().kind(), ErrorKind::InvalidData);
    }
}
