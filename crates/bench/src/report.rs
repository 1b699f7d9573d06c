//! What every benchmark prints and records: the simple report and its
//! rows, text and Markdown tables, medians, the machine and the command
//! that produced a result.

use std::path::Path;

use schemars::JsonSchema;
use serde::Serialize;

use crate::progress;

/// Prints a report (as a table, or JSON) and records it into `record`.
pub(crate) fn emit<R: Recorded + Serialize>(
    report: &R,
    json: bool,
    record: Option<&Path>,
) -> anyhow::Result<()> {
    progress::clear();
    let as_json = serde_json::to_string_pretty(report)?;
    if json {
        println!("{as_json}");
    } else {
        print!("{}", report.table());
    }
    if let Some(dir) = record {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join(format!("{}.json", report.name())), as_json)?;
        std::fs::write(dir.join(format!("{}.md", report.name())), report.markdown())?;
        report.write_extra(dir)?;
        progress::note(&format!(
            "atoll: recorded {}/{}.*",
            dir.display(),
            report.name()
        ));
    }
    Ok(())
}

/// A benchmark's result as it is printed and recorded.
pub trait Recorded {
    fn name(&self) -> &str;
    fn table(&self) -> String;
    /// The recorded page, with the command and the machine.
    fn markdown(&self) -> String;
    /// Files recorded beside the JSON and Markdown (plots).
    fn write_extra(&self, _dir: &Path) -> anyhow::Result<()> {
        Ok(())
    }
}

/// One benchmark's result.
#[derive(Serialize, JsonSchema)]
pub struct Report {
    pub name: String,
    pub command: String,
    pub machine: Machine,
    /// What a row measures ("processes/s", "seconds").
    pub unit: String,
    /// Whether larger values are better.
    pub higher_is_better: bool,
    pub rows: Vec<Row>,
    /// Lines of explanation printed under the table.
    pub notes: Vec<String>,
}

#[derive(Serialize, JsonSchema)]
pub struct Row {
    pub name: String,
    pub median: f64,
    pub samples: Vec<f64>,
    /// atoll's advantage over this row (>1 means atoll is better), for rows
    /// that are not atoll's.
    pub atoll_ratio: Option<f64>,
}

impl Recorded for Report {
    fn name(&self) -> &str {
        &self.name
    }

    fn table(&self) -> String {
        let mut s = format!(
            "{} ({}; median of {} runs)\n",
            self.name,
            self.unit,
            self.rows.first().map_or(0, |r| r.samples.len())
        );
        for r in &self.rows {
            let ratio = r
                .atoll_ratio
                .map_or(String::new(), |x| format!("   atoll is {x:.2}x"));
            s += &format!("  {:<34} {:>14.4}{}\n", r.name, r.median, ratio);
        }
        for n in &self.notes {
            s += &format!("  {n}\n");
        }
        s
    }

    fn markdown(&self) -> String {
        let mut s = page_head(&self.name, &self.command, &self.machine);
        s += &format!(
            "| | median ({}) | atoll's advantage |\n|---|---:|---:|\n",
            self.unit
        );
        for r in &self.rows {
            let ratio = r
                .atoll_ratio
                .map_or("—".to_string(), |x| format!("{x:.2}x"));
            s += &format!("| {} | {:.4} | {} |\n", r.name, r.median, ratio);
        }
        s += "\n";
        for n in &self.notes {
            s += &format!("- {n}\n");
        }
        s
    }
}

impl Report {
    /// Fills in atoll's ratio to every other row, from the row named `atoll`.
    pub(crate) fn ratios_against(&mut self, atoll: &str) {
        let Some(a) = self.rows.iter().find(|r| r.name == atoll).map(|r| r.median) else {
            return;
        };
        for r in &mut self.rows {
            if r.name != atoll && r.median > 0.0 && a > 0.0 {
                r.atoll_ratio = Some(if self.higher_is_better {
                    a / r.median
                } else {
                    r.median / a
                });
            }
        }
    }
}

/// The machine a benchmark ran on.
#[derive(Serialize, JsonSchema)]
pub struct Machine {
    pub cpu: String,
    pub cores: usize,
    pub memory_gib: f64,
    pub kernel: String,
}

impl Machine {
    pub fn probe() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find_map(|l| {
                l.strip_prefix("model name")
                    .and_then(|r| r.split(':').nth(1))
            })
            .unwrap_or("unknown")
            .trim()
            .to_owned();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let mem_kib: f64 = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|r| r.split_whitespace().next()?.parse().ok())
            .unwrap_or(0.0);
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
            .to_owned();
        Machine {
            cpu,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory_gib: (mem_kib / 1048576.0 * 10.0).round() / 10.0,
            kernel: format!("Linux {kernel}"),
        }
    }

    fn describe(&self) -> String {
        format!(
            "{}, {} cores, {} GiB, {}",
            self.cpu, self.cores, self.memory_gib, self.kernel
        )
    }
}

/// The head of a recorded page: its title, the command that produced it
/// and the machine it ran on.
pub fn page_head(name: &str, command: &str, machine: &Machine) -> String {
    format!(
        "# {name}\n\nCommand: `{command}`\n\nMachine: {}\n\n",
        machine.describe()
    )
}

pub fn median(samples: &[f64]) -> f64 {
    let mut s = samples.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    match s.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

/// The command line that produced a report.
pub fn command_line() -> String {
    let args: Vec<String> = std::env::args().skip(1).collect();
    format!("atoll {}", args.join(" "))
}

/// A text table: the first two columns left-aligned, the rest right.
pub fn text_table<const N: usize>(head: [&str; N], rows: &[[String; N]]) -> String {
    let widths: Vec<usize> = (0..N)
        .map(|c| {
            rows.iter()
                .map(|r| r[c].len())
                .chain([head[c].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: Vec<&str>| {
        let mut s = String::from(" ");
        for (c, cell) in cells.iter().enumerate() {
            if c < 2 {
                s += &format!(" {cell:<w$}", w = widths[c]);
            } else {
                s += &format!("  {cell:>w$}", w = widths[c]);
            }
        }
        s.trim_end().to_string() + "\n"
    };
    let mut s = line(head.to_vec());
    for r in rows {
        s += &line(r.iter().map(String::as_str).collect());
    }
    s
}

/// The same table in Markdown.
pub fn md_table<const N: usize>(head: [&str; N], rows: &[[String; N]]) -> String {
    let mut s = format!("| {} |\n|", head.join(" | "));
    for c in 0..N {
        s += if c < 2 { "---|" } else { "---:|" };
    }
    s += "\n";
    for r in rows {
        s += &format!("| {} |\n", r.join(" | "));
    }
    s + "\n"
}
