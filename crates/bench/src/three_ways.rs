//! One program timed three ways in the same run: native (gcc -O2), plain
//! wasm (`--no-prepare`) and prepared, migratable wasm. This is what
//! preparation costs a real program, measured against what a user would
//! run instead. The benchmarks that use it (`mergesort`, `compress`, `js`) say
//! what the program does; this module refuses to report times for runs
//! whose results differ.

use std::time::Duration;

use super::{command_line, median, Machine, Report, Row};
use crate::progress;

/// The three ways, in the order each run takes them.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Way {
    Native,
    Plain,
    Prepared,
}

impl Way {
    const ALL: [Way; 3] = [Way::Native, Way::Plain, Way::Prepared];

    fn row(self) -> &'static str {
        match self {
            Way::Prepared => "atoll prepared wasm (migratable)",
            Way::Plain => "atoll plain wasm (--no-prepare)",
            Way::Native => "native gcc -O2",
        }
    }
}

/// Runs `run` for every way, `runs` times, and reports the medians.
///
/// `run(way)` runs the program once and returns how long it took and what
/// it produced (its output, or a digest of the files it wrote); every run
/// must produce what the first native run did. `workload` is the first
/// note under the table.
pub fn compare(
    name: &str,
    runs: usize,
    workload: String,
    mut run: impl FnMut(Way) -> anyhow::Result<(Duration, Vec<u8>)>,
) -> anyhow::Result<Report> {
    let mut times: [Vec<f64>; 3] = Default::default();
    let mut expected: Option<Vec<u8>> = None;
    for n in 0..runs {
        progress::say(format!("bench {name}: run {}/{runs}", n + 1));
        for (i, way) in Way::ALL.into_iter().enumerate() {
            let (time, result) = run(way)?;
            match &expected {
                None => expected = Some(result),
                Some(e) if *e != result => anyhow::bail!(
                    "{} produced something else than native ({} bytes against {})",
                    way.row(),
                    result.len(),
                    e.len()
                ),
                Some(_) => {}
            }
            times[i].push(time.as_secs_f64());
        }
    }
    let [native, plain, prepared] = times;
    let (m_native, m_plain, m_prepared) = (median(&native), median(&plain), median(&prepared));
    let row = |way: Way, median: f64, samples: Vec<f64>| Row {
        name: way.row().into(),
        median,
        samples,
        atoll_ratio: None,
    };
    let mut report = Report {
        name: name.into(),
        command: command_line(),
        machine: Machine::probe(),
        unit: "seconds".into(),
        higher_is_better: false,
        rows: vec![
            row(Way::Prepared, m_prepared, prepared),
            row(Way::Plain, m_plain, plain),
            row(Way::Native, m_native, native),
        ],
        notes: vec![
            workload,
            format!(
                "prepared / native = {:.2}x, prepared / plain = {:.2}x, plain / native = {:.2}x",
                m_prepared / m_native,
                m_prepared / m_plain,
                m_plain / m_native
            ),
            "native includes process start-up (fork+exec of a dynamic binary); atoll includes instantiation".into(),
            "target (issue 10): prepared wasm within 1.2x of native".into(),
        ],
    };
    report.ratios_against(Way::Prepared.row());
    Ok(report)
}
