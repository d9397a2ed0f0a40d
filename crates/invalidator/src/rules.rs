//! Rules that turn row changes into keys, for writers that cannot be changed to emit
//! messages: `--rule 'users=user:{id}'` deletes `user:7` whenever a row of `public.users`
//! with `id` 7 is inserted, updated or deleted (both the old and the new key when an update
//! changes it).

use crate::decoding::clip;

/// One `TABLE=TEMPLATE` rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// `schema.table` (a bare table name means `public.`).
    pub table: String,
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Column(String),
}

impl Rule {
    /// Parses `TABLE=TEMPLATE`, where the template names columns in braces.
    pub fn parse(text: &str) -> Result<Rule, String> {
        let usage = "a rule reads TABLE=TEMPLATE, e.g. users=user:{id}";
        let (table, template) = text.split_once('=').ok_or_else(|| format!("{text:?}: {usage}"))?;
        let table = table.trim();
        if table.is_empty() || template.is_empty() {
            return Err(format!("{text:?}: {usage}"));
        }
        let table = if table.contains('.') { table.to_string() } else { format!("public.{table}") };
        let mut parts = Vec::new();
        let mut rest = template;
        while let Some(open) = rest.find('{') {
            if rest[..open].contains('}') {
                return Err(format!("{text:?}: a `}}` without its `{{`"));
            }
            if open > 0 {
                parts.push(Part::Text(rest[..open].to_string()));
            }
            let close = rest[open..].find('}').ok_or_else(|| format!("{text:?}: a `{{` without its `}}`"))?;
            let column = &rest[open + 1..open + close];
            if column.is_empty() {
                return Err(format!("{text:?}: `{{}}` names no column"));
            }
            parts.push(Part::Column(column.to_string()));
            rest = &rest[open + close + 1..];
        }
        if rest.contains('}') {
            return Err(format!("{text:?}: a `}}` without its `{{`"));
        }
        if !rest.is_empty() {
            parts.push(Part::Text(rest.to_string()));
        }
        if !parts.iter().any(|p| matches!(p, Part::Column(_))) {
            return Err(format!(
                "{text:?}: the template names no column, so every change would delete the same key"
            ));
        }
        Ok(Rule { table, parts })
    }

    /// The keys a change of this rule's table makes stale, one per tuple shown (an update
    /// that changed the key shows the old key's columns and the new tuple); `columns` is in
    /// the order test_decoding prints them.
    pub fn keys(&self, columns: &[(&str, Option<String>)]) -> Result<Vec<String>, String> {
        // A tuple starts again when a column name repeats (old-key columns, then new-tuple).
        let mut tuples: Vec<Vec<&(&str, Option<String>)>> = vec![Vec::new()];
        for column in columns {
            let current = tuples.last_mut().expect("one tuple at least");
            if current.iter().any(|c| c.0 == column.0) {
                tuples.push(vec![column]);
            } else {
                current.push(column);
            }
        }
        let mut keys = Vec::new();
        for tuple in tuples.iter().filter(|t| !t.is_empty()) {
            let mut key = String::new();
            for part in &self.parts {
                match part {
                    Part::Text(text) => key.push_str(text),
                    Part::Column(name) => match tuple.iter().find(|c| c.0 == name) {
                        Some((_, Some(value))) => key.push_str(value),
                        Some((_, None)) => return Err(format!("{}: column {name} is NULL", self.table)),
                        None => {
                            return Err(format!(
                                "{}: column {name} is not in the change (a DELETE shows only the replica identity; \
                                 use columns of the primary key, or ALTER TABLE … REPLICA IDENTITY FULL)",
                                self.table
                            ))
                        }
                    },
                }
            }
            if shoal_route::validate_key(key.as_bytes()).is_err() {
                return Err(format!("{}: the key {:?} is not a valid memcached key", self.table, clip(&key)));
            }
            if !keys.contains(&key) {
                keys.push(key);
            }
        }
        Ok(keys)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn columns(pairs: &[(&'static str, &str)]) -> Vec<(&'static str, Option<String>)> {
        pairs.iter().map(|(n, v)| (*n, Some(v.to_string()))).collect()
    }

    #[test]
    fn a_template_fills_in_columns() {
        let rule = Rule::parse("users=user:{id}:{region}").unwrap();
        assert_eq!(rule.table, "public.users");
        assert_eq!(
            rule.keys(&columns(&[("id", "7"), ("region", "eu"), ("name", "x")])).unwrap(),
            ["user:7:eu"]
        );
        // An update that moved the key: old key, then the new tuple.
        let moved = columns(&[("id", "7"), ("region", "eu"), ("id", "8"), ("region", "eu"), ("name", "x")]);
        assert_eq!(rule.keys(&moved).unwrap(), ["user:7:eu", "user:8:eu"]);
        assert_eq!(Rule::parse("app.t={k}").unwrap().table, "app.t");
    }

    #[test]
    fn bad_rules_and_changes_say_why() {
        for bad in ["users", "=x{id}", "users=", "users=fixed", "users=a{id", "users=a}b{id}", "users={}"] {
            assert!(Rule::parse(bad).is_err(), "{bad}");
        }
        let rule = Rule::parse("users=user:{id}").unwrap();
        assert!(rule.keys(&columns(&[("name", "x")])).unwrap_err().contains("not in the change"));
        assert!(rule.keys(&[("id", None)]).unwrap_err().contains("NULL"));
        assert!(rule.keys(&columns(&[("id", "has space")])).unwrap_err().contains("not a valid"));
    }
}
