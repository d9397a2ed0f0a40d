//! A `shoal router` for the tests: a config file in a scratch directory, a free port, killed
//! on drop.

use super::{eventually, free_port, shoal_bin};
use shoal_client::{Client, Options};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

/// A `PoolRoute` over pool `name`, placed by jump hash.
pub fn pool_route(name: &str) -> String {
    format!(r#"{{ "type": "PoolRoute", "pool": "{name}", "hash": "jump" }}"#)
}

/// A router process on a free port, with its config file and spool directory.
pub struct Router {
    pub child: Child,
    pub port: u16,
    pub dir: PathBuf,
}

impl Router {
    /// A router with two worker threads.
    pub fn start(test: &str, config: &str) -> Router {
        Router::start_with_threads(test, config, 2)
    }

    /// A router with `threads` worker threads (one: every client shares its connections).
    pub fn start_with_threads(test: &str, config: &str, threads: usize) -> Router {
        let dir = std::env::temp_dir().join(format!("shoal-router-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("config.json"), config).unwrap();
        Router::start_in_with_threads(dir, free_port(), threads)
    }

    pub fn start_in(dir: PathBuf, port: u16) -> Router {
        Router::start_in_with_threads(dir, port, 2)
    }

    fn start_in_with_threads(dir: PathBuf, port: u16, threads: usize) -> Router {
        Router::start_in_with(dir, port, threads, &[], Stdio::inherit())
    }

    /// A router in `dir` (its config.json, its spool) with `args` as well, its standard error
    /// kept in `<dir>/stderr` (for tests of what it says).
    pub fn start_in_with_args(dir: PathBuf, port: u16, args: &[&str]) -> Router {
        let stderr = std::fs::File::create(dir.join("stderr")).unwrap();
        Router::start_in_with(dir, port, 2, args, stderr.into())
    }

    fn start_in_with(dir: PathBuf, port: u16, threads: usize, args: &[&str], stderr: Stdio) -> Router {
        let child = Command::new(shoal_bin())
            .args([
                "router",
                "-l",
                "127.0.0.1",
                "-t",
                &threads.to_string(),
                "--reload-settle-ms",
                "50",
                "-p",
                &port.to_string(),
            ])
            .arg("-f")
            .arg(dir.join("config.json"))
            .arg("--spool-dir")
            .arg(dir.join("spool"))
            .args(args)
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap();
        let router = Router { child, port, dir };
        assert!(
            eventually(30, || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()),
            "the router listens"
        );
        router
    }

    /// `127.0.0.1:<port>`.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn client(&self) -> Client {
        Client::connect(&format!("127.0.0.1:{}", self.port), Options { local: false, ..Options::default() })
            .unwrap()
    }

    pub fn raw(&self, request: &[u8], until: &[u8]) -> String {
        String::from_utf8_lossy(&super::raw(&format!("127.0.0.1:{}", self.port), request, until)).into_owned()
    }

    pub fn stat(&self, name: &str) -> String {
        let stats = self.raw(b"stats\r\n", b"END\r\n");
        stats
            .lines()
            .find_map(|l| l.strip_prefix(&format!("STAT {name} ")).map(str::to_string))
            .unwrap_or_default()
    }

    pub fn rewrite(&self, config: &str) {
        let temporary = self.dir.join("config.json.new");
        std::fs::write(&temporary, config).unwrap();
        std::fs::rename(temporary, self.dir.join("config.json")).unwrap();
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Router {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
