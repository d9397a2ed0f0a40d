//! What a server's answer means to a caller when it is not what was asked for (the answers
//! themselves are framed and read by `shoal_proto::answer`).

use crate::error::Error;

/// An error line (`ERROR`, `CLIENT_ERROR …`, `SERVER_ERROR …`) as an [`Error::Server`];
/// anything else as a protocol error naming what was expected.
pub fn unexpected(line: &[u8], expected: &str) -> Error {
    let text = String::from_utf8_lossy(line).into_owned();
    if shoal_proto::answer::is_error_line(line) {
        Error::Server(text)
    } else {
        Error::Protocol(format!("expected {expected}, got {text:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_lines_are_server_errors() {
        assert!(
            matches!(unexpected(b"SERVER_ERROR out of memory", "STORED"), Error::Server(s) if s.contains("memory"))
        );
        assert!(matches!(unexpected(b"ERROR", "STORED"), Error::Server(_)));
        assert!(matches!(unexpected(b"WHAT", "STORED"), Error::Protocol(s) if s.contains("STORED")));
    }
}
