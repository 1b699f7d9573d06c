//! Process images: checkpoint files and what a migration carries.

use atoll_abi::{KernelId, Pid};
use atoll_process::{
    ConsoleId, FdTable, GlobalValue, MemoryView, ProcessImage, UArea, BLOCK, PAGE_SIZE,
};

use crate::Outcome;

/// A decoded image is written into at most this many pages of memory: its
/// page count is a claim, and a real destination checks it against its
/// own limit before it allocates.
const PAGES_WRITTEN: usize = 4;

pub fn run(data: &[u8]) -> Outcome {
    // As a whole file: the magic, version, length and checksum checks; and
    // as another kernel's image, which has no checksum.
    let _ = ProcessImage::decode(data);
    let _ = ProcessImage::decode_in_transit(data);
    // As a payload that passed those checks, as an encoder's bug would
    // make: the view (a migration's destination) and the owned image (a
    // restore) decode alike, and the view writes into a memory.
    let bytes = ProcessImage::seal_payload(data);
    match ProcessImage::decode_view(&bytes) {
        Ok(view) => {
            let pages = (view.memory.pages as usize).min(PAGES_WRITTEN);
            let mut memory = vec![0u8; pages * PAGE_SIZE];
            let all = 0..memory.len();
            let _ = view.memory.write_into(&mut memory, &[all]);
            let owned = ProcessImage::decode(&bytes).expect("the view decoded, the image did not");
            assert_eq!(
                owned.memory,
                view.memory.to_image(),
                "the view and the image differ"
            );
            Outcome::Accepted
        }
        Err(_) => {
            assert!(
                ProcessImage::decode(&bytes).is_err(),
                "the image decoded, the view did not"
            );
            Outcome::Refused
        }
    }
}

/// The payloads of two images: one with its whole memory, one with a
/// delta of two blocks (what a pre-copy round sends).
pub fn seeds() -> Vec<Vec<u8>> {
    let complete = sample();
    let mut memory = vec![0u8; 3 * PAGE_SIZE];
    complete
        .memory
        .view()
        .write_into(&mut memory, &[])
        .expect("the sample fits");
    let delta = ProcessImage {
        memory: MemoryView::blocks_of(&memory, [16, 32]).to_image(),
        ..complete.clone()
    };
    [complete, delta]
        .iter()
        .map(|image| postcard::to_stdvec(image).expect("images serialize"))
        .collect()
}

/// A small process: arguments, an environment, a global and three pages
/// with a few bytes set in blocks of two pages.
fn sample() -> ProcessImage {
    let pid = Pid::new(KernelId::new(0, 1), 2, 3);
    let uarea = UArea::new(
        pid,
        None,
        atoll_prepare::content_hash(b"module"),
        vec!["prog".into(), "-n".into(), "8".into()],
        vec!["HOME=/".into()],
        ConsoleId(7),
        FdTable::new(&[], pid.home),
        None,
    );
    let mut memory = vec![0u8; 3 * PAGE_SIZE];
    memory[PAGE_SIZE + 5] = 9;
    memory[PAGE_SIZE + BLOCK + 1] = 8;
    memory[2 * PAGE_SIZE] = 7;
    ProcessImage {
        uarea,
        globals: vec![
            ("atoll_global_0".into(), GlobalValue::I32(-4)),
            ("atoll_global_1".into(), GlobalValue::F64(1.5f64.to_bits())),
        ],
        memory: MemoryView::whole(&memory).to_image(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seeds_are_payloads_of_real_images() {
        let seeds = seeds();
        assert_eq!(
            ProcessImage::seal_payload(&seeds[0]),
            sample().encode(),
            "the image format is postcard behind a header"
        );
        for seed in &seeds {
            assert_eq!(run(seed), Outcome::Accepted);
        }
    }
}
