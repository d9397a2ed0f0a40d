//! Route handles: a route's short form (`"PoolRoute|A"`) or its object (`{"type": …}`), read
//! into a tree of [`Route`]s; the pools they name are `mod.rs`'s.

use super::{error, plural, Builder, ConfigError, Result};
use crate::route::{AllMode, Child, ExptimeAction, FailoverErrors, Op, Route};
use serde_json::{Map, Value};
use shoal_route::{Hashing, Placement, Server};
use std::sync::Arc;

impl Builder {
    pub(super) fn route(&mut self, value: &Value, path: &str) -> Result<Child> {
        match value {
            Value::String(text) => self.short_form(text, path),
            Value::Array(list) => error(
                path,
                format!(
                    "a list of {} where one route is expected (wrap it in a route handle)",
                    plural(list.len(), "route")
                ),
            ),
            Value::Object(fields) => self.object(fields, path),
            _ => error(path, "a route: a string like \"PoolRoute|A\" or an object with \"type\""),
        }
    }

    fn children(&mut self, value: Option<&Value>, path: &str) -> Result<Vec<Child>> {
        match value {
            Some(Value::Array(list)) => {
                let mut routes = Vec::new();
                for (i, v) in list.iter().enumerate() {
                    routes.extend(self.route_or_pool_list(v, &format!("{path}[{i}]"))?);
                }
                if routes.is_empty() {
                    return error(path, "no children");
                }
                Ok(routes)
            }
            Some(v) => self.route_or_pool_list(v, path),
            None => error(path, "missing"),
        }
    }

    /// A route, or `"Pool|A"` which stands for every server of pool A.
    fn route_or_pool_list(&mut self, value: &Value, path: &str) -> Result<Vec<Child>> {
        if let Some(name) = value.as_str().and_then(|t| t.strip_prefix("Pool|")) {
            let pool = self.pool_ref(&Value::String(name.to_string()), path)?;
            return Ok(Self::pool_children(&pool));
        }
        Ok(vec![self.route(value, path)?])
    }

    fn short_form(&mut self, text: &str, path: &str) -> Result<Child> {
        if let Some(route) = self.named.get(text) {
            return Ok(route.clone());
        }
        let (kind, rest) = text.split_once('|').unwrap_or((text, ""));
        let mut object = Map::new();
        object.insert("type".into(), Value::String(kind.to_string()));
        match kind {
            "PoolRoute" | "HashRoute" => {
                object.insert("pool".into(), Value::String(rest.to_string()));
            }
            "ErrorRoute" => {
                object.insert("response".into(), Value::String(rest.to_string()));
            }
            "NullRoute" => {}
            _ if !rest.is_empty() => {
                // "AllSyncRoute|Pool|A": a handle over every server of a pool.
                object.insert("children".into(), Value::String(rest.to_string()));
            }
            _ => {}
        }
        self.object(&object, path)
    }

    fn object(&mut self, fields: &Map<String, Value>, path: &str) -> Result<Child> {
        let Some(kind) = fields.get("type").and_then(Value::as_str) else {
            return error(path, "a route object needs a \"type\"");
        };
        let at = |field: &str| format!("{path}.{field}");
        let route = match kind {
            "PoolRoute" => {
                let pool = self.pool_ref(fields.get("pool").unwrap_or(&Value::Null), &at("pool"))?;
                let hashing = hash_function(fields.get("hash"), &at("hash"))?;
                self.pool_route(&pool, hashing, &at("pool"))?
            }
            "HashRoute" if fields.contains_key("pool") => {
                let pool = self.pool_ref(&fields["pool"], &at("pool"))?;
                let hashing =
                    hash_function(fields.get("hash_func").or(fields.get("hash")), &at("hash_func"))?;
                self.pool_route(&pool, hashing, &at("pool"))?
            }
            "HashRoute" => {
                let children = self.children(fields.get("children"), &at("children"))?;
                let hashing =
                    hash_function(fields.get("hash_func").or(fields.get("hash")), &at("hash_func"))?;
                // Children are placed by their position (names only matter to ketama-style
                // schemes; mcrouter's Ch3 uses the count alone).
                let names = (0..children.len()).map(|i| Server::tcp(&format!("child{i}"), 1)).collect();
                let placement = Placement::new(hashing, names)
                    .map_err(|e| ConfigError { path: at("children"), message: e.to_string() })?;
                Route::Hash { children, placement: placement.into(), provisioned: None, hot: None }
            }
            "FailoverRoute" => Route::Failover {
                children: self.children(fields.get("children"), &at("children"))?,
                errors: failover_errors(fields.get("failover_errors"), &at("failover_errors"))?,
            },
            "FailoverWithExptimeRoute" => {
                let normal = self.route(fields.get("normal").unwrap_or(&Value::Null), &at("normal"))?;
                let failover = self.children(fields.get("failover"), &at("failover"))?;
                let exptime = integer(fields.get("failover_exptime"), &at("failover_exptime"))?.unwrap_or(60);
                // The failover children get the expiry clamped (Gutter: short-lived copies).
                let mut children = vec![normal];
                children.extend(failover.into_iter().map(|target| {
                    Arc::new(Route::ModifyExptime { target, exptime, action: ExptimeAction::Min })
                }));
                Route::Failover {
                    children,
                    errors: failover_errors(fields.get("failover_errors"), &at("failover_errors"))?,
                }
            }
            "MissFailoverRoute" => {
                Route::MissFailover(self.children(fields.get("children"), &at("children"))?)
            }
            "AllSyncRoute" | "AllAsyncRoute" | "AllInitialRoute" | "AllFastestRoute" | "AllMajorityRoute" => {
                let mode = match kind {
                    "AllSyncRoute" => AllMode::Sync,
                    "AllAsyncRoute" => AllMode::Async,
                    "AllInitialRoute" => AllMode::Initial,
                    "AllFastestRoute" => AllMode::Fastest,
                    _ => AllMode::Majority,
                };
                Route::All(mode, self.children(fields.get("children"), &at("children"))?)
            }
            "LatestRoute" => {
                let children = self.children(fields.get("children"), &at("children"))?;
                let count = integer(fields.get("failover_count"), &at("failover_count"))?.unwrap_or(5).max(1)
                    as usize;
                Route::Latest { children, failover_count: count }
            }
            "WarmUpRoute" => Route::WarmUp {
                cold: self.route(fields.get("cold").unwrap_or(&Value::Null), &at("cold"))?,
                warm: self.route(fields.get("warm").unwrap_or(&Value::Null), &at("warm"))?,
                exptime: integer(fields.get("exptime"), &at("exptime"))?.unwrap_or(0),
            },
            "OperationSelectorRoute" => {
                let mut policies = Vec::new();
                if let Some(Value::Object(map)) = fields.get("operation_policies") {
                    for (op, route) in map {
                        let here = format!("{}.{op}", at("operation_policies"));
                        let op = Op::parse(op).ok_or_else(|| ConfigError {
                            path: here.clone(),
                            message: format!("unknown operation {op:?} (get, gets, set, add, replace, append, prepend, cas, delete, incr, decr, touch, lease-get, lease-set, …)"),
                        })?;
                        policies.push((op, self.route(route, &here)?));
                    }
                }
                let default = match fields.get("default_policy") {
                    Some(v) => Some(self.route(v, &at("default_policy"))?),
                    None => None,
                };
                Route::OperationSelector { policies, default }
            }
            "PrefixSelectorRoute" => {
                let mut policies = Vec::new();
                if let Some(Value::Object(map)) = fields.get("policies") {
                    for (prefix, route) in map {
                        policies.push((
                            prefix.as_bytes().to_vec(),
                            self.route(route, &format!("{}.{prefix}", at("policies")))?,
                        ));
                    }
                }
                // Longest prefix first, so the most specific policy wins.
                policies.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
                let wildcard = match fields.get("wildcard") {
                    Some(v) => Some(self.route(v, &at("wildcard"))?),
                    None => None,
                };
                Route::PrefixSelector { policies, wildcard }
            }
            "ModifyExptimeRoute" => {
                let action = match fields.get("action").and_then(Value::as_str).unwrap_or("set") {
                    "set" => ExptimeAction::Set,
                    "min" => ExptimeAction::Min,
                    other => return error(&at("action"), format!("unknown action {other:?} (set or min)")),
                };
                Route::ModifyExptime {
                    target: self.route(fields.get("target").unwrap_or(&Value::Null), &at("target"))?,
                    exptime: integer(fields.get("exptime"), &at("exptime"))?.unwrap_or(0),
                    action,
                }
            }
            "NullRoute" => Route::Null,
            "ErrorRoute" => {
                Route::Error(fields.get("response").and_then(Value::as_str).unwrap_or("").to_string())
            }
            other => {
                return error(&at("type"), format!("unsupported route handle {other:?}"));
            }
        };
        let route = Arc::new(route);
        if let Some(name) = fields.get("name").and_then(Value::as_str) {
            self.named.insert(name.to_string(), route.clone());
        }
        Ok(route)
    }
}

/// A hash function by mcrouter's name (`Ch3`, `WeightedCh3`, in `"hash": "…"` or
/// `"hash": {"hash_func": "…"}`) or the routing core's.
fn hash_function(value: Option<&Value>, path: &str) -> Result<Hashing> {
    let name = match value {
        None => return Ok(Hashing::Ch3),
        Some(Value::String(name)) => name.as_str(),
        Some(Value::Object(o)) => match o.get("hash_func") {
            Some(Value::String(name)) => name.as_str(),
            None => return Ok(Hashing::Ch3),
            _ => return error(path, "hash_func is a name"),
        },
        _ => return error(path, "a hash function's name"),
    };
    Hashing::parse(name).map_err(|e| ConfigError { path: path.to_string(), message: e.to_string() })
}

fn integer(value: Option<&Value>, path: &str) -> Result<Option<i64>> {
    match value {
        None => Ok(None),
        Some(v) => v
            .as_i64()
            .map(Some)
            .ok_or_else(|| ConfigError { path: path.into(), message: "an integer".into() }),
    }
}

/// `failover_errors`: which errors move a request to the next child (default: all).
fn failover_errors(value: Option<&Value>, path: &str) -> Result<FailoverErrors> {
    let Some(value) = value else { return Ok(FailoverErrors::all()) };
    let Value::Array(list) = value else { return error(path, "a list of error kinds") };
    let mut errors = FailoverErrors::none();
    for (i, kind) in list.iter().enumerate() {
        match kind.as_str() {
            Some("connect_error") => errors.connect = true,
            Some("connect_timeout") => errors.connect = true,
            Some("timeout") => errors.timeout = true,
            Some("tko") => errors.tko = true,
            Some("remote_error") => errors.remote = true,
            Some("busy") | Some("try_again") | Some("local_error") => errors.remote = true,
            other => {
                return error(&format!("{path}[{i}]"), format!("unknown error kind {other:?} (connect_error, connect_timeout, timeout, tko, remote_error)"))
            }
        }
    }
    Ok(errors)
}
