//! The report: tables, the recorded page and its charts.

use std::path::Path;

use super::{ClusterReport, FileIo, Measured, MigrationRow};
use crate::plot::{grouped_bars, LineChart, Series};
use crate::{md_table, page_head, text_table, Recorded};

impl ClusterReport {
    fn summary(&self) -> Vec<[String; 4]> {
        let mut rows = self.loopback.rows("");
        if let Some(veth) = &self.veth {
            rows.extend(veth.rows(", veth"));
        }
        rows
    }

    fn file_rows(&self) -> Vec<[String; 4]> {
        let (r, l, n) = (&self.files_remote, &self.files_local, &self.files_native);
        let row = |what: &str, f: fn(&FileIo) -> &Measured| {
            [
                what.to_string(),
                format!("{:.0}", f(r).median),
                format!("{:.0}", f(l).median),
                format!("{:.0}", f(n).median),
            ]
        };
        vec![
            row("write, 1 MiB calls (MB/s)", |f| &f.write_mbps),
            row("read, 1 MiB calls (MB/s)", |f| &f.read_mbps),
            row("pread 4 KiB (ns)", |f| &f.pread_ns),
        ]
    }

    /// Rows of `migrations`, their throughput set against the streams
    /// `tcp` and `tls` measured over the same link.
    fn migration_rows(
        migrations: &[MigrationRow],
        tcp: &Measured,
        tls: &Measured,
    ) -> Vec<[String; 5]> {
        migrations
            .iter()
            .map(|m| {
                [
                    m.label(),
                    format!("{:.0}", m.downtime_us),
                    format!("{:.0}", m.total_us),
                    format!("{:.1}", m.bytes / 1048576.0),
                    format!(
                        "{:.0} ({:.0} % of TCP, {:.0} % of TLS)",
                        m.throughput_mbps,
                        m.throughput_mbps / tcp.median * 100.0,
                        m.throughput_mbps / tls.median * 100.0
                    ),
                ]
            })
            .collect()
    }

    fn loopback_migrations(&self) -> Vec<[String; 5]> {
        let l = &self.loopback;
        Self::migration_rows(&self.migrations, &l.tcp_stream_mbps, &l.tls_stream_mbps)
    }

    /// The shaped link's heading and rows.
    fn shaped_migrations(&self) -> Option<([String; 5], Vec<[String; 5]>)> {
        let s = self.shaped.as_ref()?;
        let mut head = MIGRATION_HEAD.map(String::from);
        head[0] = format!(
            "migration over {} Gbit/s (TCP {:.0} MB/s, TLS {:.0} MB/s)",
            s.rate_mbit / 1000,
            s.tcp_stream_mbps.median,
            s.tls_stream_mbps.median
        );
        let rows = Self::migration_rows(&s.migrations, &s.tcp_stream_mbps, &s.tls_stream_mbps);
        Some((head, rows))
    }
}

const SUMMARY_HEAD: [&str; 4] = ["", "atoll", "Linux, same link", "atoll vs Linux"];
const FILES_HEAD: [&str; 4] = [
    "files (fileio)",
    "atoll, file on the other node",
    "atoll, file on its node",
    "Linux native",
];
const MIGRATION_HEAD: [&str; 5] = [
    "migration 0 -> 1 -> 0, loopback",
    "downtime (us)",
    "total (us)",
    "sent (MiB)",
    "throughput (MB/s)",
];

impl Recorded for ClusterReport {
    fn name(&self) -> &str {
        &self.name
    }

    fn table(&self) -> String {
        let mut s = format!("{} (medians of {} runs)\n", self.name, self.runs);
        s += &text_table(SUMMARY_HEAD, &self.summary());
        s += &text_table(FILES_HEAD, &self.file_rows());
        s += &text_table(MIGRATION_HEAD, &self.loopback_migrations());
        if let Some((head, rows)) = self.shaped_migrations() {
            s += &text_table(head.each_ref().map(String::as_str), &rows);
        }
        for n in &self.notes {
            s += &format!("  {n}\n");
        }
        s
    }

    fn markdown(&self) -> String {
        let mut s = page_head(&self.name, &self.command, &self.machine);
        s += &format!("Medians of {} runs.\n\n", self.runs);
        s += &md_table(SUMMARY_HEAD, &self.summary());
        s += &md_table(FILES_HEAD, &self.file_rows());
        s += &md_table(MIGRATION_HEAD, &self.loopback_migrations());
        if let Some((head, rows)) = self.shaped_migrations() {
            s += &md_table(head.each_ref().map(String::as_str), &rows);
        }
        s += "\n![](cluster-ipc.png)\n\n![](cluster-migration.png)\n\n";
        for n in &self.notes {
            s += &format!("- {n}\n");
        }
        s
    }

    fn write_extra(&self, dir: &Path) -> anyhow::Result<()> {
        let mut ipc = vec![self.loopback.round_trips("loopback")];
        ipc.extend(self.veth.as_ref().map(|v| v.round_trips("veth pair")));
        grouped_bars(
            &dir.join("cluster-ipc.png"),
            "Round trip between two nodes on one machine",
            "microseconds",
            &ipc,
            false,
        )?;
        let categories: Vec<String> = self
            .migrations
            .iter()
            .filter(|m| m.wws_kib == 64 && !m.idle)
            .map(|m| format!("{} MiB", m.memory_mib))
            .collect();
        let series: Vec<Series> = [64, 1024]
            .into_iter()
            .map(|wws| Series {
                name: format!("downtime, WWS {wws} KiB"),
                values: self
                    .migrations
                    .iter()
                    .filter(|m| m.wws_kib == wws && !m.idle)
                    .map(|m| m.downtime_us / 1e3)
                    .collect(),
            })
            .collect();
        LineChart {
            title: "Live migration between two nodes (copy mode)",
            x_label: "memory of the process",
            value_label: "milliseconds",
            categories: &categories,
            series: &series,
            levels: &[crate::plot::Level {
                name: "target 2 ms".into(),
                value: 2.0,
                colour_of: 1,
            }],
            log: false,
        }
        .draw(&dir.join("cluster-migration.png"))
    }
}
