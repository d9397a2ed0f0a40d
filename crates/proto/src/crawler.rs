//! memcached's observability commands: `lru_crawler <subcommand> …` (the key dump
//! `metadump`, and the crawler's controls) and `watch [kinds…]` (log streaming). The
//! arguments are checked as memcached 1.6.18 checks them; the server decides the rest (is the
//! crawler enabled, what is in a class).

use crate::token::Tokens;

/// The slab classes memcached numbers: 1 to 63.
pub const MAX_CLASS: u32 = 63;

/// Which slab classes an `lru_crawler crawl`/`metadump` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Classes {
    /// `all`.
    All,
    /// `hash`: memcached's walk of its hash table, every item once whatever its class (Shoal's
    /// dumps always walk its index, so this dumps what `all` does).
    Hash,
    /// A comma-separated list: bit `n` for class `n` (1 to 63).
    Listed(u64),
    /// Something else: memcached's `BADCLASS invalid class id` (once the crawler is known to
    /// be enabled, which memcached checks first).
    Bad,
}

impl Classes {
    /// Parses `all`, `hash` or `1,2,…` as memcached does: empty pieces are skipped, a piece that is
    /// not a decimal number from 1 to 63 makes the whole list bad.
    pub fn parse(arg: &[u8]) -> Classes {
        match arg {
            b"all" => return Classes::All,
            b"hash" => return Classes::Hash,
            _ => {}
        }
        let mut set = 0u64;
        for piece in arg.split(|&b| b == b',').filter(|p| !p.is_empty()) {
            match parse_unsigned(piece) {
                Some(n) if (1..=u64::from(MAX_CLASS)).contains(&n) => set |= 1 << n,
                _ => return Classes::Bad,
            }
        }
        Classes::Listed(set)
    }

    /// Whether class `n` is named.
    pub fn contains(self, n: u32) -> bool {
        match self {
            Classes::All | Classes::Hash => (1..=MAX_CLASS).contains(&n),
            Classes::Listed(set) => n <= MAX_CLASS && set & (1 << n) != 0,
            Classes::Bad => false,
        }
    }
}

/// `lru_crawler <subcommand> …`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LruCrawler {
    /// `metadump <classes>`: one line per live item of those classes, then `END`.
    Metadump(Classes),
    /// `crawl <classes>`: look for expired items in those classes now.
    Crawl(Classes),
    /// `enable`: start the crawler.
    Enable,
    /// `disable`: stop it.
    Disable,
    /// `tocrawl <n>`: items a crawl looks at per class (0: all).
    Tocrawl(u64),
    /// `sleep <microseconds>`: the crawler's pause between items (at most a second).
    Sleep(u64),
}

/// memcached's answer to a malformed number.
pub const BAD_FORMAT: &str = "CLIENT_ERROR bad command line format";

/// Parses the arguments of `lru_crawler`; an error is memcached's whole answer.
pub fn parse_lru_crawler(mut args: Tokens<'_>) -> Result<LruCrawler, &'static str> {
    let (Some(sub), arg, None) = (args.next(), args.next(), args.next()) else { return Err("ERROR") };
    match (sub, arg) {
        (b"metadump", Some(classes)) => Ok(LruCrawler::Metadump(Classes::parse(classes))),
        (b"crawl", Some(classes)) => Ok(LruCrawler::Crawl(Classes::parse(classes))),
        (b"tocrawl", Some(n)) => parse_unsigned(n).map(LruCrawler::Tocrawl).ok_or(BAD_FORMAT),
        (b"sleep", Some(n)) => match parse_unsigned(n) {
            Some(us) if us > 1_000_000 => Err("CLIENT_ERROR sleep must be one second or less"),
            Some(us) => Ok(LruCrawler::Sleep(us)),
            None => Err(BAD_FORMAT),
        },
        (b"enable", None) => Ok(LruCrawler::Enable),
        (b"disable", None) => Ok(LruCrawler::Disable),
        _ => Err("ERROR"),
    }
}

/// The kinds of log lines a watcher asks for (memcached's `LOG_*` flags).
pub mod watch {
    /// `fetchers`: items read (`type=item_get`).
    pub const FETCHERS: u16 = 1 << 2;
    /// `mutations`: items stored, or refused (`type=item_store`).
    pub const MUTATIONS: u16 = 1 << 3;
    /// `connevents`: connections opened and closed.
    pub const CONNEVENTS: u16 = 1 << 5;
    /// `evictions`: live items dropped to make room (`type=eviction`).
    pub const EVICTIONS: u16 = 1 << 6;
}

/// Parses the arguments of `watch`: the kinds asked for (`fetchers` when none is named), or
/// `None` for an unknown one (memcached's `ERROR`, silenced when the last word is
/// `noreply`); and whether it was.
pub fn parse_watch(args: Tokens<'_>) -> (Option<u16>, bool) {
    let noreply = args.clone().last() == Some(&b"noreply"[..]);
    let mut kinds = 0;
    for arg in args {
        kinds |= match arg {
            b"fetchers" => watch::FETCHERS,
            b"mutations" => watch::MUTATIONS,
            b"evictions" => watch::EVICTIONS,
            b"connevents" => watch::CONNEVENTS,
            b"sysevents" => 1 << 1,
            b"rawcmds" => 1 << 9,
            b"proxyreqs" => 1 << 10,
            b"proxyevents" => 1 << 11,
            b"proxyuser" => 1 << 12,
            _ => return (None, noreply),
        };
    }
    (Some(if kinds == 0 { watch::FETCHERS } else { kinds }), noreply)
}

/// memcached's `safe_strtoul` on a token: decimal digits, optionally after `+`; no sign
/// otherwise, nothing after.
fn parse_unsigned(text: &[u8]) -> Option<u64> {
    let digits = text.strip_prefix(b"+").unwrap_or(text);
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// Appends `bytes` URI-encoded as memcached's `uriencode` does: letters, digits and `-._~`
/// stay, every other byte becomes `%XX` (upper-case hex). Keys in `metadump` and `watch` lines
/// are written this way.
pub fn push_uriencoded(out: &mut Vec<u8>, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in bytes {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b);
        } else {
            out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crawler(line: &[u8]) -> Result<LruCrawler, &'static str> {
        parse_lru_crawler(Tokens::new(line))
    }

    #[test]
    fn lru_crawler_arguments_are_checked_as_memcached_checks_them() {
        assert_eq!(crawler(b"metadump all"), Ok(LruCrawler::Metadump(Classes::All)));
        assert_eq!(crawler(b"metadump hash"), Ok(LruCrawler::Metadump(Classes::Hash)));
        assert_eq!(crawler(b"crawl hash"), Ok(LruCrawler::Crawl(Classes::Hash)));
        assert_eq!(crawler(b"metadump 1,,2"), Ok(LruCrawler::Metadump(Classes::Listed(0b110))));
        for bad in [&b"0"[..], b"64", b"x", b"-1", b"ALL", b"1,x"] {
            assert_eq!(crawler(&[b"metadump ", bad].concat()), Ok(LruCrawler::Metadump(Classes::Bad)));
        }
        assert_eq!(crawler(b"crawl 63"), Ok(LruCrawler::Crawl(Classes::Listed(1 << 63))));
        for error in
            [&b""[..], b"metadump", b"metadump all noreply", b"crawl", b"enable x", b"foo", b"mgdump all"]
        {
            assert_eq!(crawler(error), Err("ERROR"), "{}", String::from_utf8_lossy(error));
        }
        assert_eq!(crawler(b"enable"), Ok(LruCrawler::Enable));
        assert_eq!(crawler(b"disable"), Ok(LruCrawler::Disable));
        assert_eq!(crawler(b"tocrawl 99999999999"), Ok(LruCrawler::Tocrawl(99_999_999_999)));
        assert_eq!(crawler(b"tocrawl -1"), Err(BAD_FORMAT));
        assert_eq!(crawler(b"sleep 1000000"), Ok(LruCrawler::Sleep(1_000_000)));
        assert_eq!(crawler(b"sleep 1000001"), Err("CLIENT_ERROR sleep must be one second or less"));
        assert_eq!(crawler(b"sleep x"), Err(BAD_FORMAT));
    }

    #[test]
    fn classes_name_what_they_list() {
        assert!(Classes::All.contains(1) && Classes::All.contains(63) && !Classes::All.contains(64));
        let listed = Classes::parse(b"2,5");
        assert!(listed.contains(2) && listed.contains(5) && !listed.contains(1));
        assert!(!Classes::Bad.contains(1));
    }

    #[test]
    fn watch_kinds_default_to_fetchers_and_refuse_unknown_ones() {
        assert_eq!(parse_watch(Tokens::new(b"")), (Some(watch::FETCHERS), false));
        assert_eq!(
            parse_watch(Tokens::new(b"mutations evictions")),
            (Some(watch::MUTATIONS | watch::EVICTIONS), false)
        );
        assert_eq!(parse_watch(Tokens::new(b"fetchers bogus")), (None, false));
        assert_eq!(parse_watch(Tokens::new(b"fetchers noreply")), (None, true));
        assert_eq!(parse_watch(Tokens::new(b"proxyuser")), (Some(1 << 12), false));
    }

    #[test]
    fn keys_are_uri_encoded_as_memcached_encodes_them() {
        let mut out = Vec::new();
        push_uriencoded(&mut out, b"a%20b\xff-._~Z9 ,");
        assert_eq!(out, b"a%2520b%FF-._~Z9%20%2C");
    }
}
