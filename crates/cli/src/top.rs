//! `atoll top`: the DQDT of the running node's cluster, each subtree with
//! its load, as the kernels that host them last summed it.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::time::Duration;

use atoll_kernel::KernelReport;
use atoll_placement::{Load, Shape, Subtree};
use clap::Args;
use schemars::JsonSchema;
use serde::Serialize;

use crate::commands::{reports, Context};

#[derive(Args)]
pub struct TopArgs {
    /// Print once and end (the default when stdout is not a terminal)
    #[arg(long)]
    once: bool,
    /// Seconds between two refreshes
    #[arg(long, default_value_t = 1.0, value_name = "SECONDS")]
    interval: f64,
    /// Print the tree once as JSON: each subtree with its depth and load
    #[arg(long)]
    json: bool,
}

/// One line of the tree (`atoll top --json` prints them in order).
#[derive(Serialize, JsonSchema)]
pub(crate) struct Row {
    subtree: Subtree,
    /// 0 for the root, 1 for its children, ...
    depth: usize,
    load: Load,
}

pub fn top(ctx: &Context, a: TopArgs) -> anyhow::Result<()> {
    let once = a.once || a.json || !std::io::stdout().is_terminal();
    let interval = Duration::try_from_secs_f64(a.interval)
        .map_err(|_| anyhow::anyhow!("--interval {}: not a number of seconds", a.interval))?;
    loop {
        let (reports, _, _) = reports(ctx, "top")?;
        let rows = rows(&reports);
        if a.json {
            println!("{}", serde_json::to_string_pretty(&rows)?);
            return Ok(());
        }
        if !once {
            print!("\x1b[H\x1b[2J"); // home, clear screen
        }
        print!("{}", render(&rows, &reports));
        if once {
            return Ok(());
        }
        std::thread::sleep(interval);
    }
}

/// The tree from the root down, depth first, over the kernels that
/// reported.
fn rows(reports: &[KernelReport]) -> Vec<Row> {
    let loads: BTreeMap<Subtree, Load> = reports
        .iter()
        .flat_map(|r| &r.tree)
        .map(|e| (e.subtree, e.load))
        .collect();
    let mut kernels: BTreeMap<u16, u16> = BTreeMap::new();
    for r in reports {
        let n = kernels.entry(r.kernel.node).or_default();
        *n = (*n).max(r.kernel.index + 1);
    }
    if kernels.is_empty() {
        return Vec::new();
    }
    let shape = Shape::new(kernels);
    let mut rows = Vec::new();
    let mut todo = vec![(shape.root(), 0)];
    while let Some((s, depth)) = todo.pop() {
        rows.push(Row {
            subtree: s,
            depth,
            load: loads.get(&s).copied().unwrap_or_default(),
        });
        todo.extend(shape.children(s).into_iter().rev().map(|c| (c, depth + 1)));
    }
    rows
}

fn render(rows: &[Row], reports: &[KernelReport]) -> String {
    let mut out = format!(
        "{:<28} {:>7} {:>8} {:>9} {:>6} {:>9}\n",
        "SUBTREE", "KERNELS", "RUNNABLE", "PROCESSES", "BUSY", "MEM(MiB)"
    );
    for r in rows {
        let name = format!("{}{}", "  ".repeat(r.depth), r.subtree);
        out += &format!(
            "{name:<28} {:>7} {:>8} {:>9} {:>6.2} {:>9.1}\n",
            r.load.kernels,
            r.load.runnable,
            r.load.processes,
            r.load.busy,
            r.load.memory as f64 / (1 << 20) as f64
        );
    }
    let balanced: u32 = reports
        .iter()
        .flat_map(|r| &r.processes)
        .map(|p| p.balanced)
        .sum();
    out += &format!(
        "BUSY: kernels' time running processes over the last 10 ms (1.00 = one kernel always busy); \
         moves by the balancer of the processes listed: {balanced}\n"
    );
    out
}
