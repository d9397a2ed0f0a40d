//! PostgreSQL's `test_decoding` output, one row of `pg_logical_slot_peek_changes` at a time.
//!
//! The rows the invalidator asks for (options `include-xids 1`, `include-timestamp 1`) are:
//!
//! ```text
//!   BEGIN 741
//!   table public.users: UPDATE: id[integer]:7 name[text]:'Ann''s'
//!   message: transactional: 1 prefix: shoal, sz: 13 content:user:7 feed:7
//!   COMMIT 741 (at 2026-11-24 02:45:47.266026+00)
//! ```
//!
//! (the transaction id, [`commit_xid`], lets the invalidator wait until the commit is visible
//! to readers before deleting: `postgres.rs`).
//!
//! A row change lists `column[type]:value` pairs, values either bare (`7`, `null`,
//! `unchanged-toast-datum`) or single-quoted with `''` for a quote; an `UPDATE` whose key
//! changed lists `old-key:` columns then `new-tuple:` columns. Anything else is [`Row::Other`].

/// One decoded row.
#[derive(Debug, PartialEq, Eq)]
pub enum Row<'a> {
    /// A transaction begins.
    Begin,
    /// A transaction committed, at this many microseconds since the epoch (`None` when the
    /// time is missing or unreadable: lag is then not measured for it).
    Commit(Option<u64>),
    /// A logical-decoding message.
    Message {
        /// Emitted with `transactional = true` (delivered at commit, dropped on rollback).
        transactional: bool,
        /// Its prefix (the invalidator reads `shoal`).
        prefix: &'a str,
        /// Its content.
        content: &'a [u8],
    },
    /// A row was inserted, updated or deleted.
    Change {
        /// `schema.table`, as test_decoding quotes it.
        table: &'a str,
        /// `INSERT`, `UPDATE`, `DELETE` (or `TRUNCATE`, with no columns).
        operation: &'a str,
        /// The columns shown, by name, with their values (`None` for SQL NULL and for TOAST
        /// values that did not change).
        columns: Vec<(&'a str, Option<String>)>,
    },
    /// Anything else (a future row kind): ignored.
    Other,
}

/// Decodes one row's `data`; `Err` says why a row that looked like a message or a change
/// could not be read.
pub fn parse(data: &[u8]) -> Result<Row<'_>, String> {
    if data == b"BEGIN" || data.starts_with(b"BEGIN ") {
        return Ok(Row::Begin);
    }
    if let Some(rest) = data.strip_prefix(b"COMMIT") {
        return Ok(Row::Commit(commit_time(rest)));
    }
    if let Some(rest) = data.strip_prefix(b"message: transactional: ") {
        return message(rest);
    }
    if let Some(rest) = data.strip_prefix(b"table ") {
        return change(rest);
    }
    Ok(Row::Other)
}

fn message(rest: &[u8]) -> Result<Row<'_>, String> {
    let bad = || {
        "a message row that does not read `message: transactional: N prefix: P, sz: N content:…`".to_string()
    };
    let (flag, rest) = rest.split_first().ok_or_else(bad)?;
    let rest = rest.strip_prefix(b" prefix: ").ok_or_else(bad)?;
    let comma = rest.windows(6).position(|w| w == b", sz: ").ok_or_else(bad)?;
    let prefix = std::str::from_utf8(&rest[..comma]).map_err(|_| bad())?;
    let rest = &rest[comma + 6..];
    let space = rest.iter().position(|&b| b == b' ').ok_or_else(bad)?;
    let size: usize =
        std::str::from_utf8(&rest[..space]).ok().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
    let content = rest[space..].strip_prefix(b" content:").ok_or_else(bad)?;
    if content.len() != size {
        return Err(format!("a message row says {size} bytes but holds {}", content.len()));
    }
    Ok(Row::Message { transactional: *flag == b'1', prefix, content })
}

fn change(rest: &[u8]) -> Result<Row<'_>, String> {
    let text = std::str::from_utf8(rest).map_err(|_| "a change row that is not UTF-8".to_string())?;
    let bad = || format!("a change row that does not read `table S.T: OP: columns`: {}", clip(text));
    let (table, rest) = text.split_once(": ").ok_or_else(bad)?;
    let (operation, mut rest) = rest.split_once(':').ok_or_else(bad)?;
    let mut columns = Vec::new();
    loop {
        rest = rest.trim_start_matches(' ');
        // `(no-tuple-data)`, and TRUNCATE's `(no-flags)`, `(restart_seqs)`, `(cascade)`.
        if rest.is_empty() || rest.starts_with('(') {
            break;
        }
        for marker in ["old-key: ", "new-tuple: "] {
            rest = rest.strip_prefix(marker).unwrap_or(rest);
        }
        let open = rest.find('[').ok_or_else(bad)?;
        let name = &rest[..open];
        let close = rest.find("]:").ok_or_else(bad)?;
        let after = &rest[close + 2..];
        let (value, remaining) = if let Some(quoted) = after.strip_prefix('\'') {
            let (value, used) = unquote(quoted).ok_or_else(bad)?;
            (Some(value), &quoted[used..])
        } else {
            let end = after.find(' ').unwrap_or(after.len());
            let bare = &after[..end];
            let value = (bare != "null" && bare != "unchanged-toast-datum").then(|| bare.to_string());
            (value, &after[end..])
        };
        columns.push((name, value));
        rest = remaining;
    }
    Ok(Row::Change { table, operation, columns })
}

/// The text of a quoted value (after its opening quote) and the bytes used, closing quote
/// included.
fn unquote(quoted: &str) -> Option<(String, usize)> {
    let mut value = String::new();
    let mut chars = quoted.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        if c == '\'' {
            if chars.peek().is_some_and(|&(_, next)| next == '\'') {
                chars.next();
                value.push('\'');
            } else {
                return Some((value, at + 1));
            }
        } else {
            value.push(c);
        }
    }
    None
}

/// `(at 2026-11-24 02:45:47.266026+00)` as microseconds since the epoch.
/// The transaction id a `COMMIT <xid> …` row shows (`include-xids 1`), if it shows one.
pub fn commit_xid(data: &[u8]) -> Option<u32> {
    let rest = std::str::from_utf8(data.strip_prefix(b"COMMIT ")?).ok()?;
    rest.split(' ').next()?.parse().ok()
}

fn commit_time(rest: &[u8]) -> Option<u64> {
    // After the transaction id, if the row shows one.
    let text = std::str::from_utf8(rest).ok()?.trim().trim_start_matches(|c: char| c.is_ascii_digit());
    let text = text.trim_start().strip_prefix("(at ")?.strip_suffix(')')?;
    let (date, time) = text.split_once(' ')?;
    let mut ymd = date.split('-').map(|p| p.parse::<i64>().ok());
    let (year, month, day) = (ymd.next()??, ymd.next()??, ymd.next()??);
    // The zone is `+HH`, `-HH` or `+HH:MM` after the seconds.
    let zone_at = time.rfind(['+', '-'])?;
    let (clock, zone) = time.split_at(zone_at);
    let sign = if zone.starts_with('-') { -1 } else { 1 };
    let mut zone_parts = zone[1..].split(':').map(|p| p.parse::<i64>().ok().filter(|n| (0..=99).contains(n)));
    let zone_minutes = zone_parts.next()?? * 60 + zone_parts.next().flatten().unwrap_or(0);
    let mut hms = clock.split(':');
    let (hours, minutes) = (hms.next()?.parse::<i64>().ok()?, hms.next()?.parse::<i64>().ok()?);
    let seconds = hms.next()?;
    let (whole, fraction) = seconds.split_once('.').unwrap_or((seconds, ""));
    let micros_text = format!("{fraction:0<6}");
    let micros = micros_text.get(..6)?.parse::<i64>().ok()?;
    let in_range = (1..=9999).contains(&year)
        && (1..=12).contains(&month)
        && (1..=31).contains(&day)
        && (0..=24).contains(&hours)
        && (0..60).contains(&minutes)
        && (0..=24 * 60).contains(&zone_minutes);
    if !in_range {
        return None;
    }
    let days = days_from_civil(year, month, day);
    let local = ((days * 24 + hours) * 60 + minutes) * 60
        + whole.parse::<i64>().ok().filter(|s| (0..=60).contains(s))?;
    let utc = local - sign * zone_minutes * 60;
    u64::try_from(utc * 1_000_000 + micros).ok()
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let day_of_year = (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// At most 120 characters of `text`, for messages.
pub fn clip(text: &str) -> &str {
    let end = text.char_indices().nth(120).map_or(text.len(), |(at, _)| at);
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_rows_postgres_15_writes() {
        assert_eq!(parse(b"BEGIN").unwrap(), Row::Begin);
        assert_eq!(
            parse(b"COMMIT (at 2026-11-24 02:45:47.266026+00)").unwrap(),
            Row::Commit(Some(1_795_488_347_266_026))
        );
        assert_eq!(
            parse(b"COMMIT (at 2026-11-24 04:45:47.5+02)").unwrap(),
            Row::Commit(Some(1_795_488_347_500_000))
        );
        assert_eq!(parse(b"COMMIT").unwrap(), Row::Commit(None));
        // With include-xids 1 (what the invalidator asks for).
        assert_eq!(parse(b"BEGIN 741").unwrap(), Row::Begin);
        let with_xid = b"COMMIT 741 (at 2026-11-24 02:45:47.266026+00)";
        assert_eq!(parse(with_xid).unwrap(), Row::Commit(Some(1_795_488_347_266_026)));
        assert_eq!(commit_xid(with_xid), Some(741));
        assert_eq!(commit_xid(b"COMMIT 741"), Some(741));
        assert_eq!(commit_xid(b"COMMIT (at 2026-11-24 02:45:47.266026+00)"), None);
        assert_eq!(commit_xid(b"COMMIT"), None);
        assert_eq!(
            parse(b"message: transactional: 1 prefix: shoal, sz: 15 content:users:1 users:2").unwrap(),
            Row::Message { transactional: true, prefix: "shoal", content: b"users:1 users:2" }
        );
        let Row::Change { table, operation, columns } =
            parse(b"table public.users: UPDATE: id[integer]:7 name[text]:'Ann''s x' bio[text]:null").unwrap()
        else {
            panic!("not a change")
        };
        assert_eq!((table, operation), ("public.users", "UPDATE"));
        assert_eq!(columns, [("id", Some("7".into())), ("name", Some("Ann's x".into())), ("bio", None)]);
        let Row::Change { columns, .. } = parse(
            b"table public.users: UPDATE: old-key: id[integer]:7 new-tuple: id[integer]:8 name[text]:'b'",
        )
        .unwrap() else {
            panic!("not a change")
        };
        assert_eq!(columns, [("id", Some("7".into())), ("id", Some("8".into())), ("name", Some("b".into()))]);
        assert_eq!(
            parse(b"table public.t: TRUNCATE: (no-flags)").unwrap(),
            Row::Change { table: "public.t", operation: "TRUNCATE", columns: vec![] }
        );
    }

    #[test]
    fn damaged_rows_are_errors_not_panics() {
        for row in [
            &b"message: transactional: 1 prefix: shoal, sz: 9 content:abc"[..],
            b"message: transactional: ",
            b"message: transactional: 1 prefix: shoal",
            b"table public.users: UPDATE: id[integer]:'unterminated",
            b"table nothing",
        ] {
            assert!(parse(row).is_err(), "{}", String::from_utf8_lossy(row));
        }
        assert_eq!(parse(b"something new").unwrap(), Row::Other);
    }
}
