//! CI's brief run of every fuzz target: random bytes, and the target's
//! seeds with bytes changed and cut short, driven by proptest (which
//! shrinks a failure to a short input). The long, coverage-guided runs are
//! libFuzzer's (`scripts/fuzz.sh`, `bench/results/fuzz.md`).
//!
//! `ATOLL_FUZZ_CASES` sets the cases per target. Each run must both refuse
//! something and accept something, so a target that stopped reaching its
//! deeper checks fails here instead of passing idly.

use std::collections::BTreeMap;

use atoll_fuzz::{Outcome, Target};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, TestRng, TestRunner};

fn cases(default: u32) -> u32 {
    std::env::var("ATOLL_FUZZ_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
}

/// Random bytes, or a seed with up to five bytes changed, and cut short
/// half the time.
fn inputs(target: Target) -> BoxedStrategy<Vec<u8>> {
    let random = proptest::collection::vec(any::<u8>(), 0..8192);
    let seeds = target.seeds();
    if seeds.is_empty() {
        return random.boxed();
    }
    let mutated = (
        proptest::sample::select(seeds),
        proptest::collection::vec((any::<Index>(), 1..=255u8), 0..6),
        proptest::option::of(any::<Index>()),
    )
        .prop_map(|(mut seed, flips, cut)| {
            for (at, bits) in flips {
                let i = at.index(seed.len());
                seed[i] ^= bits;
            }
            if let Some(cut) = cut {
                seed.truncate(cut.index(seed.len()));
            }
            seed
        });
    prop_oneof![1 => random, 3 => mutated].boxed()
}

/// Runs `target` on `cases` inputs (the same ones on every run) and
/// returns how they ended.
fn drive(target: Target, cases: u32) -> BTreeMap<&'static str, u32> {
    let config = Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    };
    let rng = TestRng::deterministic_rng(config.rng_algorithm);
    let mut runner = TestRunner::new_with_rng(config, rng);
    let outcomes = std::sync::Mutex::new(BTreeMap::new());
    runner
        .run(&inputs(target), |input| {
            let name = match target.run(&input) {
                Outcome::Refused => "refused",
                Outcome::Accepted => "accepted",
                Outcome::Skipped => "skipped",
            };
            *outcomes.lock().unwrap().entry(name).or_insert(0) += 1;
            Ok(())
        })
        .unwrap();
    let outcomes = outcomes.into_inner().unwrap();
    eprintln!("{}: {outcomes:?}", target.name());
    assert!(
        outcomes.contains_key("accepted") && outcomes.contains_key("refused"),
        "{}: the inputs never reached both ends: {outcomes:?}",
        target.name()
    );
    outcomes
}

#[test]
fn damaged_images_are_refused_or_decode_whole() {
    drive(Target::Image, cases(512));
}

#[test]
fn damaged_frames_are_refused_cleanly() {
    drive(Target::Frames, cases(1024));
}

#[test]
fn damaged_modules_are_refused_or_prepare_into_ones_that_run() {
    drive(Target::Module, cases(128));
}

#[test]
fn generated_commands_prepare_or_fail_cleanly() {
    drive(Target::Generated, cases(96));
}
