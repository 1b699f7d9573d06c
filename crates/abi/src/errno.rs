//! The one errno enum at the guest ABI.
//!
//! Values are WASI preview1's, so a C guest compares them with wasi-libc's
//! `E*` constants. atoll's own IPC errors (issue of Minix semantics) get values
//! above WASI's range when they are added.

use std::fmt;

macro_rules! errnos {
    ($($name:ident = $value:literal, $msg:literal;)*) => {
        /// A system-call error, numbered as WASI preview1.
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
        #[repr(u16)]
        pub enum Errno {
            $(#[doc = $msg] $name = $value,)*
        }

        impl Errno {
            /// The value the guest sees.
            pub const fn raw(self) -> u16 {
                self as u16
            }

            /// The errno for a raw value, if it is one.
            pub fn from_raw(raw: u16) -> Option<Errno> {
                match raw {
                    $($value => Some(Errno::$name),)*
                    _ => None,
                }
            }

            /// The short description, as `strerror` gives it.
            pub const fn message(self) -> &'static str {
                match self { $(Errno::$name => $msg,)* }
            }
        }
    };
}

errnos! {
    TooBig = 1, "argument list too long";
    Acces = 2, "permission denied";
    AddrInUse = 3, "address in use";
    AddrNotAvail = 4, "address not available";
    AfNoSupport = 5, "address family not supported";
    Again = 6, "resource unavailable, try again";
    Already = 7, "connection already in progress";
    Badf = 8, "bad file descriptor";
    BadMsg = 9, "bad message";
    Busy = 10, "device or resource busy";
    Canceled = 11, "operation canceled";
    Child = 12, "no child processes";
    ConnAborted = 13, "connection aborted";
    ConnRefused = 14, "connection refused";
    ConnReset = 15, "connection reset";
    Deadlk = 16, "resource deadlock would occur";
    DestAddrReq = 17, "destination address required";
    Dom = 18, "mathematics argument out of domain of function";
    Dquot = 19, "disk quota exceeded";
    Exist = 20, "file exists";
    Fault = 21, "bad address";
    Fbig = 22, "file too large";
    HostUnreach = 23, "host is unreachable";
    Idrm = 24, "identifier removed";
    Ilseq = 25, "illegal byte sequence";
    InProgress = 26, "operation in progress";
    Intr = 27, "interrupted function";
    Inval = 28, "invalid argument";
    Io = 29, "I/O error";
    IsConn = 30, "socket is connected";
    IsDir = 31, "is a directory";
    Loop = 32, "too many levels of symbolic links";
    Mfile = 33, "file descriptor value too large";
    Mlink = 34, "too many links";
    MsgSize = 35, "message too large";
    Multihop = 36, "multihop attempted";
    NameTooLong = 37, "filename too long";
    NetDown = 38, "network is down";
    NetReset = 39, "connection aborted by network";
    NetUnreach = 40, "network unreachable";
    Nfile = 41, "too many files open in system";
    NoBufs = 42, "no buffer space available";
    NoDev = 43, "no such device";
    NoEnt = 44, "no such file or directory";
    NoExec = 45, "executable file format error";
    NoLck = 46, "no locks available";
    NoLink = 47, "link has been severed";
    NoMem = 48, "not enough space";
    NoMsg = 49, "no message of the desired type";
    NoProtoOpt = 50, "protocol not available";
    NoSpc = 51, "no space left on device";
    NoSys = 52, "function not supported";
    NotConn = 53, "the socket is not connected";
    NotDir = 54, "not a directory or a symbolic link to a directory";
    NotEmpty = 55, "directory not empty";
    NotRecoverable = 56, "state not recoverable";
    NotSock = 57, "not a socket";
    NotSup = 58, "not supported";
    NotTy = 59, "inappropriate I/O control operation";
    Nxio = 60, "no such device or address";
    Overflow = 61, "value too large to be stored in data type";
    OwnerDead = 62, "previous owner died";
    Perm = 63, "operation not permitted";
    Pipe = 64, "broken pipe";
    Proto = 65, "protocol error";
    ProtoNoSupport = 66, "protocol not supported";
    ProtoType = 67, "protocol wrong type for socket";
    Range = 68, "result too large";
    Rofs = 69, "read-only file system";
    Spipe = 70, "invalid seek";
    Srch = 71, "no such process";
    Stale = 72, "stale file handle";
    TimedOut = 73, "connection timed out";
    TxtBsy = 74, "text file busy";
    Xdev = 75, "cross-device link";
    NotCapable = 76, "capabilities insufficient";
    Locked = 100, "IPC would close a cycle of blocked processes (ELOCKED)";
    DeadSrcDst = 101, "IPC peer ended (EDEADSRCDST)";
    BadSrcDst = 102, "not a valid IPC endpoint (EBADSRCDST)";
    NotReady = 103, "IPC peer is not waiting (ENOTREADY)";
    CallDenied = 104, "IPC peer is in another domain, or the caller is in none (ECALLDENIED)";
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for Errno {}

impl Errno {
    /// Maps a host I/O error to the errno the guest sees.
    pub fn from_io(e: &std::io::Error) -> Errno {
        use std::io::ErrorKind as K;
        match e.kind() {
            K::NotFound => Errno::NoEnt,
            K::PermissionDenied => Errno::Acces,
            K::AlreadyExists => Errno::Exist,
            K::InvalidInput => Errno::Inval,
            K::NotADirectory => Errno::NotDir,
            K::IsADirectory => Errno::IsDir,
            K::DirectoryNotEmpty => Errno::NotEmpty,
            K::ReadOnlyFilesystem => Errno::Rofs,
            K::StorageFull => Errno::NoSpc,
            K::FileTooLarge => Errno::Fbig,
            K::CrossesDevices => Errno::Xdev,
            K::InvalidFilename => Errno::NameTooLong,
            K::Unsupported => Errno::NotSup,
            K::OutOfMemory => Errno::NoMem,
            _ => Errno::Io,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_match_wasi() {
        assert_eq!(Errno::Fault.raw(), 21);
        assert_eq!(Errno::NoSys.raw(), 52);
        assert_eq!(Errno::Srch.raw(), 71);
        assert_eq!(Errno::Child.raw(), 12);
        assert_eq!(Errno::from_raw(76), Some(Errno::NotCapable));
        assert_eq!(Errno::from_raw(0), None);
    }
}
