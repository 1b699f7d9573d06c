//! The report: tables, the recorded page and its charts.

use std::path::Path;

use super::{runs, MpiReport, Test, CONFIGS, MIGRATION_HEAD};
use crate::plot::{LineChart, Series};
use crate::{md_table, page_head, text_table, Recorded};

fn size_label(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 => format!("{}M", b >> 20),
        b if b >= 1 << 10 => format!("{}K", b >> 10),
        b => b.to_string(),
    }
}

impl MpiReport {
    fn rows(&self, t: &Test) -> Vec<[String; 7]> {
        (0..t.sizes.len())
            .map(|i| {
                let v = |c: usize| format!("{:.2}", t.medians[c][i]);
                [
                    size_label(t.sizes[i]),
                    v(0),
                    v(1),
                    v(2),
                    v(3),
                    v(4),
                    format!("{:.2}x", t.advantage(i)),
                ]
            })
            .collect()
    }

    fn migration_rows(&self) -> Vec<[String; 7]> {
        self.migration
            .iter()
            .map(|m| {
                [
                    m.app.clone(),
                    m.scenario.clone(),
                    format!("{:.3}", m.median),
                    format!("{:.3}", m.wall_median),
                    {
                        let mut cell = format!("{:.1}", m.migrations);
                        if m.failed_moves > 0 {
                            cell += &format!(", {} failed", m.failed_moves);
                        }
                        if m.ended_moves > 0 {
                            cell += &format!(", {} cut short by the end", m.ended_moves);
                        }
                        if m.unmoved_runs > 0 {
                            cell += &format!(", {} runs ended first", m.unmoved_runs);
                        }
                        cell
                    },
                    m.downtime_us.map_or("—".into(), |d| format!("{:.0}", d)),
                    m.slowdown_pct.map_or("—".into(), |p| {
                        let (lo, hi) = m
                            .paired_pct
                            .iter()
                            .fold((f64::MAX, f64::MIN), |(lo, hi), &x| (lo.min(x), hi.max(x)));
                        format!("{p:+.2} % ({lo:+.1} to {hi:+.1})")
                    }),
                ]
            })
            .collect()
    }

    fn app_rows(&self) -> Vec<[String; 7]> {
        self.apps
            .iter()
            .map(|k| {
                let v = |c: usize| format!("{:.3}", k.medians[c]);
                [
                    format!("{} ({} ranks)", k.name, k.ranks),
                    v(0),
                    v(1),
                    v(2),
                    v(3),
                    v(4),
                    format!("{:.2}x", k.medians[1] / k.medians[0]),
                ]
            })
            .collect()
    }

    /// The columns: `first`, each configuration, the ratio.
    fn head(first: &'static str) -> [&'static str; 7] {
        [
            first,
            CONFIGS[0],
            CONFIGS[1],
            CONFIGS[2],
            CONFIGS[3],
            CONFIGS[4],
            "atoll 2 kernels vs Open MPI shm",
        ]
    }
}

impl Recorded for MpiReport {
    fn name(&self) -> &str {
        &self.name
    }

    fn table(&self) -> String {
        let mut s = String::new();
        for t in &self.tests {
            s += &format!("{} ({}; median of {} runs)\n", t.name, t.unit, runs(t));
            s += &text_table(Self::head("size"), &self.rows(t));
        }
        s += "NPB kernels and HPL (seconds, answers checked)\n";
        s += &text_table(Self::head("application"), &self.app_rows());
        if !self.migration.is_empty() {
            s += "seed 002: 4 ranks on 2 kernels or 2 nodes, migrated while they run\n";
            s += &text_table(MIGRATION_HEAD, &self.migration_rows());
        }
        for n in &self.notes {
            s += &format!("  {n}\n");
        }
        s
    }

    fn markdown(&self) -> String {
        let mut s = page_head(&self.name, &self.command, &self.machine);
        for t in &self.tests {
            s += &format!(
                "## {} ({}, median of {} runs)\n\n![{}](mpi-{}.png)\n\n",
                t.name,
                t.unit,
                runs(t),
                t.name,
                t.name
            );
            s += &md_table(Self::head("size"), &self.rows(t));
        }
        s += "## NPB kernels and HPL (seconds of their timed part, every answer checked)\n\n";
        s += &md_table(Self::head("application"), &self.app_rows());
        if !self.migration.is_empty() {
            s += "## Seed 002's experiment: 4 ranks over 2 kernels or 2 nodes, migrated while they run\n\n";
            s += "Seed 002 (Xen, a VM running an MPI rank migrated once): HPL +28 %, NPB SP +10 %.\n\n";
            s += &md_table(MIGRATION_HEAD, &self.migration_rows());
        }
        for n in &self.notes {
            s += &format!("- {n}\n");
        }
        s
    }

    fn write_extra(&self, dir: &Path) -> anyhow::Result<()> {
        for t in &self.tests {
            let categories: Vec<String> = t.sizes.iter().map(|&b| size_label(b)).collect();
            let series: Vec<Series> = self
                .configs
                .iter()
                .zip(&t.medians)
                .map(|(name, values)| Series {
                    name: name.clone(),
                    values: values.clone(),
                })
                .collect();
            let title = format!("MPI {} ({})", t.name, t.unit);
            LineChart {
                title: &title,
                x_label: "message size (bytes)",
                value_label: &t.unit,
                categories: &categories,
                series: &series,
                levels: &[],
                log: true,
            }
            .draw(&dir.join(format!("mpi-{}.png", t.name)))?;
        }
        Ok(())
    }
}
