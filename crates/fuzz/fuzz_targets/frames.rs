//! libFuzzer's driver for [`atoll_fuzz::Target::Frames`].
#![no_main]

use atoll_fuzz::{Outcome, Target};
use libfuzzer_sys::Corpus;

libfuzzer_sys::fuzz_target!(init: Target::Frames.plant_seeds(), |data: &[u8]| -> Corpus {
    match Target::Frames.run(data) {
        Outcome::Skipped => Corpus::Reject,
        Outcome::Refused | Outcome::Accepted => Corpus::Keep,
    }
});
