//! Where one /mutate request's time goes, without TLS and HTTP: the whole
//! handler and its stages on the 8 KB review of `admission_load`.
//! Run: `cargo bench --bench admission_review`.

use std::hint::black_box;

use axum::body::Bytes;
use criterion::{Criterion, criterion_group, criterion_main};
use gpugate::admission::handler::{mutate_review, respond, validate_review};
use gpugate::admission::review::parse_review;
use gpugate::config::Config;

#[path = "support/pod_review.rs"]
mod pod_review;

fn stages(c: &mut Criterion) {
    let body = Bytes::from(pod_review::review(8_000));
    let config = Config::default();
    c.bench_function("mutate 8 KB: respond (whole handler)", |b| {
        b.iter(|| respond(black_box(&body), |req| mutate_review(req, &config, None)))
    });
    c.bench_function("validate 8 KB: respond (whole handler)", |b| {
        b.iter(|| respond(black_box(&body), |req| validate_review(req, &config, None)))
    });
    c.bench_function("mutate 8 KB: parse_review", |b| {
        b.iter(|| parse_review(black_box(&body)))
    });
    let req = parse_review(&body).expect("a review");
    c.bench_function("mutate 8 KB: mutate_review", |b| {
        b.iter(|| mutate_review(black_box(&req), &config, None))
    });
    let (answer, _) = mutate_review(&req, &config, None);
    c.bench_function("mutate 8 KB: answer to JSON bytes", |b| {
        b.iter(|| serde_json::to_vec(&black_box(&answer).to_json()))
    });
    c.bench_function("serde_json::Value parse of the body (reference)", |b| {
        b.iter(|| serde_json::from_slice::<serde_json::Value>(black_box(&body)))
    });
    c.bench_function("serde IgnoredAny over the body (reference)", |b| {
        b.iter(|| serde_json::from_slice::<serde::de::IgnoredAny>(black_box(&body)))
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30).warm_up_time(std::time::Duration::from_millis(500)).measurement_time(std::time::Duration::from_secs(2));
    targets = stages
}
criterion_main!(benches);
