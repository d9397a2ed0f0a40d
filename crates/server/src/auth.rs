//! Who may connect: the users of `-Y` (ascii tokens) and `-S` (SASL PLAIN), and what a
//! connection has proved.
//!
//! Both files hold `user:password` lines, as memcached reads them: the user ends at the first
//! `:`, the password at the end of the line (a `\r` too); in the SASL file (memcached's
//! `MEMCACHED_SASL_PWDB`) a further `:` ends the password as well. A line without a `:` is an
//! error at start, as in memcached. Unlike memcached's `-Y`, which silently reads only the first
//! eight lines, every line counts. Passwords are compared in constant time.

use std::path::Path;

/// Users and their passwords.
#[derive(Clone, Debug, Default)]
pub struct Users {
    entries: Vec<(Vec<u8>, Vec<u8>)>,
}

impl Users {
    /// Reads a file of `user:password` lines; `colon_ends_password` for the SASL file.
    pub fn load(path: &Path, colon_ends_password: bool) -> Result<Users, String> {
        let text = std::fs::read(path)
            .map_err(|e| format!("Could not open authfile [{}] for reading, error {e}", path.display()))?;
        Users::parse(&text, colon_ends_password).ok_or_else(|| {
            format!("Authfile [{}] has a malformed entry. Should be 'user:password'", path.display())
        })
    }

    /// Parses the lines; `None` if one has no `:`.
    pub fn parse(text: &[u8], colon_ends_password: bool) -> Option<Users> {
        let mut entries = Vec::new();
        let body = text.strip_suffix(b"\n").unwrap_or(text);
        if body.is_empty() {
            return Some(Users { entries });
        }
        for line in body.split(|&b| b == b'\n') {
            let colon = line.iter().position(|&b| b == b':')?;
            let password = &line[colon + 1..];
            let end = password
                .iter()
                .position(|&b| b == b'\r' || (colon_ends_password && b == b':'))
                .unwrap_or(password.len());
            entries.push((line[..colon].to_vec(), password[..end].to_vec()));
        }
        Some(Users { entries })
    }

    /// Whether `user` has `password`.
    pub fn check(&self, user: &[u8], password: &[u8]) -> bool {
        let mut ok = false;
        for (u, p) in &self.entries {
            // Every entry is compared in full, so timing does not tell how much matched.
            ok |= same(u, user) & same(p, password);
        }
        ok
    }
}

/// Constant-time equality for equal lengths.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// What a connection has proved.
#[derive(Clone, Copy, Debug, Default)]
pub struct Session {
    /// It may run commands (always, on a server without authentication).
    pub authenticated: bool,
    /// A SASL exchange was started and waits for a step.
    pub sasl_started: bool,
    /// The tenant its keys are, by its listener or, once it authenticates, its user.
    pub tenant: Option<usize>,
}

impl Session {
    /// The connection proved it is `user`: it may run commands, and, unless its listener
    /// already bound it, its keys are the user's tenant's.
    pub fn sign_in(&mut self, user: &[u8], tenants: &crate::tenants::Tenants) {
        self.authenticated = true;
        self.tenant = self.tenant.or_else(|| tenants.of_user(user));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_as_memcached_reads_them() {
        let users = Users::parse(b"alice:secret\r\nbob:pw:extra\ncarol:\n", false).unwrap();
        assert!(users.check(b"alice", b"secret"));
        assert!(!users.check(b"alice", b"secre"));
        assert!(!users.check(b"alice", b"secret\r"));
        assert!(users.check(b"bob", b"pw:extra"));
        assert!(users.check(b"carol", b""));
        assert!(!users.check(b"dave", b""));
        let sasl = Users::parse(b"bob:pw:extra\n", true).unwrap();
        assert!(sasl.check(b"bob", b"pw"));
        assert!(Users::parse(b"alice:secret\nnocolon\n", false).is_none());
        assert!(Users::parse(b"alice:secret\n\n", false).is_none());
        assert!(!Users::parse(b"", false).unwrap().check(b"", b""));
    }
}
