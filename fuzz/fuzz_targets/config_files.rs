//! Files that an operator writes, or another process: `shoal router`'s mcrouter-shaped
//! configuration (JSON with comments), `shoal server --tenants` (TOML or JSON), the
//! provisioner's state file (which clients and routers follow) and its load schedule. Reading
//! one must end in a value or a clear error, never a panic or a hang; an accepted state file
//! reads back the same after it is written.
//!
//! Input: a selector byte (which file), then the file's text.

#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal_client::provisioning::State;
use shoal_curves::Schedule;

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else { return };
    let Ok(text) = std::str::from_utf8(rest) else { return };
    let error = match which % 5 {
        0 => shoal_router::Config::parse(text).err().map(|e| e.to_string()),
        1 => shoal_server::tenants::file::parse(text, false, 64 << 20, 1 << 20).err(),
        2 => shoal_server::tenants::file::parse(text, true, 64 << 20, 1 << 20).err(),
        3 => match serde_json::from_str::<serde_json::Value>(text).map(|value| State::from_json(&value)) {
            Ok(Ok(state)) => {
                let back = State::from_json(&state.to_json()).expect("a state written reads back");
                assert_eq!((&back.servers, back.active), (&state.servers, state.active));
                assert_eq!(back.transition.map(|t| t.from), state.transition.map(|t| t.from));
                None
            }
            Ok(Err(e)) => Some(e),
            Err(_) => None,
        },
        _ => Schedule::parse(text, "schedule").err(),
    };
    if let Some(e) = error {
        assert!(!e.is_empty(), "an error says what is wrong");
    }
});
