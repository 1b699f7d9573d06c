//! The report: tables, the recorded page and its charts.

use std::path::Path;

use atoll_migration::Mode;

use crate::plot::{Level, LineChart, Series};
use crate::{md_table, page_head, text_table, Recorded};

use super::runner::PAUSE_RESOLUTION_US;
use super::{
    Measure, MigrateReport, ParallelMeasure, COPY_TARGET_US, COPY_TARGET_WWS_KIB,
    HANDOVER_TARGET_US, MODES, SMALL_WWS_KIB, WWS_MEMORY_MIB,
};

pub(super) fn human_kib(kib: u64) -> String {
    match kib {
        k if k >= 1 << 10 && k % (1 << 10) == 0 => format!("{} MiB", k >> 10),
        k if k >= 1 << 10 => format!("{:.1} MiB", k as f64 / 1024.0),
        k => format!("{k} KiB"),
    }
}

fn mib(bytes: f64) -> f64 {
    bytes / f64::from(1u32 << 20)
}

fn yes(ok: bool) -> &'static str {
    if ok {
        "yes"
    } else {
        "no"
    }
}

fn mode_label(mode: Mode) -> &'static str {
    match mode {
        Mode::Handover => "hand-over",
        Mode::Copy => "copy",
        Mode::PostCopy => "post-copy",
    }
}

impl MigrateReport {
    /// The worst median downtime of `mode` among `measures`.
    fn worst<'a>(
        measures: impl IntoIterator<Item = &'a Measure>,
        mode: Mode,
    ) -> Option<&'a Measure> {
        measures
            .into_iter()
            .filter(|m| m.mode == mode)
            .max_by(|a, b| a.downtime_us.total_cmp(&b.downtime_us))
    }

    /// The downtime targets against this run: (target, worst
    /// median, met).
    fn targets(&self) -> Vec<(String, String, bool)> {
        let largest = |ms: &[&Measure]| {
            ms.iter()
                .map(|m| m.memory_bytes)
                .max()
                .map_or_else(String::new, |b| human_kib(b >> 10))
        };
        let at = |m: &Measure| {
            format!(
                "{:.0} us ({}, WWS {})",
                m.downtime_us,
                m.memory_label(),
                human_kib(m.wws_kib)
            )
        };
        let mut rows = Vec::new();
        let all: Vec<&Measure> = self.memory.iter().chain(&self.wws).collect();
        if let Some(w) = Self::worst(all.iter().copied(), Mode::Handover) {
            rows.push((
                format!(
                    "hand-over downtime at most {HANDOVER_TARGET_US} us, any memory (up to {}) and WWS",
                    largest(&all)
                ),
                at(w),
                w.downtime_us <= HANDOVER_TARGET_US,
            ));
        }
        let small: Vec<&Measure> = all
            .iter()
            .copied()
            .filter(|m| m.wws_kib <= COPY_TARGET_WWS_KIB)
            .collect();
        if let Some(w) = Self::worst(small.iter().copied(), Mode::Copy) {
            rows.push((
                format!(
                    "copy-mode downtime at most {} ms with a WWS of at most {}, any memory (up to {})",
                    COPY_TARGET_US / 1000.0,
                    human_kib(COPY_TARGET_WWS_KIB),
                    largest(&small)
                ),
                at(w),
                w.downtime_us <= COPY_TARGET_US,
            ));
        }
        rows
    }

    fn for_scale() -> &'static str {
        "For scale (quoted, not measured here): seed 000 (Nanvix) reports 19-113 ms of \
         migration downtime, CRIU is quoted at about 100-280 ms, and QEMU's default downtime \
         target for live migration is 300 ms.\n\n"
    }

    fn criu_line(&self) -> String {
        if self.criu.works {
            format!(
                "CRIU: `criu check` passed on this machine ({}), but this benchmark has no CRIU \
                 baseline yet (CRIU did not work where it was written).\n\n",
                self.criu.detail.lines().next().unwrap_or("")
            )
        } else {
            format!(
                "CRIU: not compared, it does not work here: {}.\n\n",
                self.criu.detail.trim_end_matches('.')
            )
        }
    }

    fn tracking_rows(&self) -> Vec<(String, String)> {
        let t = &self.tracking;
        let copy: Vec<&Measure> = self
            .memory
            .iter()
            .chain(&self.wws)
            .filter(|m| m.mode == Mode::Copy)
            .collect();
        let mut rows = vec![
            (
                "first write to a 4 KiB page, untracked".into(),
                format!("{:.1} ns", t.untracked_ns_per_page),
            ),
            (
                "first write to a 4 KiB page, tracked (a fault)".into(),
                format!(
                    "{:.0} ns (+{:.0} ns)",
                    t.tracked_ns_per_page,
                    t.tracked_ns_per_page - t.untracked_ns_per_page
                ),
            ),
            (
                "`DirtyTracker::start` (write-protect)".into(),
                format!("{:.1} us per MiB", t.start_us_per_mib),
            ),
            (
                "`take`, every page written".into(),
                format!("{:.1} us per MiB", t.take_dirty_us_per_mib),
            ),
            (
                "`take`, nothing written".into(),
                format!("{:.2} us per MiB", t.take_clean_us_per_mib),
            ),
        ];
        for m in copy {
            rows.push((
                format!(
                    "copy mode, {}, WWS {}: pre-copy",
                    m.memory_label(),
                    human_kib(m.wws_kib)
                ),
                format!(
                    "{:.0} us, {} round{}",
                    m.precopy_us,
                    m.precopy_rounds,
                    if m.precopy_rounds == 1.0 { "" } else { "s" }
                ),
            ));
        }
        rows
    }

    fn measure_rows(measures: &[Measure], first: fn(&Measure) -> String) -> Vec<[String; 11]> {
        measures
            .iter()
            .map(|m| {
                let copy = |v: String| {
                    if m.mode == Mode::Copy {
                        v
                    } else {
                        "—".into()
                    }
                };
                [
                    first(m),
                    mode_label(m.mode).into(),
                    format!("{:.0}", m.downtime_us),
                    format!("{:.0}", m.max_downtime_us),
                    pause(m.pause_us, m.output_interval_us),
                    format!("{:.0}", m.total_us),
                    format!("{:.0}", m.call_us),
                    format!("{:.2}", mib(m.bytes)),
                    copy(format!("{}", m.precopy_rounds)),
                    copy(format!("{:.0}", m.precopy_us)),
                    copy(format!("{:.0}", m.stop_copy_us)),
                ]
            })
            .collect()
    }

    fn parallel_rows(&self) -> Vec<[String; 6]> {
        self.parallel
            .iter()
            .map(|p| {
                [
                    p.processes.to_string(),
                    mode_label(p.mode).into(),
                    format!("{:.0}", p.downtime_us),
                    format!("{:.0}", p.worst_downtime_us),
                    format!("{:.0}", p.total_us),
                    format!("{:.0}", p.batch_us),
                ]
            })
            .collect()
    }

    fn mib_each(&self) -> String {
        self.parallel
            .first()
            .map_or(String::new(), |p| format!("{} MiB", p.memory_mib))
    }
}

const MEASURE_HEAD: [&str; 11] = [
    "",
    "mode",
    "downtime (us)",
    "worst downtime (us)",
    "guest pause (us)",
    "total (us)",
    "caller (us)",
    "sent (MiB)",
    "pre-copy rounds",
    "pre-copy (us)",
    "stop-and-copy (us)",
];
const PARALLEL_HEAD: [&str; 6] = [
    "processes",
    "mode",
    "downtime (us)",
    "worst in batch (us)",
    "total (us)",
    "batch (us)",
];

/// A guest pause, or "—" where the guest prints too rarely to time it.
fn pause(pause_us: f64, interval_us: f64) -> String {
    if pause_us.is_finite() && interval_us <= PAUSE_RESOLUTION_US {
        format!("{pause_us:.0}")
    } else {
        "—".into()
    }
}

impl Recorded for MigrateReport {
    fn name(&self) -> &str {
        &self.name
    }

    fn table(&self) -> String {
        let mut s = format!(
            "migrate (medians of {} migrations after a warm-up, fewer from 128 MiB; kernel 0 <-> 1)\n",
            self.runs
        );
        s += &format!("memory, WWS {}\n", human_kib(SMALL_WWS_KIB));
        s += &text_table(
            MEASURE_HEAD,
            &Self::measure_rows(&self.memory, Measure::memory_label),
        );
        s += &format!("WWS, {WWS_MEMORY_MIB} MiB\n");
        s += &text_table(
            MEASURE_HEAD,
            &Self::measure_rows(&self.wws, |m| human_kib(m.wws_kib)),
        );
        s += &format!(
            "parallel, {} each, WWS {}\n",
            self.mib_each(),
            human_kib(SMALL_WWS_KIB)
        );
        s += &text_table(PARALLEL_HEAD, &self.parallel_rows());
        s += &format!("dirty tracking ({} MiB region)\n", self.tracking.region_mib);
        for (what, value) in self.tracking_rows() {
            s += &format!("  {what:<48} {value}\n");
        }
        for (target, worst, met) in self.targets() {
            s += &format!(
                "  target: {target}: {worst}, {}\n",
                if met { "met" } else { "NOT met" }
            );
        }
        s += &format!("  {}", Self::for_scale().trim_end());
        s += &format!("\n  {}\n", self.criu_line().trim_end());
        s
    }

    fn markdown(&self) -> String {
        let mut s = page_head("migrate", &self.command, &self.machine);
        s += &format!(
            "Medians of {} migrations per configuration after one warm-up (half as many, at \
             least 3, from 128 MiB on), on a node of {} kernels (the machine has {} cores).\n\n",
            self.runs, self.kernels, self.machine.cores
        );
        s += "![Downtime vs memory](migrate.png)\n\n![Total time vs memory](migrate-total.png)\n\n\
              ![Downtime vs WWS](migrate-wws.png)\n\n![Parallel migrations](migrate-parallel.png)\n\n";
        s += "## Targets\n\n| target | worst median | met |\n|---|---:|---|\n";
        for (target, worst, met) in self.targets() {
            s += &format!("| {target} | {worst} | {} |\n", yes(met));
        }
        s += "\n";
        s += Self::for_scale();
        s += &self.criu_line();
        s += &format!(
            "## Downtime and total time vs memory (WWS {})\n\n",
            human_kib(SMALL_WWS_KIB)
        );
        let mut head = MEASURE_HEAD;
        head[0] = "memory";
        s += &md_table(
            head,
            &Self::measure_rows(&self.memory, Measure::memory_label),
        );
        s += &format!("## vs writable working set ({WWS_MEMORY_MIB} MiB)\n\n");
        head[0] = "WWS";
        s += &md_table(
            head,
            &Self::measure_rows(&self.wws, |m| human_kib(m.wws_kib)),
        );
        s += &format!(
            "## Parallel migrations ({} each, WWS {})\n\n",
            self.mib_each(),
            human_kib(SMALL_WWS_KIB)
        );
        s += &md_table(PARALLEL_HEAD, &self.parallel_rows());
        s += &format!(
            "## Dirty tracking\n\n`DirtyTracker` on a {} MiB anonymous mapping of 4 KiB pages \
             (median of {} runs), and the pre-copy of the copy-mode migrations above (median \
             per migration).\n\n| | |\n|---|---:|\n",
            self.tracking.region_mib, self.tracking.runs
        );
        for (what, value) in self.tracking_rows() {
            s += &format!("| {what} | {value} |\n");
        }
        s += "\n## Notes\n\n";
        for n in &self.notes {
            s += &format!("- {n}\n");
        }
        s
    }

    fn write_extra(&self, dir: &Path) -> anyhow::Result<()> {
        let by_mode = |ms: &[Measure], value: fn(&Measure) -> f64| -> Vec<Series> {
            MODES
                .iter()
                .map(|&mode| Series {
                    name: mode_label(mode).into(),
                    values: ms.iter().filter(|m| m.mode == mode).map(value).collect(),
                })
                .collect()
        };
        let categories = |ms: &[Measure], name: fn(&Measure) -> String| -> Vec<String> {
            ms.iter().filter(|m| m.mode == MODES[0]).map(name).collect()
        };
        let targets = [
            Level {
                name: format!("hand-over target {HANDOVER_TARGET_US} us"),
                value: HANDOVER_TARGET_US,
                colour_of: 0,
            },
            Level {
                name: format!(
                    "copy target {} ms (WWS <= {})",
                    COPY_TARGET_US / 1000.0,
                    human_kib(COPY_TARGET_WWS_KIB)
                ),
                value: COPY_TARGET_US,
                colour_of: 1,
            },
        ];
        let memory = categories(&self.memory, Measure::memory_label);
        LineChart {
            title: &format!(
                "Migration downtime vs memory (WWS {}; lower is better)",
                human_kib(SMALL_WWS_KIB)
            ),
            x_label: "memory allocated by the process",
            value_label: "downtime (us, median)",
            categories: &memory,
            series: &by_mode(&self.memory, |m| m.downtime_us),
            levels: &targets,
            log: true,
        }
        .draw(&dir.join("migrate.png"))?;
        LineChart {
            title: &format!(
                "Migration total time vs memory (WWS {})",
                human_kib(SMALL_WWS_KIB)
            ),
            x_label: "memory allocated by the process",
            value_label: "total time (us, median)",
            categories: &memory,
            series: &by_mode(&self.memory, |m| m.total_us),
            levels: &[],
            log: true,
        }
        .draw(&dir.join("migrate-total.png"))?;
        LineChart {
            title: &format!(
                "Migration downtime vs writable working set ({WWS_MEMORY_MIB} MiB; lower is better)"
            ),
            x_label: "writable working set (rewritten in a loop)",
            value_label: "downtime (us, median)",
            categories: &categories(&self.wws, |m| human_kib(m.wws_kib)),
            series: &by_mode(&self.wws, |m| m.downtime_us),
            levels: &targets,
            log: true,
        }
        .draw(&dir.join("migrate-wws.png"))?;
        let counts: Vec<String> = self
            .parallel
            .iter()
            .filter(|p| p.mode == MODES[0])
            .map(|p| p.processes.to_string())
            .collect();
        let parallel = |mode: Mode, what: &str, value: fn(&ParallelMeasure) -> f64| Series {
            name: format!("{} {what}", mode_label(mode)),
            values: self
                .parallel
                .iter()
                .filter(|p| p.mode == mode)
                .map(value)
                .collect(),
        };
        LineChart {
            title: &format!(
                "Parallel migrations ({} each, WWS {})",
                self.mib_each(),
                human_kib(SMALL_WWS_KIB)
            ),
            x_label: "processes migrated at once",
            value_label: "us (median)",
            categories: &counts,
            series: &[
                parallel(Mode::Handover, "downtime", |p| p.downtime_us),
                parallel(Mode::Copy, "downtime", |p| p.downtime_us),
                parallel(Mode::Handover, "batch wall time", |p| p.batch_us),
                parallel(Mode::Copy, "batch wall time", |p| p.batch_us),
            ],
            levels: &[],
            log: true,
        }
        .draw(&dir.join("migrate-parallel.png"))?;
        Ok(())
    }
}
