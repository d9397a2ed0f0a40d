//! The handoff socket: where clients of other users hand over their hints areas.
//!
//! A server cannot open `/proc/<pid>/fd/<n>` of a client that runs as another user, so such a
//! client passes the memfd itself, with `SCM_RIGHTS`, over a unix socket the server listens on
//! next to its region (`<region path>.hints`, given the region's group, and read-write for
//! whoever may read the region). The client first asks its connection for a one-time token
//! (`shm handoff`, [`crate::hints::Hints::offer`]); on the socket it sends the token and the
//! descriptor in one message, and the area is registered for the connection the token was
//! given to ([`crate::hints::Hints::redeem`]). Exchange: `shoal_proto::handoff`,
//! docs/PROTOCOL.md; what it guards: docs/design/server.md ("Who can read what").
//!
//! One thread serves the socket, one handoff at a time, each bounded by [`HANDOFF_TIME`]: a
//! handoff is a single short message, and the thread never waits longer than that on anyone.

use crate::state::Shared;
use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
use shoal_proto::handoff::{parse_message, Message, MESSAGE_BYTES};
use std::fs::File;
use std::io::{ErrorKind, IoSliceMut, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

/// The longest one client may take to send its message.
pub const HANDOFF_TIME: Duration = Duration::from_secs(1);
/// How often the waiting thread looks whether the server is stopping.
const STOP_CHECK: Duration = Duration::from_millis(100);

/// The listening handoff socket.
pub struct HandoffSocket {
    listener: UnixListener,
    path: PathBuf,
}

/// Where the handoff socket of the region at `region` lives.
pub fn socket_path(region: &Path) -> PathBuf {
    let mut path = region.as_os_str().to_owned();
    path.push(".hints");
    PathBuf::from(path)
}

/// The socket's mode for a region of mode `region_mode`: whoever may read the region may
/// connect (a unix socket needs write permission to connect), nobody else.
pub fn socket_mode(region_mode: u32) -> u32 {
    let readers = region_mode & 0o044;
    0o600 | readers | (readers >> 1)
}

impl HandoffSocket {
    /// Listens next to the region at `region`, with the region's group (`group`) and the mode
    /// its readers need. A socket a killed server left there is replaced.
    pub fn bind(region: &Path, group: Option<u32>, region_mode: u32) -> Result<HandoffSocket, String> {
        use std::os::unix::fs::{FileTypeExt, PermissionsExt};
        let path = socket_path(region);
        if std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_socket()) {
            let _ = std::fs::remove_file(&path);
        }
        let listener = UnixListener::bind(&path)
            .map_err(|e| format!("could not listen on the handoff socket {}: {e}", path.display()))?;
        let socket = HandoffSocket { listener, path };
        // From here on, dropping `socket` removes the file.
        if let Some(gid) = group {
            std::os::unix::fs::chown(&socket.path, None, Some(gid))
                .map_err(|e| format!("could not give {} to group {gid}: {e}", socket.path.display()))?;
        }
        std::fs::set_permissions(&socket.path, std::fs::Permissions::from_mode(socket_mode(region_mode)))
            .map_err(|e| format!("could not set the mode of {}: {e}", socket.path.display()))?;
        // accept() honours the receive timeout: the thread wakes to notice a stop.
        socket2::SockRef::from(&socket.listener)
            .set_read_timeout(Some(STOP_CHECK))
            .map_err(|e| format!("{}: {e}", socket.path.display()))?;
        Ok(socket)
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Serves handoffs on a thread of its own until the server stops; the socket file is
    /// removed when it returns.
    pub fn spawn(self, shared: Arc<Shared>) -> Result<thread::JoinHandle<()>, String> {
        thread::Builder::new()
            .name("handoff".into())
            .spawn(move || {
                while !shared.stopping() {
                    let mut stream = match self.listener.accept() {
                        Ok((stream, _)) => stream,
                        // The receive timeout (time to look whether the server is stopping),
                        // or a signal.
                        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {
                            continue
                        }
                        // Out of descriptors and the like: wait rather than spin.
                        Err(_) => {
                            thread::sleep(STOP_CHECK);
                            continue;
                        }
                    };
                    let answer = match receive(&stream) {
                        Ok((token, area)) => shared.hints.redeem(&token, area),
                        Err(why) => Err(why),
                    };
                    let _ = match answer {
                        Ok(()) => stream.write_all(b"OK\r\n"),
                        Err(why) => stream.write_all(format!("SERVER_ERROR {why}\r\n").as_bytes()),
                    };
                }
            })
            .map_err(|e| format!("could not start the handoff thread: {e}"))
    }
}

impl Drop for HandoffSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Reads one handoff message from `stream`: the token, and the one descriptor that came with
/// it. Anything else — a wrong or overlong message, no descriptor, more than one, a sender
/// slower than [`HANDOFF_TIME`] — is refused with the reason.
pub fn receive(stream: &UnixStream) -> Result<(shoal_proto::handoff::Token, File), String> {
    // The answer too is given up on rather than waited for.
    stream.set_write_timeout(Some(HANDOFF_TIME)).map_err(|e| e.to_string())?;
    let deadline = Instant::now() + HANDOFF_TIME;
    let mut message = [0u8; MESSAGE_BYTES];
    let mut received = 0;
    let mut area: Option<OwnedFd> = None;
    let late = || format!("the message did not arrive within {HANDOFF_TIME:?}");
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(late());
        }
        stream.set_read_timeout(Some(left)).map_err(|e| e.to_string())?;
        let mut space = nix::cmsg_space!(std::os::fd::RawFd);
        // One byte more than a message may hold, so that a longer one is seen to be longer.
        let mut buffer = [0u8; MESSAGE_BYTES + 1];
        let mut iov = [IoSliceMut::new(&mut buffer[..MESSAGE_BYTES + 1 - received])];
        let msg =
            match recvmsg::<()>(stream.as_raw_fd(), &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC) {
                Ok(msg) => msg,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(nix::errno::Errno::EAGAIN) => return Err(late()),
                Err(e) => return Err(format!("could not read the message: {e}")),
            };
        let (bytes, truncated) = (msg.bytes, msg.flags.contains(MsgFlags::MSG_CTRUNC));
        for cmsg in msg.cmsgs().map_err(|e| e.to_string())? {
            if let ControlMessageOwned::ScmRights(fds) = cmsg {
                for fd in fds {
                    // SAFETY: the kernel has just installed `fd` in this process for this
                    // message; nothing else holds it, so it is ours to own (and close).
                    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
                    if area.replace(owned).is_some() {
                        return Err("more than one descriptor came with the message".into());
                    }
                }
            }
        }
        if truncated {
            return Err("more than one descriptor came with the message".into());
        }
        if bytes == 0 {
            return Err("the connection closed before the whole message".into());
        }
        let end = received + bytes;
        if end > MESSAGE_BYTES {
            return Err("the message is longer than a token and \\r\\n".into());
        }
        message[received..end].copy_from_slice(&buffer[..bytes]);
        received = end;
        match parse_message(&message[..received]) {
            Message::Incomplete => {}
            Message::Invalid(why) => return Err(why.into()),
            Message::Done(token) => {
                let area = area.ok_or("no descriptor came with the token (send it with SCM_RIGHTS)")?;
                return Ok((token, File::from(area)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::socket::{sendmsg, ControlMessage};
    use shoal_proto::handoff::{message, Token};
    use std::io::IoSlice;

    fn send(stream: &UnixStream, bytes: &[u8], fds: &[std::os::fd::RawFd]) {
        let cmsgs: Vec<ControlMessage> =
            if fds.is_empty() { Vec::new() } else { vec![ControlMessage::ScmRights(fds)] };
        sendmsg::<()>(stream.as_raw_fd(), &[IoSlice::new(bytes)], &cmsgs, MsgFlags::empty(), None).unwrap();
    }

    #[test]
    fn a_message_brings_its_token_and_descriptor_in_one_piece_or_in_several() {
        let token = Token([7; 16]);
        let whole = message(&token);
        let memfd = File::open("/dev/null").unwrap();
        for cut in [MESSAGE_BYTES, 1, 20] {
            let (client, server) = UnixStream::pair().unwrap();
            send(&client, &whole[..cut], &[memfd.as_raw_fd()]);
            if cut < MESSAGE_BYTES {
                send(&client, &whole[cut..], &[]);
            }
            let (got, _file) = receive(&server).unwrap();
            assert_eq!(got, token, "sent as {cut} bytes and the rest");
        }
    }

    #[test]
    fn wrong_messages_are_refused_with_the_reason() {
        let whole = message(&Token([7; 16]));
        let null = File::open("/dev/null").unwrap();
        let fd = null.as_raw_fd();
        let refused = |bytes: &[u8], fds: &[std::os::fd::RawFd], close: bool| {
            let (client, server) = UnixStream::pair().unwrap();
            send(&client, bytes, fds);
            if close {
                drop(client);
                receive(&server).unwrap_err()
            } else {
                let why = receive(&server).unwrap_err();
                drop(client);
                why
            }
        };
        assert!(refused(&whole, &[], false).contains("no descriptor"));
        assert!(refused(&whole, &[fd, fd], false).contains("more than one descriptor"));
        assert!(refused(b"GET / HTTP/1.0\r\n", &[fd], false).contains("hex digits"));
        let mut longer = whole.to_vec();
        longer.extend_from_slice(b"more");
        assert!(refused(&longer, &[fd], false).contains("longer"));
        assert!(refused(&whole[..10], &[fd], true).contains("closed before"));
        let started = Instant::now();
        assert!(refused(&whole[..10], &[fd], false).contains("did not arrive"));
        assert!(started.elapsed() < HANDOFF_TIME * 10, "a silent sender is given up on, not waited for");
    }

    #[test]
    fn the_socket_opens_to_whoever_may_read_the_region() {
        assert_eq!(socket_mode(0o600), 0o600);
        assert_eq!(socket_mode(0o640), 0o660);
        assert_eq!(socket_mode(0o644), 0o666);
        assert_eq!(socket_mode(0o604), 0o606);
    }
}
