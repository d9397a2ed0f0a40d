//! A config file is operator input: `shoal server --config FILE` reading any text, lines of
//! flags in the format of Debian's /etc/memcached.conf, must end in a command line or an error
//! naming the line, never a panic; and a file it accepts, parsed with the rest of the flags,
//! must end in settings or a clear error.
//!
//! Input: the file's text.

#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal_server::config_file;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    match config_file::file_arguments("fuzz.conf", text) {
        Ok(argv) => {
            if let Err(message) = config_file::settings_from("fuzz.conf", argv, std::iter::empty()) {
                assert!(!message.is_empty());
            }
        }
        Err(message) => assert!(message.starts_with("fuzz.conf:"), "{message}"),
    }
});
