//! Answers as a client of a server reads them: finding one whole answer in the bytes read so
//! far, by its [`Shape`], with every size bounded ([`frame`]: a server that sends garbage, an
//! endless line or a value larger than allowed fails with `InvalidData`, and the caller closes
//! the connection rather than read any further), and reading what a framed answer says
//! (`VALUE` headers and blocks, `STAT` lines, error lines).

use crate::token::digits;
use std::io::{Error, ErrorKind};
use std::ops::Range;

/// The longest answer line accepted by default (memcached's are a few hundred bytes).
pub const MAX_ANSWER_LINE: usize = 64 << 10;

/// The largest value a server may announce by default: memcached's largest item (`-I
/// 1024m`). A broken or hostile server cannot make a reader buffer more than this for one value.
pub const MAX_VALUE_BYTES: usize = 1 << 30;

/// How a server's answer to a request ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// `VALUE`/`LVALUE` blocks, then `END` (or one error line).
    Values,
    /// One line.
    Line,
    /// A meta line, with a data block after `VA <n>`.
    Meta,
    /// `STAT` lines, then `END` (`stats` and Shoal's extensions); or one other line, a status
    /// or an error.
    Stats,
}

/// The bounds [`frame_within`] holds an answer to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The longest line, its `\r\n` included.
    pub line: usize,
    /// The largest value block, its `\r\n` excluded.
    pub value: usize,
    /// The most `STAT` lines of a [`Shape::Stats`] answer.
    pub stat_lines: usize,
}

impl Limits {
    /// Lines of [`MAX_ANSWER_LINE`], values of `max_value` bytes, any number of `STAT` lines.
    pub const fn values(max_value: usize) -> Limits {
        Limits { line: MAX_ANSWER_LINE, value: max_value, stat_lines: usize::MAX }
    }
}

fn garbage(what: String) -> Error {
    Error::new(ErrorKind::InvalidData, what)
}

/// A whole answer at the start of the bytes read.
#[derive(Debug, PartialEq, Eq)]
pub struct Frame {
    /// Bytes the answer takes.
    pub len: usize,
    /// Bytes of it handed on: all but, for [`Shape::Values`] and [`Shape::Stats`], the `END`
    /// line (so that a multiget's pieces can be joined).
    pub answer: usize,
}

/// The end of the line that starts at `at` (just past its `\r\n`), if it is all there.
fn line_end(bytes: &[u8], at: usize, max_line: usize) -> Result<Option<usize>, Error> {
    let window = &bytes[at..bytes.len().min(at.saturating_add(max_line))];
    match window.iter().position(|&b| b == b'\n') {
        Some(i) if i > 0 && window[i - 1] == b'\r' => Ok(Some(at + i + 1)),
        Some(_) => Err(garbage("an answer line without \\r\\n".into())),
        None if window.len() == max_line => Err(garbage(format!("an answer line of over {max_line} bytes"))),
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

/// Whether a line (without its `\r\n`) is an error answer, which ends any reply: `ERROR`,
/// `CLIENT_ERROR …`, `SERVER_ERROR …`.
pub fn is_error_line(line: &[u8]) -> bool {
    line == b"ERROR" || line.starts_with(b"SERVER_ERROR") || line.starts_with(b"CLIENT_ERROR")
}

/// The number word at `index` of a line, as a length.
fn length(line: &[u8], index: usize) -> Option<usize> {
    let text = std::str::from_utf8(line.strip_suffix(b"\r\n")?).ok()?;
    text.split(' ').nth(index)?.parse().ok()
}

/// The length of the data block a `VALUE <key> <flags> <bytes> [<cas>]` or `LVALUE <key>
/// <token> <flags> <bytes>` line announces; `None` for any other line.
fn value_block(line: &[u8]) -> Option<usize> {
    if line.starts_with(b"VALUE ") {
        length(line, 3)
    } else if line.starts_with(b"LVALUE ") {
        length(line, 4)
    } else {
        None
    }
}

/// The answer of `shape` at the start of `bytes`, with lines of at most [`MAX_ANSWER_LINE`]
/// bytes and values of at most `max_value`: `None` while it is not all there, an error
/// (`InvalidData`) when it cannot be one.
pub fn frame(bytes: &[u8], shape: Shape, max_value: usize) -> Result<Option<Frame>, Error> {
    frame_within(bytes, shape, &Limits::values(max_value))
}

/// [`frame`] within `limits`.
pub fn frame_within(bytes: &[u8], shape: Shape, limits: &Limits) -> Result<Option<Frame>, Error> {
    let Some(first) = line_end(bytes, 0, limits.line)? else { return Ok(None) };
    let whole = |len| Ok(Some(Frame { len, answer: len }));
    let first_line = &bytes[..first - 2];
    match shape {
        Shape::Line => whole(first),
        Shape::Meta if bytes.starts_with(b"VA ") => {
            let n = length(&bytes[..first], 1).ok_or_else(|| garbage("a VA line without a length".into()))?;
            data_end(bytes, first, n, limits.value)?.map_or(Ok(None), whole)
        }
        Shape::Meta => whole(first),
        Shape::Values if is_error_line(first_line) => whole(first),
        Shape::Values => {
            let (mut at, mut end) = (0, first);
            loop {
                let line = &bytes[at..end];
                if line == b"END\r\n" {
                    return Ok(Some(Frame { len: end, answer: at }));
                }
                let n = value_block(line).ok_or_else(|| {
                    garbage(format!("unexpected answer {:?}", String::from_utf8_lossy(line)))
                })?;
                let Some(data) = data_end(bytes, end, n, limits.value)? else { return Ok(None) };
                let Some(next) = line_end(bytes, data, limits.line)? else { return Ok(None) };
                (at, end) = (data, next);
            }
        }
        Shape::Stats if !first_line.starts_with(b"STAT ") && first_line != b"END" => whole(first),
        Shape::Stats => {
            let (mut at, mut end, mut lines) = (0, first, 0);
            loop {
                let line = &bytes[at..end];
                if line == b"END\r\n" {
                    return Ok(Some(Frame { len: end, answer: at }));
                }
                if !line.starts_with(b"STAT ") {
                    return Err(garbage(format!("unexpected answer {:?}", String::from_utf8_lossy(line))));
                }
                lines += 1;
                if lines > limits.stat_lines {
                    return Err(garbage(format!("more than {} STAT lines", limits.stat_lines)));
                }
                let Some(next) = line_end(bytes, end, limits.line)? else { return Ok(None) };
                (at, end) = (end, next);
            }
        }
    }
}

/// The lines of a framed answer, each without its `\r\n`.
pub fn lines(answer: &[u8]) -> impl Iterator<Item = &[u8]> {
    answer.split_inclusive(|&b| b == b'\n').map(|l| l.strip_suffix(b"\r\n").unwrap_or(l))
}

/// A `VALUE <key> <flags> <bytes> [<cas>]` header.
#[derive(Debug, PartialEq, Eq)]
pub struct ValueHeader<'a> {
    /// The key.
    pub key: &'a [u8],
    /// The client flags.
    pub flags: u32,
    /// The length of the value block that follows.
    pub len: usize,
    /// The CAS unique (`gets`), or 0.
    pub cas: u64,
}

impl<'a> ValueHeader<'a> {
    /// Parses a `VALUE` line (without `\r\n`); `None` if the line is something else.
    pub fn parse(line: &'a [u8]) -> Option<ValueHeader<'a>> {
        let mut words = line.strip_prefix(b"VALUE ")?.split(|&b| b == b' ');
        let key = words.next()?;
        let flags = number(words.next()?)?;
        let len = number(words.next()?)?;
        let cas = words.next().map_or(Some(0), number)?;
        words.next().is_none().then_some(ValueHeader { key, flags, len, cas })
    }
}

/// An `LVALUE <key> <token> <flags> <bytes>` header: `lease-get`'s answer without a value
/// (Shoal's and mcrouter's leases).
#[derive(Debug, PartialEq, Eq)]
pub struct LeaseHeader<'a> {
    /// The key.
    pub key: &'a [u8],
    /// The lease token (1: a hot miss, someone else holds the lease).
    pub token: u64,
    /// The flags of the stale value that follows, if any.
    pub flags: u32,
    /// The length of the (stale) value block that follows.
    pub len: usize,
}

impl<'a> LeaseHeader<'a> {
    /// Parses an `LVALUE` line (without `\r\n`); `None` if the line is something else.
    pub fn parse(line: &'a [u8]) -> Option<LeaseHeader<'a>> {
        let mut words = line.strip_prefix(b"LVALUE ")?.split(|&b| b == b' ');
        let key = words.next()?;
        let token = number(words.next()?)?;
        let flags = number(words.next()?)?;
        let len = number(words.next()?)?;
        words.next().is_none().then_some(LeaseHeader { key, token, flags, len })
    }
}

/// One block of a framed [`Shape::Values`] answer: its header line (without `\r\n`) and its
/// data.
#[derive(Debug, PartialEq, Eq)]
pub struct Block<'a> {
    pub line: &'a [u8],
    pub data: &'a [u8],
}

/// The blocks of a [`Shape::Values`] answer that [`frame`] found whole (`&bytes[..answer]`:
/// without `END`); nothing for an error line.
pub fn blocks(answer: &[u8]) -> impl Iterator<Item = Block<'_>> {
    blocks_at(answer).map(|(_, block)| block)
}

/// [`blocks`], each with where it lies in `answer`: the range of its header line, data and
/// both `\r\n`s (what a router copies to pass one block on).
pub fn blocks_at(answer: &[u8]) -> impl Iterator<Item = (Range<usize>, Block<'_>)> {
    let mut at = 0;
    std::iter::from_fn(move || {
        let rest = &answer[at..];
        let nl = rest.iter().position(|&b| b == b'\n')?;
        let n = value_block(&rest[..=nl])?;
        let data = rest.get(nl + 1..nl + 1 + n)?;
        let end = nl + 3 + n;
        rest.get(..end)?;
        let found = (at..at + end, Block { line: &rest[..nl - 1], data });
        at += end;
        Some(found)
    })
}

/// A decimal number (digits only, as servers send them) of type `T`.
pub fn number<T: TryFrom<u64>>(word: &[u8]) -> Option<T> {
    digits(word).and_then(|n| T::try_from(n).ok())
}

/// A `STAT <name> <value>` line (without `\r\n`) as its name and value.
pub fn stat(line: &[u8]) -> Option<(&str, &str)> {
    let rest = std::str::from_utf8(line.strip_prefix(b"STAT ")?).ok()?;
    rest.split_once(' ')
}

#[cfg(test)]
mod tests;
