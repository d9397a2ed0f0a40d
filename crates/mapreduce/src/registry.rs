//! The apps a program runs: the built-in ones ([`crate::apps::ALL`]) plus any its author
//! registers (`shoal_mapreduce::main(&[&MyApp])`). A job entry names its app; a worker works
//! only on jobs whose app its program registers, since the map and combine are that program's
//! code.

use crate::app::App;
use crate::apps;
use crate::error::MrError;
use crate::layout::APP_NAME_BYTES;
use std::sync::Arc;

/// A program's apps, looked up by name.
#[derive(Clone)]
pub struct Registry {
    apps: Arc<[&'static dyn App]>,
}

impl Registry {
    /// The built-in apps (those of `shoal mr`).
    pub fn builtin() -> Registry {
        Registry { apps: apps::ALL.into() }
    }

    /// The built-in apps and `extra`, after checking that every name fits a job entry and
    /// that no two apps share one.
    pub fn with(extra: &[&'static dyn App]) -> Result<Registry, MrError> {
        let all: Vec<&'static dyn App> = apps::ALL.iter().chain(extra).copied().collect();
        for (i, app) in all.iter().enumerate() {
            check_app_name(app.name())?;
            if all[..i].iter().any(|other| other.name() == app.name()) {
                return Err(MrError::BadInput(format!(
                    "two apps are named {:?}: an app's name must be unique (the built-in ones are {})",
                    app.name(),
                    names(apps::ALL).join(", ")
                )));
            }
        }
        Ok(Registry { apps: all.into() })
    }

    /// The app called `name`, or an error listing the apps there are.
    pub fn find(&self, name: &str) -> Result<&'static dyn App, MrError> {
        self.apps
            .iter()
            .copied()
            .find(|a| a.name() == name)
            .ok_or_else(|| MrError::UnknownApp { name: name.to_string(), known: names(&self.apps) })
    }

    /// Every app, built-in ones first.
    pub fn apps(&self) -> &[&'static dyn App] {
        &self.apps
    }
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.apps.iter().map(|a| a.name())).finish()
    }
}

fn names(apps: &[&'static dyn App]) -> Vec<&'static str> {
    apps.iter().map(|a| a.name()).collect()
}

/// Refuses an app name that does not fit a job entry: 1 to 16 ASCII bytes, no NUL.
pub(crate) fn check_app_name(name: &str) -> Result<(), MrError> {
    if name.is_empty() || name.len() > APP_NAME_BYTES || !name.is_ascii() || name.contains('\0') {
        return Err(MrError::BadInput(format!(
            "app name {name:?} must be 1 to {APP_NAME_BYTES} ASCII bytes (it is stored in the job entry)"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::{Args, Jobs, Rendered};
    use crate::input::Input;
    use crate::records::Emit;

    /// An app that does nothing, under any name.
    struct Named(&'static str);

    impl App for Named {
        fn name(&self) -> &'static str {
            self.0
        }
        fn about(&self) -> &'static str {
            "a test app"
        }
        fn map(&self, _: u32, _: &[u8], _: &[u8], _: &mut Emit) -> Result<(), String> {
            Ok(())
        }
        fn combine(&self, _: u32, _: &mut Vec<u8>, _: &[u8]) {}
        fn drive(&self, _: &Input, _: &Args, _: &mut dyn Jobs) -> Result<Rendered, MrError> {
            Ok(Rendered { text: String::new(), json: serde_json::Value::Null })
        }
    }

    #[test]
    fn registered_apps_follow_the_built_in_ones_and_bad_names_are_refused() {
        let registry = Registry::with(&[&Named("mine")]).unwrap();
        assert_eq!(registry.find("mine").unwrap().name(), "mine");
        assert_eq!(registry.apps().len(), apps::ALL.len() + 1);
        assert!(Registry::builtin().find("mine").is_err());
        let err = Registry::with(&[&Named("wordcount")]).unwrap_err().to_string();
        assert!(err.contains("two apps are named \"wordcount\""), "{err}");
        for bad in [&Named(""), &Named("seventeen-letters"), &Named("café")] {
            let err = Registry::with(&[bad]).unwrap_err().to_string();
            assert!(err.contains("1 to 16 ASCII bytes"), "{}: {err}", bad.0);
        }
        let err = registry.find("nope").err().unwrap().to_string();
        assert!(err.contains("wordcount") && err.contains("mine"), "{err}");
    }
}
