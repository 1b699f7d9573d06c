//! Setting a file's access and modification times (`fd_filestat_set_times`,
//! `path_filestat_set_times`), with `utimensat`/`futimens` so that the
//! times of a symbolic link itself can be set too.

use std::ffi::CString;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use atoll_abi::Errno;

/// WASI `fstflags`.
mod fstflags {
    pub const ATIM: u32 = 1 << 0;
    pub const ATIM_NOW: u32 = 1 << 1;
    pub const MTIM: u32 = 1 << 2;
    pub const MTIM_NOW: u32 = 1 << 3;
    pub const ALL: u32 = ATIM | ATIM_NOW | MTIM | MTIM_NOW;
}

/// Checked times to set: access and modification (nanoseconds), and
/// `fstflags` saying which to set, to a value or to now.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Times {
    atim: u64,
    mtim: u64,
    flags: u32,
}

impl Times {
    /// Decodes `fstflags`: for each time, a value, now, or left alone.
    ///
    /// # Errors
    /// `EINVAL` for an unknown flag, or a time both given and set to now.
    pub(crate) fn decode(atim: u64, mtim: u64, flags: u32) -> Result<Times, Errno> {
        use fstflags::*;
        if flags & !ALL != 0 || flags & (ATIM | ATIM_NOW) == ATIM | ATIM_NOW {
            return Err(Errno::Inval);
        }
        if flags & (MTIM | MTIM_NOW) == MTIM | MTIM_NOW {
            return Err(Errno::Inval);
        }
        Ok(Times { atim, mtim, flags })
    }

    /// As `utimensat` takes them: access, then modification.
    fn timespecs(&self) -> [libc::timespec; 2] {
        use fstflags::*;
        let flags = self.flags;
        let one = |ns: u64, set: u32, now: u32| {
            if flags & set != 0 {
                libc::timespec {
                    tv_sec: (ns / 1_000_000_000) as libc::time_t,
                    tv_nsec: (ns % 1_000_000_000) as libc::c_long,
                }
            } else {
                let nsec = if flags & now != 0 {
                    libc::UTIME_NOW
                } else {
                    libc::UTIME_OMIT
                };
                libc::timespec {
                    tv_sec: 0,
                    tv_nsec: nsec,
                }
            }
        };
        [
            one(self.atim, ATIM, ATIM_NOW),
            one(self.mtim, MTIM, MTIM_NOW),
        ]
    }

    /// Sets the times of an open file or directory.
    pub(crate) fn set_fd(&self, file: &File) -> std::io::Result<()> {
        let times = self.timespecs();
        // SAFETY: the descriptor is open for the borrow of `file`, and
        // `times` is the two timespecs futimens reads.
        os_result(unsafe { libc::futimens(file.as_raw_fd(), times.as_ptr()) })
    }

    /// Sets the times of what `path` names; of a symbolic link itself unless
    /// `follow`.
    pub(crate) fn set_path(&self, path: &Path, follow: bool) -> std::io::Result<()> {
        let c_path = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
        let flags = if follow { 0 } else { libc::AT_SYMLINK_NOFOLLOW };
        let times = self.timespecs();
        // SAFETY: `c_path` is a NUL-terminated string and `times` the two
        // timespecs utimensat reads; both outlive the call.
        os_result(unsafe {
            libc::utimensat(libc::AT_FDCWD, c_path.as_ptr(), times.as_ptr(), flags)
        })
    }
}

/// A libc call's return code as a result: 0 is success, else `errno`.
fn os_result(rc: libc::c_int) -> std::io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;

    #[test]
    fn flags_are_validated() {
        assert!(Times::decode(0, 0, 0).is_ok());
        assert!(Times::decode(0, 0, fstflags::ALL + 1).is_err());
        assert!(Times::decode(0, 0, fstflags::ATIM | fstflags::ATIM_NOW).is_err());
        assert!(Times::decode(0, 0, fstflags::MTIM | fstflags::MTIM_NOW).is_err());
    }

    #[test]
    fn link_times_are_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("file");
        let link = dir.path().join("link");
        std::fs::write(&file, b"x").unwrap();
        std::os::unix::fs::symlink("file", &link).unwrap();
        let before = std::fs::metadata(&file).unwrap().mtime();
        let times = Times::decode(0, 1_000_000_000, fstflags::MTIM).unwrap();
        times.set_path(&link, false).unwrap();
        assert_eq!(std::fs::symlink_metadata(&link).unwrap().mtime(), 1);
        assert_eq!(std::fs::metadata(&file).unwrap().mtime(), before);
        times.set_path(&link, true).unwrap();
        assert_eq!(std::fs::metadata(&file).unwrap().mtime(), 1);
        // The access time was left alone.
        let f = File::open(&file).unwrap();
        Times::decode(7_000_000_000, 0, fstflags::ATIM)
            .unwrap()
            .set_fd(&f)
            .unwrap();
        let m = std::fs::metadata(&file).unwrap();
        assert_eq!((m.atime(), m.mtime()), (7, 1));
    }
}
