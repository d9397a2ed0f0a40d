//! Reading a destination's answer to one request, by its [`Shape`], with every size bounded:
//! a destination that sends garbage, an endless line or a value larger than the router allows
//! fails (`InvalidData`), and the connection is closed rather than read any further.

use crate::request::Shape;
use std::io::{Error, ErrorKind};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt};

/// The longest answer line accepted (memcached's are a few hundred bytes).
const MAX_LINE: usize = 64 << 10;

fn garbage(what: String) -> Error {
    Error::new(ErrorKind::InvalidData, what)
}

/// One line, `\r\n` included.
async fn line<R: AsyncBufRead + Unpin>(reader: &mut R, out: &mut Vec<u8>) -> std::io::Result<usize> {
    let start = out.len();
    let n = (&mut *reader).take(MAX_LINE as u64).read_until(b'\n', out).await?;
    if n == 0 {
        return Err(Error::new(ErrorKind::UnexpectedEof, "the destination closed the connection"));
    }
    if !out.ends_with(b"\r\n") {
        return Err(garbage(format!("an answer line of over {MAX_LINE} bytes, or without \\r\\n")));
    }
    Ok(start)
}

/// Reads `n` bytes of data and its `\r\n`.
async fn data<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    n: usize,
    max: usize,
    out: &mut Vec<u8>,
) -> std::io::Result<()> {
    if n > max {
        return Err(garbage(format!("a value of {n} bytes (at most {max})")));
    }
    let start = out.len();
    out.resize(start + n + 2, 0);
    reader.read_exact(&mut out[start..]).await?;
    if !out.ends_with(b"\r\n") {
        return Err(garbage("a value block did not end in \\r\\n".into()));
    }
    Ok(())
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

/// Reads one answer of `shape`: the raw bytes (for [`Shape::Values`] without the `END` line,
/// so that a multiget's pieces can be joined).
pub async fn read_reply<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    shape: Shape,
    max_value: usize,
) -> std::io::Result<Vec<u8>> {
    // Room for a typical answer (a line and a small value) without growing.
    let mut out = Vec::with_capacity(256);
    match shape {
        Shape::Line => {
            line(reader, &mut out).await?;
        }
        Shape::Meta => {
            let start = line(reader, &mut out).await?;
            if out[start..].starts_with(b"VA ") {
                let n =
                    length(&out[start..], 1).ok_or_else(|| garbage("a VA line without a length".into()))?;
                data(reader, n, max_value, &mut out).await?;
            }
        }
        Shape::Values => loop {
            let start = line(reader, &mut out).await?;
            let this = &out[start..];
            if this == b"END\r\n" {
                out.truncate(start);
                return Ok(out);
            }
            if start == 0 && is_error_line(this) {
                return Ok(out);
            }
            // VALUE <key> <flags> <bytes> [<cas>]; LVALUE <key> <token> <flags> <bytes>
            let n = if this.starts_with(b"VALUE ") {
                length(this, 3)
            } else if this.starts_with(b"LVALUE ") {
                length(this, 4)
            } else {
                None
            };
            let n =
                n.ok_or_else(|| garbage(format!("unexpected answer {:?}", String::from_utf8_lossy(this))))?;
            data(reader, n, max_value, &mut out).await?;
        },
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(bytes: &[u8], shape: Shape) -> std::io::Result<Vec<u8>> {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(async { read_reply(&mut &bytes[..], shape, 1000).await })
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
