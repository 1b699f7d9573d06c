//! The `--json` outputs, as scripts read them. Each is one Rust type, and
//! its JSON Schema is generated from that type: `atoll schema NAME` prints
//! it, and `docs/json/` holds them all (a test keeps them equal to what the
//! types say, and checks real outputs against them). PIDs, kernels and DQDT
//! subtrees are the strings the commands take and show.
//!
//! [`VERSION`] names the schemas: it changes when an output changes in a
//! way a script could notice (a field renamed, removed or retyped); within
//! a version, fields are only added.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};
use atoll_abi::{KernelId, Pid};
use atoll_ipc::DomainInfo;
use atoll_kernel::{IpcCounters, KernelReport};
use atoll_migration::MigrationReport;
use clap::Args;
use schemars::{JsonSchema, Schema};
use serde::Serialize;

/// The version of every schema, in each one's `$id`.
pub const VERSION: u32 = 1;

/// What `atoll ipc --json` prints for each kernel.
#[derive(Serialize, JsonSchema)]
pub struct KernelIpc {
    pub kernel: KernelId,
    pub ipc: IpcCounters,
}

/// What `atoll checkpoint --json` prints.
#[derive(Serialize, JsonSchema)]
pub struct Checkpointed {
    pub pid: Pid,
    /// The file written, absolute.
    pub file: PathBuf,
    pub bytes: u64,
    /// Whether the process goes on (`--leave-running`); else it ended with
    /// 128 + SIGSTOP.
    pub left_running: bool,
}

/// Every output with a schema, by name: the command's words joined by `-`.
pub fn schemas() -> Vec<(String, Schema)> {
    let mut all = vec![
        schema::<Vec<KernelReport>>("ps"),
        schema::<Vec<crate::top::Row>>("top"),
        schema::<MigrationReport>("migrate"),
        schema::<Checkpointed>("checkpoint"),
        schema::<Vec<DomainInfo>>("domain-list"),
        schema::<Vec<KernelIpc>>("ipc"),
        schema_titled::<atoll_dashboard::Snapshot>(
            "dashboard-snapshot",
            "atoll dashboard: GET /api/snapshot, and each event of GET /api/events",
        ),
    ];
    all.extend(
        atoll_bench::schemas()
            .into_iter()
            .map(|(name, s)| named(name, s, &default_title(name))),
    );
    all
}

/// The schema of `T`, printed by the command `name` names.
fn schema<T: JsonSchema>(name: &str) -> (String, Schema) {
    schema_titled::<T>(name, &default_title(name))
}

/// The schema of `T`, named `name`, for what `title` says prints it.
fn schema_titled<T: JsonSchema>(name: &str, title: &str) -> (String, Schema) {
    named(name, schemars::schema_for!(T), title)
}

/// What prints output `name`: the command its words name, with `--json`.
fn default_title(name: &str) -> String {
    format!("atoll {} --json", name.replace('-', " "))
}

/// `s` with its `$id` (name and version) and `title`.
fn named(name: &str, mut s: Schema, title: &str) -> (String, Schema) {
    s.insert(
        "$id".into(),
        format!("urn:atoll:json:v{VERSION}:{name}").into(),
    );
    s.insert("title".into(), title.into());
    (name.to_string(), s)
}

#[derive(Args)]
pub struct SchemaArgs {
    /// The output: ps, top, migrate, checkpoint, domain-list, ipc,
    /// bench-spawn, ...; none lists them
    name: Option<String>,
    /// Write every schema into this directory, as NAME.schema.json
    #[arg(long, value_name = "DIR", conflicts_with = "name")]
    write: Option<PathBuf>,
}

pub fn schema_command(a: SchemaArgs) -> anyhow::Result<()> {
    let all = schemas();
    if let Some(dir) = &a.write {
        return write_all(&all, dir);
    }
    let Some(name) = a.name else {
        for (name, _) in &all {
            println!("{name}");
        }
        return Ok(());
    };
    let Some((_, s)) = all.iter().find(|(n, _)| *n == name) else {
        bail!("no output named {name}: `atoll schema` lists them");
    };
    println!("{}", serde_json::to_string_pretty(s)?);
    Ok(())
}

fn write_all(all: &[(String, Schema)], dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for (name, s) in all {
        let path = dir.join(format!("{name}.schema.json"));
        let text = serde_json::to_string_pretty(s)? + "\n";
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
