//! CRIU, the alternative on Linux, when `criu check` passes here.

use std::process::Command;

use super::Criu;

/// Asks `criu check` whether CRIU can checkpoint processes here.
pub(super) fn criu() -> Criu {
    let out = match Command::new("criu").arg("check").output() {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Criu {
                works: false,
                detail: "criu is not installed".into(),
            }
        }
        Err(e) => {
            return Criu {
                works: false,
                detail: format!("cannot run criu: {e}"),
            }
        }
    };
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        return Criu {
            works: true,
            detail: text.trim().to_string(),
        };
    }
    // "Error (criu/vdso.c:381): vdso: ..." -> "vdso: ...", without the
    // generic "exited, status=1" lines.
    let errors: Vec<&str> = text
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let msg = l
                .strip_prefix("Error (")
                .map_or(l, |r| r.split_once("): ").map_or(r, |(_, m)| m));
            (!msg.is_empty() && !msg.starts_with("exited, status=")).then_some(msg)
        })
        .collect();
    Criu {
        works: false,
        detail: format!(
            "`criu check` failed ({}): {}",
            out.status,
            if errors.is_empty() {
                "no message".to_string()
            } else {
                errors.join("; ")
            }
        ),
    }
}
