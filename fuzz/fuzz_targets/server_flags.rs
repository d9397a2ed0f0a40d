//! A command line is operator input: parsing `shoal server`'s flags (memcached's, `-o`
//! sub-options, sizes such as `-I 2m`) and turning them into settings must end in settings or
//! a clear error, never a panic.
//!
//! Input: the arguments, separated by NUL bytes.

#![no_main]

use clap::Parser;
use libfuzzer_sys::fuzz_target;
use shoal_server::ServerArgs;

#[derive(Parser)]
struct Command {
    #[command(flatten)]
    server: ServerArgs,
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let argv = std::iter::once("shoal-server").chain(text.split('\0'));
    if let Ok(command) = Command::try_parse_from(argv) {
        if let Err(message) = command.server.settings() {
            assert!(!message.is_empty());
        }
    }
});
