//! Open files with no name, in a checkpoint (CRIU's "ghost files").
//!
//! A process may go on using a file it unlinked (the temporary-file idiom)
//! or one renamed over while it was open. A restore reopens files by their
//! path, which such a file no longer has. So a checkpoint keeps the bytes
//! of every such file the process holds open on its node
//! ([`FileFd::ghost`]), up to [`GHOST_LIMIT`] each, and fails with a clear
//! error beyond it, as CRIU does past its `--ghost-limit`. A restore on a
//! node that owns the file's directory makes the file again beside where
//! it was, unlinks it at once, and gives the descriptor its handle: the
//! process finds the same bytes at the same offset, under no name, as
//! before. Files another node held for the process are reopened by path,
//! as any file of a restored process whose handle is gone.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};

use super::{held, reopen_handle};
use crate::fd::{FileFd, FileId};

/// Bytes of one nameless file a checkpoint keeps at most.
pub const GHOST_LIMIT: u64 = 64 << 20;

/// The bytes of `handle`, the host file of `f`, if it has no name left.
///
/// # Errors
/// A file larger than [`GHOST_LIMIT`], or one that cannot be read.
pub(crate) fn keep(handle: &File, f: &FileFd) -> Result<Option<Vec<u8>>, String> {
    let what = || format!("the unlinked file {}", f.host.display());
    let meta = handle.metadata().map_err(|e| format!("{}: {e}", what()))?;
    if meta.nlink() > 0 {
        return Ok(None);
    }
    if meta.len() > GHOST_LIMIT {
        return Err(format!(
            "{} has {} bytes, more than the {} MiB a checkpoint keeps of a file with no name",
            what(),
            meta.len(),
            GHOST_LIMIT >> 20
        ));
    }
    let mut bytes = vec![0; meta.len() as usize];
    handle
        .read_exact_at(&mut bytes, 0)
        .map_err(|e| format!("{}: {e}", what()))?;
    Ok(Some(bytes))
}

/// Makes `f`'s ghost a file again: new, beside where it was, with its
/// bytes, and unlinked at once. `f` names it from then on (its identity,
/// a new open) and loses its ghost. Returns its handle, opened with `f`'s
/// access mode and flags.
///
/// # Errors
/// What creating, writing or unlinking it met.
pub(crate) fn revive(f: &mut FileFd) -> std::io::Result<File> {
    let bytes = f.ghost.take().unwrap_or_default();
    let dir = f.host.parent().unwrap_or(std::path::Path::new("/"));
    let (mut file, path) = create_beside(dir)?;
    let made = file
        .write_all(&bytes)
        .and_then(|()| std::fs::remove_file(&path));
    if let Err(e) = made {
        let _ = std::fs::remove_file(&path);
        return Err(e);
    }
    f.id = FileId::of(&file.metadata()?);
    f.open = held::next_open();
    f.held = false;
    reopen_handle(&file, f).map_err(|e| std::io::Error::other(e.to_string()))
}

/// A new file of `dir` under a name nobody else has.
fn create_beside(dir: &std::path::Path) -> std::io::Result<(File, std::path::PathBuf)> {
    let mut tries = 0;
    loop {
        let path = dir.join(format!(
            ".atoll-ghost-{}-{}",
            std::process::id(),
            held::next_open()
        ));
        let made = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path);
        match made {
            Ok(file) => return Ok((file, path)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && tries < 8 => tries += 1,
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use atoll_abi::KernelId;

    use super::*;

    fn fd_of(host: std::path::PathBuf, file: &File, write: bool) -> FileFd {
        FileFd {
            host,
            id: FileId::of(&file.metadata().unwrap()),
            owner: KernelId::new(0, 0),
            open: held::next_open(),
            held: false,
            offset: 3,
            read: true,
            write,
            flags: 0,
            ghost: None,
        }
    }

    #[test]
    fn a_file_with_no_name_is_kept_and_made_again_without_one() {
        let dir = tempfile::tempdir().unwrap();
        let host = dir.path().join("tmp");
        std::fs::write(&host, "ghostly").unwrap();
        let handle = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&host)
            .unwrap();
        let mut f = fd_of(host.clone(), &handle, true);
        assert_eq!(keep(&handle, &f), Ok(None), "it still has its name");
        std::fs::remove_file(&host).unwrap();
        f.ghost = keep(&handle, &f).unwrap();
        assert_eq!(f.ghost.as_deref(), Some(&b"ghostly"[..]));
        let before = (f.id, f.open);
        let revived = revive(&mut f).unwrap();
        assert_eq!(f.ghost, None);
        assert_ne!((f.id, f.open), before);
        assert_eq!(f.offset, 3);
        let mut back = [0; 7];
        revived.read_exact_at(&mut back, 0).unwrap();
        assert_eq!(&back, b"ghostly");
        revived.write_all_at(b"G", 0).unwrap();
        assert_eq!(revived.metadata().unwrap().nlink(), 0);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_nameless_file_past_the_limit_fails_the_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let host = dir.path().join("big");
        let handle = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&host)
            .unwrap();
        handle.set_len(GHOST_LIMIT + 1).unwrap();
        let f = fd_of(host.clone(), &handle, false);
        std::fs::remove_file(&host).unwrap();
        let err = keep(&handle, &f).unwrap_err();
        assert!(err.contains("more than the 64 MiB"), "{err}");
    }
}
