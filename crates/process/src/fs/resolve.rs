//! Resolving a guest path beneath a directory descriptor.
//!
//! Each directory descriptor is a capability for what lies beneath it, and
//! nothing else: as in WASI's path resolution (and wasmtime's cap-std), a
//! path relative to a directory opened inside a preopen may not climb out of
//! that directory, even to a place the preopen would reach.
//!
//! The walk is physical, one component at a time, from the canonical host
//! path of the directory: `..` pops a canonical path (so `link/..` means the
//! parent of the link's target, as in POSIX), and a symbolic link is replaced
//! by the resolution of its text from the link's directory. The current
//! position never leaves the directory: `..` at the top, an absolute path and
//! an absolute link text outside it are `ENOTCAPABLE`. Whatever the result
//! names is then opened with `O_NOFOLLOW`, so only the checked path is used.

use std::ffi::OsStr;
use std::path::{Component, Path, PathBuf};

use atoll_abi::Errno;

use super::host_errno;

/// Symbolic links one resolution follows before `ELOOP` (Linux's limit).
const MAX_SYMLINKS: u32 = 40;

/// Whether a symbolic link in the last component is followed (WASI
/// `lookupflags.symlink_follow`). Links in earlier components always are.
#[derive(Clone, Copy, PartialEq, Eq, Debug, serde::Serialize, serde::Deserialize)]
pub enum Follow {
    Yes,
    No,
}

impl Follow {
    /// From WASI `lookupflags`.
    pub(crate) fn from_lookupflags(flags: u32) -> Follow {
        if flags & 1 != 0 {
            Follow::Yes
        } else {
            Follow::No
        }
    }
}

/// Resolves `path`, relative to the directory `dir`, to a host path beneath
/// `dir`. The result's parent exists and is canonical; the result itself may
/// not exist (a file to create).
///
/// # Errors
/// `ENOTCAPABLE` for an absolute path or one that leaves `dir`, by `..` or
/// by a symbolic link; `ENOENT`/`ENOTDIR` for a missing or non-directory
/// intermediate component; `ELOOP` after too many links; `EILSEQ` for a link
/// whose text is not UTF-8.
pub(crate) fn resolve(dir: &Path, path: &str, follow: Follow) -> Result<PathBuf, Errno> {
    if path.starts_with('/') {
        return Err(Errno::NotCapable);
    }
    let root = canonical(dir)?;
    // A trailing slash names a directory: follow a final link and insist.
    let must_be_dir = path.ends_with('/');
    let follow = if must_be_dir { Follow::Yes } else { follow };
    let mut links = 0;
    let host = walk(&root, root.clone(), path, follow, &mut links)?;
    if must_be_dir {
        if let Ok(m) = std::fs::metadata(&host) {
            if !m.is_dir() {
                return Err(Errno::NotDir);
            }
        }
    }
    Ok(host)
}

/// Resolves a path that names a directory entry to create, remove or rename:
/// its last component must be a name (not `.` or `..`, `EINVAL`), and a
/// final symbolic link is the entry itself, not followed.
///
/// A trailing slash stays on the result, so that the host call that uses it
/// answers as POSIX says (`link(f, "new/")` is `ENOENT`, `rename("dir/",
/// "new/")` works); an existing non-directory before it is `ENOTDIR`.
pub(crate) fn resolve_entry(dir: &Path, path: &str) -> Result<PathBuf, Errno> {
    match Path::new(path).components().next_back() {
        Some(Component::Normal(_)) => {
            let name = path.trim_end_matches('/');
            let host = resolve(dir, name, Follow::No)?;
            if name.len() == path.len() {
                return Ok(host);
            }
            // `name/` names a directory: an existing file there is not one
            // (Linux's `symlink` would say EEXIST; POSIX and wasmtime, ENOTDIR).
            if std::fs::metadata(&host).is_ok_and(|m| !m.is_dir()) {
                return Err(Errno::NotDir);
            }
            let mut with_slash = host.into_os_string();
            with_slash.push("/");
            Ok(with_slash.into())
        }
        Some(Component::RootDir | Component::Prefix(_)) => Err(Errno::NotCapable),
        Some(_) => Err(Errno::Inval),
        None => Err(Errno::NoEnt),
    }
}

fn canonical(p: &Path) -> Result<PathBuf, Errno> {
    std::fs::canonicalize(p).map_err(|e| host_errno(&e))
}

/// Walks `path` from `cur`, a canonical directory beneath `root`. `path` is
/// a guest path (never absolute: checked by the callers) or a link's text.
fn walk(
    root: &Path,
    cur: PathBuf,
    path: &str,
    follow: Follow,
    links: &mut u32,
) -> Result<PathBuf, Errno> {
    if path.is_empty() {
        return Err(Errno::NoEnt);
    }
    // An absolute link text may still name a place inside the root.
    let (mut cur, rel) = match Path::new(path).strip_prefix(root) {
        Ok(rel) => (root.to_path_buf(), rel),
        Err(_) if path.starts_with('/') => return Err(Errno::NotCapable),
        Err(_) => (cur, Path::new(path)),
    };
    let components: Vec<Component<'_>> = rel.components().collect();
    for (i, component) in components.iter().enumerate() {
        let last = i + 1 == components.len();
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                if cur == root {
                    return Err(Errno::NotCapable);
                }
                cur.pop();
            }
            Component::Normal(name) => {
                cur = step(root, cur, name, last && follow == Follow::No, links)?;
                if !last {
                    match std::fs::metadata(&cur) {
                        Ok(m) if m.is_dir() => {}
                        Ok(_) => return Err(Errno::NotDir),
                        Err(e) => return Err(host_errno(&e)),
                    }
                }
            }
            Component::RootDir | Component::Prefix(_) => return Err(Errno::NotCapable),
        }
    }
    // Every step above keeps this; it is checked again because it is the
    // whole point.
    if !cur.starts_with(root) {
        return Err(Errno::NotCapable);
    }
    Ok(cur)
}

/// One `name` down from `cur`, replacing a symbolic link by its resolution
/// unless it is a final component that is not to be followed.
fn step(
    root: &Path,
    cur: PathBuf,
    name: &OsStr,
    final_nofollow: bool,
    links: &mut u32,
) -> Result<PathBuf, Errno> {
    let next = cur.join(name);
    if final_nofollow {
        return Ok(next);
    }
    match std::fs::symlink_metadata(&next) {
        Ok(m) if m.file_type().is_symlink() => {
            *links += 1;
            if *links > MAX_SYMLINKS {
                return Err(Errno::Loop);
            }
            let text = std::fs::read_link(&next).map_err(|e| host_errno(&e))?;
            let text = text.to_str().ok_or(Errno::Ilseq)?;
            // The link's target, with its own last link followed too.
            walk(root, cur, text, Follow::Yes, links)
        }
        // A missing final component is a file to create; the caller decides.
        Ok(_) | Err(_) => Ok(next),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    /// A tree: root/a/b/file, root/top, and a sibling `outside/secret`.
    fn tree() -> (tempfile::TempDir, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::write(root.join("a/b/file"), b"x").unwrap();
        std::fs::write(root.join("top"), b"t").unwrap();
        std::fs::create_dir(tmp.path().join("outside")).unwrap();
        std::fs::write(tmp.path().join("outside/secret"), b"s").unwrap();
        (tmp, root)
    }

    fn canon(p: &Path) -> PathBuf {
        std::fs::canonicalize(p).unwrap()
    }

    #[test]
    fn normal_nested_path() {
        let (_t, root) = tree();
        let r = resolve(&root, "a/b/file", Follow::Yes).unwrap();
        assert_eq!(r, canon(&root.join("a/b/file")));
        let r = resolve(&root, "./a//b/../b/file", Follow::Yes).unwrap();
        assert_eq!(r, canon(&root.join("a/b/file")));
        // Relative to a directory below the root, staying beneath it.
        let r = resolve(&root.join("a"), "b/../b/file", Follow::No).unwrap();
        assert_eq!(r, canon(&root.join("a/b/file")));
        // A file to create: the parent exists, the name does not.
        let r = resolve(&root, "a/new", Follow::Yes).unwrap();
        assert_eq!(r, canon(&root.join("a")).join("new"));
        assert_eq!(resolve(&root, ".", Follow::Yes).unwrap(), canon(&root));
    }

    #[test]
    fn dotdot_escape() {
        let (_t, root) = tree();
        assert_eq!(resolve(&root, "..", Follow::Yes), Err(Errno::NotCapable));
        assert_eq!(
            resolve(&root, "a/../../outside/secret", Follow::Yes),
            Err(Errno::NotCapable)
        );
        // A directory opened beneath the root is a sandbox of its own: it
        // cannot climb out of itself, not even to a place the root reaches.
        assert_eq!(
            resolve(&root.join("a/b"), "../../top", Follow::Yes),
            Err(Errno::NotCapable)
        );
        // Going up and back down is fine as long as it stays inside.
        assert!(resolve(&root, "a/../a/b/file", Follow::Yes).is_ok());
    }

    #[test]
    fn absolute_path() {
        let (tmp, root) = tree();
        assert_eq!(
            resolve(&root, "/etc/passwd", Follow::Yes),
            Err(Errno::NotCapable)
        );
        let inside = canon(&root).join("top");
        assert_eq!(
            resolve(&root, inside.to_str().unwrap(), Follow::Yes),
            Err(Errno::NotCapable)
        );
        let secret = tmp.path().join("outside/secret");
        assert_eq!(
            resolve_entry(&root, secret.to_str().unwrap()),
            Err(Errno::NotCapable)
        );
    }

    #[test]
    fn symlink_escape() {
        let (tmp, root) = tree();
        symlink(tmp.path().join("outside"), root.join("out_abs")).unwrap();
        symlink("../outside/secret", root.join("out_rel")).unwrap();
        symlink("a/b", root.join("in_rel")).unwrap();
        symlink(canon(&root).join("top"), root.join("in_abs")).unwrap();
        symlink("../../outside/new", root.join("a/dangling_out")).unwrap();
        symlink("b/new", root.join("a/dangling_in")).unwrap();
        let no = Err(Errno::NotCapable);
        assert_eq!(resolve(&root, "out_abs/secret", Follow::No), no);
        assert_eq!(resolve(&root, "out_rel", Follow::Yes), no);
        assert_eq!(resolve(&root, "a/dangling_out", Follow::Yes), no);
        // Not following the last link names the link itself, inside the root.
        assert_eq!(
            resolve(&root, "out_rel", Follow::No).unwrap(),
            canon(&root).join("out_rel")
        );
        // Links that stay inside resolve to their targets.
        let file = canon(&root.join("a/b/file"));
        assert_eq!(resolve(&root, "in_rel/file", Follow::No).unwrap(), file);
        assert_eq!(
            resolve(&root, "in_abs", Follow::Yes).unwrap(),
            canon(&root.join("top"))
        );
        assert_eq!(
            resolve(&root, "a/dangling_in", Follow::Yes).unwrap(),
            canon(&root.join("a/b")).join("new")
        );
        // `link/..` is the parent of the target, as in POSIX.
        assert_eq!(
            resolve(&root, "in_rel/..", Follow::Yes).unwrap(),
            canon(&root.join("a"))
        );
    }

    #[test]
    fn loops_and_odd_input() {
        let (_t, root) = tree();
        symlink("loop2", root.join("loop1")).unwrap();
        symlink("loop1", root.join("loop2")).unwrap();
        assert_eq!(resolve(&root, "loop1", Follow::Yes), Err(Errno::Loop));
        assert_eq!(resolve(&root, "", Follow::Yes), Err(Errno::NoEnt));
        assert_eq!(resolve(&root, "missing/x", Follow::Yes), Err(Errno::NoEnt));
        assert_eq!(resolve(&root, "top/x", Follow::Yes), Err(Errno::NotDir));
        assert_eq!(resolve(&root, "top/", Follow::No), Err(Errno::NotDir));
        assert_eq!(resolve_entry(&root, "a/.."), Err(Errno::Inval));
        assert_eq!(resolve_entry(&root, "."), Err(Errno::Inval));
        // The trailing slash is kept for the host call to judge.
        let entry = resolve_entry(&root, "a/b/").unwrap();
        assert_eq!(entry, canon(&root.join("a/b")));
        assert!(entry.to_str().unwrap().ends_with("a/b/"));
        assert_eq!(resolve_entry(&root, "top/"), Err(Errno::NotDir));
    }
}
