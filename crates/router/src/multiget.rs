//! A multiget's keys batched by destination, as twemproxy does: the keys a placement-only
//! route (a `PoolRoute` over servers) sends to one server go in one `get k1 k2 …`, and the
//! answer is split in place into each key's `VALUE` block; keys under any other route take it
//! one by one. The client's answer is the hits in the order it asked, then `END`; a key whose
//! server failed is a miss, as in the per-key path.

use crate::dispatch::{routes_for, Dispatch, Routes};
use crate::request::{Op, Reply, Request, Shape};
use crate::route::Direct;
use shoal_proto::answer::blocks_at;
use std::sync::atomic::Ordering;

/// What [`get_many`] keeps of a key that goes along its route on its own, in place of a batch.
const ALONE: usize = usize::MAX;

/// Answers a multiget (`get`/`gets` of several keys) into `out`: hits in the order asked,
/// then `END`.
pub async fn get_many(keys: &[Request], dispatch: &Dispatch<'_>, out: &mut Vec<u8>) {
    let ctx = &dispatch.ctx;
    // The destinations of the batches, and each key's batch (or `ALONE`): two lists however
    // many keys and batches (a list per batch was most of a multiget's allocations).
    let mut batches: Vec<Direct> = Vec::new();
    let mut batch_of: Vec<usize> = Vec::with_capacity(keys.len());
    for key in keys {
        let direct = match routes_for(key, &dispatch.config) {
            Routes::One(Some(route)) => route.direct(key, ctx),
            _ => None,
        };
        batch_of.push(match direct {
            Some(to) => match batches.iter().position(|&b| b == to) {
                Some(n) => n,
                None => {
                    batches.push(to);
                    batches.len() - 1
                }
            },
            None => ALONE,
        });
    }
    // The keys of batch `n` (or `ALONE`), in the order asked.
    let batch_of = &batch_of;
    let in_batch = move |n: usize| (0..keys.len()).filter(move |&i| batch_of[i] == n);
    let word: &[u8] = if keys[0].op == Op::Gets { b"gets" } else { b"get" };
    let sent = futures::future::join_all(batches.iter().enumerate().map(|(n, &to)| {
        let line = move |out: &mut Vec<u8>| {
            out.extend_from_slice(word);
            for i in in_batch(n) {
                out.push(b' ');
                out.extend_from_slice(sent_key(&keys[i], to));
            }
            out.extend_from_slice(b"\r\n");
        };
        ctx.sender.exchange(to.dest, line, Shape::Values, to.fail_open)
    }));
    let alone = futures::future::join_all(in_batch(ALONE).map(|i| dispatch.route_one(&keys[i])));
    let (answers, alone) = futures::future::join(sent, alone).await;
    // Each key's hit: its `VALUE` block in its batch's answer, or its own answer.
    let mut hits: Vec<Option<&[u8]>> = vec![None; keys.len()];
    let mut errors = 0;
    for (n, (&to, answer)) in batches.iter().zip(&answers).enumerate() {
        match answer {
            Reply::Answer(bytes) if !answer.is_error() => split(bytes, to, in_batch(n), keys, &mut hits),
            _ => errors += in_batch(n).count() as u64,
        }
    }
    for (i, reply) in in_batch(ALONE).zip(&alone) {
        match reply {
            Reply::Answer(a) if !reply.is_error() => hits[i] = Some(a),
            _ => errors += 1,
        }
    }
    dispatch.errors.fetch_add(errors, Ordering::Relaxed);
    out.reserve(hits.iter().flatten().map(|hit| hit.len()).sum::<usize>() + b"END\r\n".len());
    for hit in hits.iter().flatten() {
        out.extend_from_slice(hit);
    }
    out.extend_from_slice(b"END\r\n");
    for answer in answers {
        if let Reply::Answer(bytes) = answer {
            ctx.sender.worker.spares.give(bytes);
        }
    }
}

/// The key as the destination sees it.
fn sent_key(request: &Request, to: Direct) -> &[u8] {
    if to.keep_routing_prefix {
        &request.key
    } else {
        request.routed_key()
    }
}

/// Finds each `VALUE` block of a batch's answer (already checked whole by
/// `shoal_proto::frame`) and gives it to the batch's next key `asked` of that name: a server
/// answers hits in the order asked, so a key asked twice gets its two blocks in turn.
fn split<'a>(
    bytes: &'a [u8],
    to: Direct,
    mut asked: impl Iterator<Item = usize>,
    keys: &[Request],
    hits: &mut [Option<&'a [u8]>],
) {
    for (span, block) in blocks_at(bytes) {
        if !block.line.starts_with(b"VALUE ") {
            return; // a get is answered with VALUE blocks only
        }
        // The keys before it that the server skipped were misses.
        if let Some(i) = asked.find(|&i| sent_key(&keys[i], to) == block.key) {
            hits[i] = Some(&bytes[span]);
        }
    }
}
