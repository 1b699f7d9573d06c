//! WASI's binary records: `filestat`, `fdstat`, `dirent`, and file types.

use std::fs::{FileType, Metadata};
use std::os::unix::fs::{FileTypeExt, MetadataExt};

/// WASI `filetype`.
pub(crate) mod filetype {
    pub const UNKNOWN: u8 = 0;
    pub const BLOCK_DEVICE: u8 = 1;
    pub const CHARACTER_DEVICE: u8 = 2;
    pub const DIRECTORY: u8 = 3;
    pub const REGULAR_FILE: u8 = 4;
    pub const SOCKET_STREAM: u8 = 6;
    pub const SYMBOLIC_LINK: u8 = 7;
}

/// The WASI file type of a host file.
pub(crate) fn filetype_of(t: FileType) -> u8 {
    if t.is_dir() {
        filetype::DIRECTORY
    } else if t.is_file() {
        filetype::REGULAR_FILE
    } else if t.is_symlink() {
        filetype::SYMBOLIC_LINK
    } else if t.is_char_device() {
        filetype::CHARACTER_DEVICE
    } else if t.is_block_device() {
        filetype::BLOCK_DEVICE
    } else if t.is_socket() {
        filetype::SOCKET_STREAM
    } else {
        filetype::UNKNOWN
    }
}

/// Size of a `filestat`.
pub(crate) const FILESTAT_LEN: u32 = 64;

/// A `filestat`: dev, ino, filetype (u8 at 16), nlink, size, atim, mtim,
/// ctim (nanoseconds), all little-endian u64.
pub(crate) fn filestat(m: &Metadata) -> [u8; FILESTAT_LEN as usize] {
    let ns = |secs: i64, nsec: i64| {
        u64::try_from(secs)
            .unwrap_or(0)
            .saturating_mul(1_000_000_000)
            .saturating_add(nsec as u64)
    };
    encode_filestat(
        [m.dev(), m.ino()],
        filetype_of(m.file_type()),
        [
            m.nlink(),
            m.size(),
            ns(m.atime(), m.atime_nsec()),
            ns(m.mtime(), m.mtime_nsec()),
            ns(m.ctime(), m.ctime_nsec()),
        ],
    )
}

/// The `filestat` of stdin, stdout and stderr: a character device, nothing
/// else known.
pub(crate) fn stdio_filestat() -> [u8; FILESTAT_LEN as usize] {
    encode_filestat([0, 0], filetype::CHARACTER_DEVICE, [1, 0, 0, 0, 0])
}

fn encode_filestat(dev_ino: [u64; 2], filetype: u8, rest: [u64; 5]) -> [u8; FILESTAT_LEN as usize] {
    let mut out = [0u8; FILESTAT_LEN as usize];
    out[0..8].copy_from_slice(&dev_ino[0].to_le_bytes());
    out[8..16].copy_from_slice(&dev_ino[1].to_le_bytes());
    out[16] = filetype;
    for (i, v) in rest.iter().enumerate() {
        out[24 + 8 * i..32 + 8 * i].copy_from_slice(&v.to_le_bytes());
    }
    out
}

/// Size of an `fdstat`.
pub(crate) const FDSTAT_LEN: u32 = 24;

/// An `fdstat`: filetype (u8), fs_flags (u16 at 2), rights base (u64 at 8)
/// and inheriting (u64 at 16).
pub(crate) fn fdstat(
    filetype: u8,
    flags: u16,
    base: u64,
    inheriting: u64,
) -> [u8; FDSTAT_LEN as usize] {
    let mut out = [0u8; FDSTAT_LEN as usize];
    out[0] = filetype;
    out[2..4].copy_from_slice(&flags.to_le_bytes());
    out[8..16].copy_from_slice(&base.to_le_bytes());
    out[16..24].copy_from_slice(&inheriting.to_le_bytes());
    out
}

/// One directory entry as `fd_readdir` lists it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DirEntry {
    #[serde(with = "serde_bytes")]
    pub name: Vec<u8>,
    pub ino: u64,
    pub filetype: u8,
}

/// Size of a `dirent` header (d_next, d_ino, d_namlen, d_type, padding).
pub(crate) const DIRENT_LEN: usize = 24;

/// Lays out `entries[cookie..]` as WASI dirents into `buf`, each header
/// followed by its name, and returns the bytes used. The last entry is cut
/// to fill `buf` exactly, which tells the guest there is more (it then calls
/// again with a larger buffer or the last whole entry's cookie).
pub(crate) fn fill_dirents(entries: &[DirEntry], cookie: u64, buf: &mut [u8]) -> usize {
    let mut used = 0;
    let start = usize::try_from(cookie).unwrap_or(usize::MAX);
    for (i, e) in entries.iter().enumerate().skip(start) {
        let mut header = [0u8; DIRENT_LEN];
        header[0..8].copy_from_slice(&(i as u64 + 1).to_le_bytes());
        header[8..16].copy_from_slice(&e.ino.to_le_bytes());
        header[16..20].copy_from_slice(&(e.name.len() as u32).to_le_bytes());
        header[20] = e.filetype;
        for part in [&header[..], &e.name[..]] {
            let n = part.len().min(buf.len() - used);
            buf[used..used + n].copy_from_slice(&part[..n]);
            used += n;
        }
        if used == buf.len() {
            break;
        }
    }
    used
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries() -> Vec<DirEntry> {
        ["." as &str, "..", "alpha", "b"]
            .iter()
            .enumerate()
            .map(|(i, n)| DirEntry {
                name: n.as_bytes().to_vec(),
                ino: 10 + i as u64,
                filetype: 3,
            })
            .collect()
    }

    #[test]
    fn dirents_whole_and_cut() {
        let e = entries();
        let total: usize = e.iter().map(|e| DIRENT_LEN + e.name.len()).sum();
        let mut buf = vec![0xAA; total + 10];
        assert_eq!(fill_dirents(&e, 0, &mut buf), total);
        // Third entry: header at 24+1 + 24+2.
        let at = 2 * DIRENT_LEN + 3;
        assert_eq!(
            u64::from_le_bytes(buf[at..at + 8].try_into().unwrap()),
            3,
            "d_next"
        );
        assert_eq!(
            u64::from_le_bytes(buf[at + 8..at + 16].try_into().unwrap()),
            12,
            "d_ino"
        );
        assert_eq!(
            u32::from_le_bytes(buf[at + 16..at + 20].try_into().unwrap()),
            5,
            "d_namlen"
        );
        assert_eq!(buf[at + 20], 3);
        assert_eq!(&buf[at + 24..at + 29], b"alpha");
        // A short buffer is filled exactly, the last entry cut.
        let mut small = vec![0; 30];
        assert_eq!(fill_dirents(&e, 0, &mut small), 30);
        assert_eq!(&small[24..25], b".");
        // Resuming from a cookie; past the end gives nothing.
        assert_eq!(fill_dirents(&e, 3, &mut buf), DIRENT_LEN + 1);
        assert_eq!(&buf[24..25], b"b");
        assert_eq!(fill_dirents(&e, 4, &mut buf), 0);
        assert_eq!(fill_dirents(&e, u64::MAX, &mut buf), 0);
        assert_eq!(fill_dirents(&e, 0, &mut []), 0);
    }

    #[test]
    fn record_layouts() {
        let s = fdstat(4, 1, rights_all(), 0);
        assert_eq!((s[0], u16::from_le_bytes([s[2], s[3]])), (4, 1));
        assert_eq!(
            u64::from_le_bytes(s[8..16].try_into().unwrap()),
            rights_all()
        );
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("f");
        std::fs::write(&p, b"12345").unwrap();
        let st = filestat(&std::fs::metadata(&p).unwrap());
        assert_eq!(st[16], filetype::REGULAR_FILE);
        assert_eq!(
            u64::from_le_bytes(st[32..40].try_into().unwrap()),
            5,
            "size"
        );
        assert_eq!(
            u64::from_le_bytes(st[24..32].try_into().unwrap()),
            1,
            "nlink"
        );
        assert!(
            u64::from_le_bytes(st[48..56].try_into().unwrap()) > 0,
            "mtim"
        );
        assert_eq!(stdio_filestat()[16], filetype::CHARACTER_DEVICE);
    }

    fn rights_all() -> u64 {
        crate::fs::rights::ALL
    }
}
