//! A multiget's keys batched by destination, as twemproxy does: the keys a placement-only
//! route (a `PoolRoute` over servers) sends to one server go in one `get k1 k2 …`, and the
//! answer is split in place into each key's `VALUE` block; keys under any other route take it
//! one by one. The client's answer is the hits in the order it asked, then `END`; a key whose
//! server failed is a miss, as in the per-key path.

use crate::dispatch::{routes_for, Dispatch, Routes};
use crate::request::{Op, Reply, Request, Shape};
use crate::route::Direct;
use shoal_proto::answer::{blocks_at, ValueHeader};
use std::sync::atomic::Ordering;

/// The keys of one multiget that go to one destination together.
struct Batch {
    to: Direct,
    keys: Vec<usize>,
}

/// Answers a multiget (`get`/`gets` of several keys) into `out`: hits in the order asked,
/// then `END`.
pub async fn get_many(keys: &[Request], dispatch: &Dispatch<'_>, out: &mut Vec<u8>) {
    let ctx = &dispatch.ctx;
    let mut batches: Vec<Batch> = Vec::new();
    let mut own = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        let direct = match routes_for(key, &dispatch.config) {
            Routes::One(Some(route)) => route.direct(key, ctx),
            _ => None,
        };
        match direct {
            Some(to) => match batches.iter_mut().find(|b| b.to == to) {
                Some(batch) => batch.keys.push(i),
                None => batches.push(Batch { to, keys: vec![i] }),
            },
            None => own.push(i),
        }
    }
    let word: &[u8] = if keys[0].op == Op::Gets { b"gets" } else { b"get" };
    let sent = futures::future::join_all(batches.iter().map(|batch| {
        let line = |out: &mut Vec<u8>| {
            out.extend_from_slice(word);
            for &i in &batch.keys {
                out.push(b' ');
                out.extend_from_slice(sent_key(&keys[i], batch.to));
            }
            out.extend_from_slice(b"\r\n");
        };
        ctx.sender.exchange(batch.to.dest, line, Shape::Values, batch.to.fail_open)
    }));
    let alone = futures::future::join_all(own.iter().map(|&i| dispatch.route_one(&keys[i])));
    let (answers, alone) = futures::future::join(sent, alone).await;
    // Each key's hit: (the answer it is in, where in it).
    let mut hits: Vec<Option<(usize, usize, usize)>> = vec![None; keys.len()];
    let mut errors = 0;
    for (n, (batch, answer)) in batches.iter().zip(&answers).enumerate() {
        match answer {
            Reply::Answer(bytes) if !answer.is_error() => split(bytes, batch, keys, n, &mut hits),
            _ => errors += batch.keys.len() as u64,
        }
    }
    let mut alone_answers: Vec<Option<&[u8]>> = vec![None; keys.len()];
    for (&i, reply) in own.iter().zip(&alone) {
        match reply {
            Reply::Answer(a) if !reply.is_error() => alone_answers[i] = Some(a),
            _ => errors += 1,
        }
    }
    dispatch.errors.fetch_add(errors, Ordering::Relaxed);
    out.reserve(answers.iter().map(answer_len).sum::<usize>() + 5);
    for i in 0..keys.len() {
        if let Some((n, start, end)) = hits[i] {
            if let Reply::Answer(bytes) = &answers[n] {
                out.extend_from_slice(&bytes[start..end]);
            }
        } else if let Some(a) = alone_answers[i] {
            out.extend_from_slice(a);
        }
    }
    out.extend_from_slice(b"END\r\n");
}

fn answer_len(reply: &Reply) -> usize {
    match reply {
        Reply::Answer(a) => a.len(),
        Reply::Error(..) => 0,
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
/// `shoal_proto::frame`) and gives it to the batch's next key of that name: a server answers
/// hits in the order asked, so a key asked twice gets its two blocks in turn.
fn split(
    bytes: &[u8],
    batch: &Batch,
    keys: &[Request],
    n: usize,
    hits: &mut [Option<(usize, usize, usize)>],
) {
    let mut next = 0;
    for (span, block) in blocks_at(bytes) {
        let Some(header) = ValueHeader::parse(block.line) else { return };
        while next < batch.keys.len() && sent_key(&keys[batch.keys[next]], batch.to) != header.key {
            next += 1;
        }
        if let Some(&i) = batch.keys.get(next) {
            hits[i] = Some((n, span.start, span.end));
            next += 1;
        }
    }
}
