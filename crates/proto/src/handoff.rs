//! The hints handoff: how a client hands its hints area to a server that cannot open it by
//! path (it runs as another user, so `/proc/<pid>/fd/<n>` of the client is closed to it).
//!
//! ```text
//!  client connection:  shm handoff\r\n          ──►  HANDOFF <token> <socket path>\r\n
//!  handoff socket:     <token>\r\n + SCM_RIGHTS(memfd)  ──►  OK\r\n | SERVER_ERROR <why>\r\n
//! ```
//!
//! The token is 128 random bits, in 32 lowercase hex digits, handed out once to the connection
//! that asked: whoever presents it on the socket registers the area for that connection. The
//! exact exchange, and what each answer means, is in docs/PROTOCOL.md.

use std::fmt;

/// Hex digits in a token.
pub const TOKEN_HEX: usize = 32;
/// The message a client sends on the handoff socket: the token and `\r\n`, nothing else.
pub const MESSAGE_BYTES: usize = TOKEN_HEX + 2;

/// A one-time token naming the connection a handed-over area belongs to.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Token(pub [u8; 16]);

impl Token {
    /// The token in lowercase hex.
    pub fn to_hex(&self) -> [u8; TOKEN_HEX] {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut hex = [0; TOKEN_HEX];
        for (i, byte) in self.0.iter().enumerate() {
            hex[2 * i] = DIGITS[usize::from(byte >> 4)];
            hex[2 * i + 1] = DIGITS[usize::from(byte & 15)];
        }
        hex
    }

    /// A token from exactly [`TOKEN_HEX`] lowercase hex digits; `None` for anything else.
    pub fn from_hex(hex: &[u8]) -> Option<Token> {
        if hex.len() != TOKEN_HEX {
            return None;
        }
        let digit = |c: u8| match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        };
        let mut token = [0; 16];
        for (i, pair) in hex.chunks_exact(2).enumerate() {
            token[i] = (digit(pair[0])? << 4) | digit(pair[1])?;
        }
        Some(Token(token))
    }
}

impl fmt::Debug for Token {
    // A token is a credential while it waits: logs and panics show only that there is one.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(…)")
    }
}

/// Appends the answer to `shm handoff`: `HANDOFF <token> <socket path>\r\n`.
pub fn push_answer(out: &mut Vec<u8>, token: &Token, socket: &[u8]) {
    out.extend_from_slice(b"HANDOFF ");
    out.extend_from_slice(&token.to_hex());
    out.push(b' ');
    out.extend_from_slice(socket);
    out.extend_from_slice(b"\r\n");
}

/// The token and socket path of a `HANDOFF <token> <socket path>` line (without its `\r\n`;
/// the path may hold spaces); `None` for anything else, such as an older server's `ERROR`.
pub fn parse_answer(line: &[u8]) -> Option<(Token, &[u8])> {
    let rest = line.strip_prefix(b"HANDOFF ")?;
    let (hex, path) = (rest.get(..TOKEN_HEX)?, rest.get(TOKEN_HEX..)?.strip_prefix(b" ")?);
    let token = Token::from_hex(hex)?;
    (!path.is_empty() && !path.contains(&0) && !path.contains(&b'\n')).then_some((token, path))
}

/// What a client sends on the handoff socket, alongside its descriptor.
pub fn message(token: &Token) -> [u8; MESSAGE_BYTES] {
    let mut message = [b'\r'; MESSAGE_BYTES];
    message[..TOKEN_HEX].copy_from_slice(&token.to_hex());
    message[TOKEN_HEX + 1] = b'\n';
    message
}

/// How far a handoff message has come.
#[derive(Debug, PartialEq, Eq)]
pub enum Message {
    /// Nothing wrong yet, but not all of it arrived.
    Incomplete,
    /// The whole message.
    Done(Token),
    /// Not a handoff message; the reason, for the `SERVER_ERROR` answer.
    Invalid(&'static str),
}

/// Reads what arrived on the handoff socket so far: exactly [`MESSAGE_BYTES`] bytes, the
/// token and `\r\n`.
pub fn parse_message(bytes: &[u8]) -> Message {
    let expected = message(&Token([0; 16]));
    for (i, &byte) in bytes.iter().enumerate() {
        let fits = match expected.get(i) {
            None => return Message::Invalid("the message is longer than a token and \\r\\n"),
            Some(b'\r' | b'\n') => byte == expected[i],
            Some(_) => byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte),
        };
        if !fits {
            return Message::Invalid("the message is not <32 lowercase hex digits>\\r\\n");
        }
    }
    match bytes.len() {
        MESSAGE_BYTES => {
            Token::from_hex(&bytes[..TOKEN_HEX]).map_or(Message::Invalid("bad token"), Message::Done)
        }
        _ => Message::Incomplete,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: Token =
        Token([0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0, 0xff, 2, 3, 4, 5, 6, 0x7f]);

    #[test]
    fn tokens_round_trip_through_hex_and_nothing_else_is_a_token() {
        assert_eq!(&TOKEN.to_hex(), b"0123456789abcdef00ff02030405067f");
        assert_eq!(Token::from_hex(&TOKEN.to_hex()), Some(TOKEN));
        for bad in
            [&b""[..], b"0123", b"0123456789ABCDEF00ff02030405067f", b"0123456789abcdef00ff02030405067f0"]
        {
            assert_eq!(Token::from_hex(bad), None, "{}", String::from_utf8_lossy(bad));
        }
        assert_eq!(format!("{TOKEN:?}"), "Token(…)");
    }

    #[test]
    fn answers() {
        let mut out = Vec::new();
        push_answer(&mut out, &TOKEN, b"/dev/shm/a b.region.hints");
        let line = out.strip_suffix(b"\r\n").unwrap();
        assert_eq!(parse_answer(line), Some((TOKEN, &b"/dev/shm/a b.region.hints"[..])));
        let hex = String::from_utf8(TOKEN.to_hex().to_vec()).unwrap();
        for other in [
            "ERROR".to_string(),
            "SERVER_ERROR no handoff socket".into(),
            format!("HANDOFF {hex}"),
            format!("HANDOFF {hex} "),
            format!("HANDOFF {hex}/x"),
            format!("HANDOFF {} /x", &hex[1..]),
            format!("HANDOFF {hex} /x\0y"),
        ] {
            assert_eq!(parse_answer(other.as_bytes()), None, "{other}");
        }
    }

    #[test]
    fn messages_arrive_whole_in_pieces_or_are_refused_at_the_first_wrong_byte() {
        let whole = message(&TOKEN);
        assert_eq!(parse_message(&whole), Message::Done(TOKEN));
        for cut in 0..MESSAGE_BYTES {
            assert_eq!(parse_message(&whole[..cut]), Message::Incomplete, "{cut} bytes");
        }
        let mut longer = whole.to_vec();
        longer.push(b'x');
        assert!(matches!(parse_message(&longer), Message::Invalid(_)));
        for (at, byte) in [(0, b'G'), (5, b'A'), (TOKEN_HEX, b'\n'), (TOKEN_HEX + 1, b'x')] {
            let mut wrong = whole;
            wrong[at] = byte;
            assert!(matches!(parse_message(&wrong[..=at]), Message::Invalid(_)), "{at}");
        }
    }
}
