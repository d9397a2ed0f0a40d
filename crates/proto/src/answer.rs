//! Answers as a client of a server reads them: finding one whole answer in the bytes read so
//! far, by its [`Shape`], with every size bounded ([`frame`]: a server that sends garbage, an
//! endless line or a value larger than allowed fails with `InvalidData`, and the caller closes
//! the connection rather than read any further), and reading what a framed answer says
//! (`VALUE` headers and blocks, `STAT` lines, error lines).

use crate::token::{digits, find_byte};
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

/// The word after the first `index` spaces of a line (without its `\r\n`), as `split(' ')`
/// would give it, found a byte at a time: the words it is asked for are a few digits (a
/// `VALUE` line's flags and length, a `VA` line's length), too short for [`find_byte`]'s eight
/// bytes at a time, and splitting the whole line into words was half of a get's framing in a
/// router (issue #29).
fn nth_word(mut line: &[u8], index: usize) -> Option<&[u8]> {
    let word_end = |line: &[u8]| line.iter().position(|&b| b == b' ');
    for _ in 0..index {
        line = &line[word_end(line)? + 1..];
    }
    Some(&line[..word_end(line).unwrap_or(line.len())])
}

/// The number word at `index` of a line (with its `\r\n`), as a length.
fn length(line: &[u8], index: usize) -> Option<usize> {
    number(nth_word(line.strip_suffix(b"\r\n")?, index)?)
}

/// The key and the length of the data block a `VALUE <key> <flags> <bytes> [<cas>]` or
/// `LVALUE <key> <token> <flags> <bytes>` line (with its `\r\n`) announces; `None` for any
/// other line. Bytes, not text: a key need not be UTF-8, and its end (up to 250 bytes on) is
/// found [`find_byte`]'s way.
fn value_block(line: &[u8]) -> Option<(&[u8], usize)> {
    let line = line.strip_suffix(b"\r\n")?;
    // Where the length is among the words after the key.
    let (rest, index) = match line.strip_prefix(b"VALUE ") {
        Some(rest) => (rest, 1),
        None => (line.strip_prefix(b"LVALUE ")?, 2),
    };
    let key_end = find_byte(rest, b' ')?;
    Some((&rest[..key_end], number(nth_word(&rest[key_end + 1..], index)?)?))
}

/// The answer of `shape` at the start of `bytes`, with lines of at most [`MAX_ANSWER_LINE`]
/// bytes and values of at most `max_value`: `None` while it is not all there, an error
/// (`InvalidData`) when it cannot be one.
pub fn frame(bytes: &[u8], shape: Shape, max_value: usize) -> Result<Option<Frame>, Error> {
    frame_within(bytes, shape, &Limits::values(max_value))
}

/// [`frame`] within `limits`.
pub fn frame_within(bytes: &[u8], shape: Shape, limits: &Limits) -> Result<Option<Frame>, Error> {
    Framer::default().frame(bytes, shape, limits)
}

/// [`frame_within`] resumed where the last call left off: a reader that gets an answer in
/// many reads (a large multiget) keeps one per connection, so that the lines and blocks framed
/// after one read are not framed again after the next (which made reading an answer of `n`
/// blocks cost `n²/2` block framings).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Framer {
    /// Where the answer's next unframed line starts: everything before it is framed.
    at: usize,
    /// Where the search for that line's newline goes on: up to here there is none (or, when
    /// the line is whole and its value block is not, the newline itself).
    scanned: usize,
    /// The `STAT` lines framed so far.
    stat_lines: usize,
}

impl Framer {
    /// The answer of `shape` at the start of `bytes` within `limits`, as [`frame_within`]
    /// finds it. After `Ok(None)` the next call must get the same bytes followed by more (and
    /// the same shape and limits); after an answer or an error, the framer starts over, for the
    /// next answer (whose bytes start where this one's `len` ended). A caller that gives up on
    /// an answer halfway calls [`Framer::reset`].
    pub fn frame(&mut self, bytes: &[u8], shape: Shape, limits: &Limits) -> Result<Option<Frame>, Error> {
        let framed = self.resume(bytes, shape, limits);
        if !matches!(framed, Ok(None)) {
            self.reset();
        }
        framed
    }

    /// Forgets a partly framed answer.
    pub fn reset(&mut self) {
        *self = Framer::default();
    }

    fn resume(&mut self, bytes: &[u8], shape: Shape, limits: &Limits) -> Result<Option<Frame>, Error> {
        let whole = |len| Ok(Some(Frame { len, answer: len }));
        loop {
            let Some(end) = self.line_end(bytes, limits.line)? else { return Ok(None) };
            let (at, first) = (self.at, self.at == 0);
            let line = &bytes[at..end];
            match shape {
                Shape::Line => return whole(end),
                Shape::Meta if line.starts_with(b"VA ") => {
                    let n = length(line, 1).ok_or_else(|| garbage("a VA line without a length".into()))?;
                    return self.data_end(bytes, end, n, limits.value)?.map_or(Ok(None), whole);
                }
                Shape::Meta => return whole(end),
                Shape::Values if first && is_error_line(&line[..line.len() - 2]) => return whole(end),
                Shape::Values => {
                    if line == b"END\r\n" {
                        return Ok(Some(Frame { len: end, answer: at }));
                    }
                    let (_, n) = value_block(line).ok_or_else(|| {
                        garbage(format!("unexpected answer {:?}", String::from_utf8_lossy(line)))
                    })?;
                    let Some(data) = self.data_end(bytes, end, n, limits.value)? else { return Ok(None) };
                    (self.at, self.scanned) = (data, data);
                }
                Shape::Stats if first && !line.starts_with(b"STAT ") && line != b"END\r\n" => {
                    return whole(end)
                }
                Shape::Stats => {
                    if line == b"END\r\n" {
                        return Ok(Some(Frame { len: end, answer: at }));
                    }
                    if !line.starts_with(b"STAT ") {
                        return Err(garbage(format!(
                            "unexpected answer {:?}",
                            String::from_utf8_lossy(line)
                        )));
                    }
                    self.stat_lines += 1;
                    if self.stat_lines > limits.stat_lines {
                        return Err(garbage(format!("more than {} STAT lines", limits.stat_lines)));
                    }
                    (self.at, self.scanned) = (end, end);
                }
            }
        }
    }

    /// The end of the line that starts at `self.at` (just past its `\r\n`), if it is all
    /// there; otherwise notes how far it was searched.
    fn line_end(&mut self, bytes: &[u8], max_line: usize) -> Result<Option<usize>, Error> {
        let at = self.at;
        let window_end = bytes.len().min(at.saturating_add(max_line));
        let from = self.scanned.clamp(at, window_end.max(at));
        match find_byte(bytes.get(from..window_end).unwrap_or_default(), b'\n') {
            Some(i) if from + i > at && bytes[from + i - 1] == b'\r' => Ok(Some(from + i + 1)),
            Some(_) => Err(garbage("an answer line without \\r\\n".into())),
            None if window_end.saturating_sub(at) == max_line => {
                Err(garbage(format!("an answer line of over {max_line} bytes")))
            }
            None => {
                self.scanned = window_end.max(at);
                Ok(None)
            }
        }
    }

    /// [`data_end`], noting when the block is not all there that the line before it (ending
    /// at `line_end`) needs no new search.
    fn data_end(
        &mut self,
        bytes: &[u8],
        line_end: usize,
        n: usize,
        max: usize,
    ) -> Result<Option<usize>, Error> {
        let end = data_end(bytes, line_end, n, max)?;
        if end.is_none() {
            self.scanned = line_end - 1;
        }
        Ok(end)
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

/// One block of a framed [`Shape::Values`] answer: its header line (without `\r\n`), the key
/// it names and its data.
#[derive(Debug, PartialEq, Eq)]
pub struct Block<'a> {
    pub line: &'a [u8],
    pub key: &'a [u8],
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
        let nl = find_byte(rest, b'\n')?;
        let (key, n) = value_block(&rest[..=nl])?;
        let data = rest.get(nl + 1..nl + 1 + n)?;
        let end = nl + 3 + n;
        rest.get(..end)?;
        let found = (at..at + end, Block { line: &rest[..nl - 1], key, data });
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
