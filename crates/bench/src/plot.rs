//! PNG charts of benchmark results (grouped bars, lines over categories),
//! so a recorded run can be looked at instead of read.
//!
//! Text is drawn with DejaVu Sans loaded from its Debian path
//! (`fonts-dejavu-core`): no font discovery, so the same chart comes out on
//! every machine that has the package.

use std::collections::HashMap;
use std::ops::Range;
use std::path::Path;
use std::sync::OnceLock;

use anyhow::{anyhow, bail};
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};

const FONT_PATH: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";
const SIZE: (u32, u32) = (1600, 1000);

/// One group of bars (e.g. "IPC2 one core"), each bar a (label, value).
#[derive(Debug, Clone)]
pub struct BarGroup {
    pub name: String,
    pub bars: Vec<(String, f64)>,
}

/// Draws grouped vertical bars into a PNG at `path`: one band per group, one
/// colour per bar label across all groups (with a legend), the value printed
/// above each bar, and a logarithmic value axis when `log` is true (latencies
/// of mechanisms differ by orders of magnitude). Bars that cannot be drawn
/// (not finite, or not positive on a log axis) are left out.
pub fn grouped_bars(
    path: &Path,
    title: &str,
    value_label: &str,
    groups: &[BarGroup],
    log: bool,
) -> anyhow::Result<()> {
    register_dejavu()?;
    let layout = Layout::new(groups, log)?;
    let (min, max) = layout.extent;
    if log {
        // Powers of ten around the data (the shortest bar still a third of a
        // decade tall), plus headroom for the value labels.
        let lo = 10f64.powf((min.log10() - 0.3).floor());
        let top = max.log10();
        let hi = 10f64.powf(top + (top - lo.log10()).max(1.0) * 0.14);
        draw(path, title, value_label, &layout, (lo..hi).log_scale(), lo)
    } else {
        let (lo, hi) = (min.min(0.0) * 1.2, max.max(0.0) * 1.16);
        draw(
            path,
            title,
            value_label,
            &layout,
            lo..hi.max(lo + f64::EPSILON),
            0.0,
        )
    }
}

/// One line of a [`LineChart`]: a value per category (a value that cannot
/// be drawn, such as NaN, leaves a gap).
#[derive(Debug, Clone)]
pub struct Series {
    pub name: String,
    pub values: Vec<f64>,
}

/// A horizontal dashed line across a [`LineChart`] (a target), in the
/// colour of series `colour_of`.
#[derive(Debug, Clone)]
pub struct Level {
    pub name: String,
    pub value: f64,
    pub colour_of: usize,
}

/// Lines over named categories (x): one colour per series, a point and its
/// value at every category, the categories' names under the axis, dashed
/// `levels` (targets), and a logarithmic value axis when `log` is true.
/// Values that cannot be drawn (not finite, or not positive on a log axis)
/// are left out.
#[derive(Debug, Clone)]
pub struct LineChart<'a> {
    pub title: &'a str,
    /// What the categories are, under their names.
    pub x_label: &'a str,
    pub value_label: &'a str,
    pub categories: &'a [String],
    pub series: &'a [Series],
    pub levels: &'a [Level],
    pub log: bool,
}

impl LineChart<'_> {
    /// Draws the chart into a PNG at `path`.
    pub fn draw(&self, path: &Path) -> anyhow::Result<()> {
        register_dejavu()?;
        let values = self
            .series
            .iter()
            .flat_map(|s| s.values.iter().copied())
            .chain(self.levels.iter().map(|l| l.value))
            .filter(|v| self.drawable(*v));
        let (min, max) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
        if self.categories.is_empty() || !min.is_finite() {
            bail!(
                "no point to draw{}",
                if self.log {
                    " (a log axis needs positive values)"
                } else {
                    ""
                }
            );
        }
        if self.log {
            // Whole decades around the data, with room for the value labels.
            let lo = 10f64.powf((min.log10() - 0.15).floor());
            let hi = 10f64.powf((max.log10() + 0.15).ceil());
            self.draw_on(path, (lo..hi).log_scale())
        } else {
            let (lo, hi) = (min.min(0.0) * 1.15, max.max(0.0) * 1.15);
            self.draw_on(path, lo..hi.max(lo + f64::EPSILON))
        }
    }

    fn drawable(&self, v: f64) -> bool {
        v.is_finite() && (!self.log || v > 0.0)
    }

    fn draw_on<Y>(&self, path: &Path, y: Y) -> anyhow::Result<()>
    where
        Y: AsRangedCoord<Value = f64>,
        Y::CoordDescType: ValueFormatter<f64>,
    {
        let err = |e: DrawingAreaErrorKind<_>| anyhow!("drawing {}: {e}", path.display());
        let (root, body) = canvas(path, self.title)?;
        let n = self.categories.len() as f64;
        let mut chart = ChartBuilder::on(&body)
            .margin(MARGIN)
            .margin_right(MARGIN_RIGHT)
            .x_label_area_size(84)
            .y_label_area_size(Y_LABEL_AREA)
            .build_cartesian_2d(-0.5..n - 0.5, y)
            .map_err(err)?;
        draw_grid(&mut chart, self.value_label).map_err(err)?;

        let value_font = TextStyle::from(("sans-serif", 15).into_font());
        for (i, s) in self.series.iter().enumerate() {
            let c = colour(i);
            let points: Vec<(f64, f64)> = s
                .values
                .iter()
                .enumerate()
                .filter(|(_, v)| self.drawable(**v))
                .map(|(k, v)| (k as f64, *v))
                .collect();
            chart
                .draw_series(LineSeries::new(points.clone(), c.stroke_width(3)))
                .map_err(err)?
                .label(&s.name)
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], c.stroke_width(3)));
            chart
                .draw_series(points.iter().map(|&p| Circle::new(p, 5, c.filled())))
                .map_err(err)?;
            // Values beside their points: above for the first series, below
            // for the others, so two close lines stay readable.
            for &(x, v) in &points {
                let (px, py) = chart.backend_coord(&(x, v));
                let text = short(v);
                let (w, h) = root.estimate_text_size(&text, &value_font).map_err(err)?;
                let dy = if i == 0 { -(h as i32) - 8 } else { 8 };
                let font = value_font.clone().color(&c);
                root.draw(&Text::new(text, (px - w as i32 / 2, py + dy), font))
                    .map_err(err)?;
            }
        }
        for l in self.levels.iter().filter(|l| self.drawable(l.value)) {
            let style = colour(l.colour_of).stroke_width(2);
            chart
                .draw_series(DashedLineSeries::new(
                    [(-0.5, l.value), (n - 0.5, l.value)],
                    12,
                    8,
                    style,
                ))
                .map_err(err)?
                .label(&l.name)
                .legend(move |(x, y)| DashedPathElement::new([(x, y), (x + 20, y)], 5, 3, style));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .label_font(("sans-serif", 18))
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(200, 200, 200))
            .draw()
            .map_err(err)?;

        // The categories' names under the axis, then what they are.
        let name_font = TextStyle::from(("sans-serif", NAME_FONT).into_font());
        let (cols, rows) = chart.plotting_area().get_pixel_range();
        let step = chart.backend_coord(&(1.0, 0.0)).0 - chart.backend_coord(&(0.0, 0.0)).0;
        for (k, name) in self.categories.iter().enumerate() {
            let x = chart.backend_coord(&(k as f64, 0.0)).0;
            for (line, text) in wrap(name, step.max(1) as u32, &root, &name_font)?
                .iter()
                .enumerate()
            {
                let (w, _) = root.estimate_text_size(text, &name_font).map_err(err)?;
                let at = (x - w as i32 / 2, rows.end + 10 + 20 * line as i32);
                root.draw(&Text::new(text.as_str(), at, name_font.clone()))
                    .map_err(err)?;
            }
        }
        let axis_font = TextStyle::from(("sans-serif", 20).into_font());
        let (w, _) = root
            .estimate_text_size(self.x_label, &axis_font)
            .map_err(err)?;
        let at = ((cols.start + cols.end) / 2 - w as i32 / 2, rows.end + 56);
        root.draw(&Text::new(self.x_label, at, axis_font))
            .map_err(err)?;
        root.present().map_err(err)?;
        Ok(())
    }
}

/// The font is registered once per process; plotters keeps a `'static`
/// reference to it, hence the leak.
fn register_dejavu() -> anyhow::Result<()> {
    static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            let bytes = std::fs::read(FONT_PATH).map_err(|e| {
                format!(
                    "cannot read {FONT_PATH} ({e}): install the Debian package fonts-dejavu-core"
                )
            })?;
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            register_font("sans-serif", FontStyle::Normal, bytes)
                .map_err(|_| format!("{FONT_PATH} is not a font plotters can read"))
        })
        .clone()
        .map_err(|e| anyhow!(e))
}

/// Where every bar goes: x is measured in bar widths. Groups are separated
/// by one empty bar width, and a group is widened (its bars centred) when
/// its name would not fit under its bars even on two lines.
struct Layout<'a> {
    groups: Vec<Band<'a>>,
    /// Bar labels in order of first appearance; the index picks the colour.
    labels: Vec<&'a str>,
    width: f64,
    extent: (f64, f64),
}

/// A group as drawn: its name under the x range it covers.
struct Band<'a> {
    name: &'a str,
    span: Range<f64>,
    bars: Vec<Bar>,
}

/// A bar centred on `x`; `label` indexes [`Layout::labels`].
struct Bar {
    x: f64,
    label: usize,
    value: f64,
}

impl<'a> Layout<'a> {
    fn new(groups: &'a [BarGroup], log: bool) -> anyhow::Result<Self> {
        let mut index: HashMap<&str, usize> = HashMap::new();
        let mut labels = Vec::new();
        let (mut min, mut max) = (f64::INFINITY, f64::NEG_INFINITY);
        let mut kept = Vec::new(); // per group: (label index, value) of its drawable bars
        for g in groups {
            let mut bars = Vec::new();
            for (label, value) in &g.bars {
                if !value.is_finite() || (log && *value <= 0.0) {
                    continue;
                }
                let i = *index.entry(label.as_str()).or_insert_with(|| {
                    labels.push(label.as_str());
                    labels.len() - 1
                });
                bars.push((i, *value));
                min = min.min(*value);
                max = max.max(*value);
            }
            kept.push(bars);
        }
        if labels.is_empty() {
            bail!(
                "no bar to draw{}",
                if log {
                    " (a log axis needs positive values)"
                } else {
                    ""
                }
            );
        }

        // Widths in bars; widening a group makes every bar narrower, so settle in a few rounds.
        let name_px: Vec<f64> = groups
            .iter()
            .map(|g| name_width(&g.name))
            .collect::<anyhow::Result<_>>()?;
        let plot_px = (SIZE.0 - Y_LABEL_AREA - MARGIN - MARGIN_RIGHT) as f64;
        let mut slots: Vec<f64> = kept.iter().map(|b| b.len().max(1) as f64).collect();
        for _ in 0..4 {
            let total: f64 = slots.iter().sum::<f64>() + slots.len() as f64;
            let bar_px = plot_px / total;
            for (s, (bars, px)) in slots.iter_mut().zip(kept.iter().zip(&name_px)) {
                *s = (bars.len().max(1) as f64).max(px / bar_px + 0.4);
            }
        }

        let mut placed = Vec::new();
        let mut x = 0.5;
        for ((g, bars), s) in groups.iter().zip(kept).zip(slots) {
            let first = x + (s - bars.len() as f64) / 2.0;
            let bars = bars
                .into_iter()
                .enumerate()
                .map(|(k, (label, value))| Bar {
                    x: first + k as f64,
                    label,
                    value,
                })
                .collect();
            placed.push(Band {
                name: &g.name,
                span: x - 0.5..x + s - 0.5,
                bars,
            });
            x += s + 1.0;
        }
        Ok(Self {
            groups: placed,
            labels,
            width: x - 1.0,
            extent: (min, max),
        })
    }
}

const Y_LABEL_AREA: u32 = 90;
const MARGIN: u32 = 12;
const MARGIN_RIGHT: u32 = 24;
const NAME_FONT: f64 = 16.0;

/// The narrowest a group's name can be drawn: on one line, or split in two by [`wrap`].
fn name_width(name: &str) -> anyhow::Result<f64> {
    let font = ("sans-serif", NAME_FONT).into_font();
    let width = |s: &str| {
        font.box_size(s)
            .map(|(w, _)| w as f64)
            .map_err(|e| anyhow!("measuring text: {e}"))
    };
    match split_point(name) {
        Some(i) => Ok(width(&name[..i])?.max(width(&name[i + 1..])?)),
        None => width(name),
    }
}

/// Colour-blind-friendly first (Okabe-Ito), then Tableau; repeats past 16 labels.
fn colour(i: usize) -> RGBColor {
    const PALETTE: [(u8, u8, u8); 16] = [
        (0, 114, 178),
        (230, 159, 0),
        (0, 158, 115),
        (204, 121, 167),
        (86, 180, 233),
        (213, 94, 0),
        (240, 228, 66),
        (0, 0, 0),
        (148, 103, 189),
        (140, 86, 75),
        (127, 127, 127),
        (188, 189, 34),
        (23, 190, 207),
        (214, 39, 40),
        (44, 160, 44),
        (255, 152, 150),
    ];
    let (r, g, b) = PALETTE[i % PALETTE.len()];
    RGBColor(r, g, b)
}

/// Three significant digits, with k/M/G from 1000 on so labels stay short.
fn short(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    // Rounded first, so 999 999 becomes 1M rather than 1000k.
    let step = 10f64.powi(v.abs().log10().floor() as i32 - 2);
    let v = (v / step).round() * step;
    let a = v.abs();
    if a >= 1e3 {
        let (d, s) = if a >= 1e9 {
            (1e9, "G")
        } else if a >= 1e6 {
            (1e6, "M")
        } else {
            (1e3, "k")
        };
        return format!("{}{s}", short(v / d));
    }
    let decimals = (2 - a.log10().floor() as i32).clamp(0, 9) as usize;
    let s = format!("{v:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

fn draw<Y>(
    path: &Path,
    title: &str,
    value_label: &str,
    layout: &Layout,
    y: Y,
    base: f64,
) -> anyhow::Result<()>
where
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let err = |e: DrawingAreaErrorKind<_>| anyhow!("drawing {}: {e}", path.display());
    let (root, body) = canvas(path, title)?;
    let lines = legend_rows(&body, layout).map_err(err)?;
    let (legend, plot) = body.split_vertically(28 * lines.len() as u32 + 8);

    let mut chart = ChartBuilder::on(&plot)
        .margin(MARGIN)
        .margin_right(MARGIN_RIGHT)
        .x_label_area_size(56)
        .y_label_area_size(Y_LABEL_AREA)
        .build_cartesian_2d(0.0..layout.width, y)
        .map_err(err)?;
    // Every other band shaded, so which bar is in which group is obvious;
    // drawn first, so the grid lines stay visible over it.
    let y = chart.y_range();
    let bands = layout.groups.iter().skip(1).step_by(2);
    chart
        .draw_series(bands.map(|b| {
            let corners = [(b.span.start, y.start), (b.span.end, y.end)];
            Rectangle::new(corners, RGBColor(244, 244, 244).filled())
        }))
        .map_err(err)?;
    draw_grid(&mut chart, value_label).map_err(err)?;

    let rows = chart.plotting_area().get_pixel_range().1;
    let bar_px = chart.backend_coord(&(1.0, base)).0 - chart.backend_coord(&(0.0, base)).0;
    let value_font = ("sans-serif", (bar_px as f64 * 1.1).clamp(11.0, 15.0))
        .into_font()
        .transform(FontTransform::Rotate270)
        .color(&BLACK);
    let name_font = TextStyle::from(("sans-serif", NAME_FONT).into_font());

    for band in &layout.groups {
        for &Bar { x, label, value: v } in &band.bars {
            let corners = [(x - 0.42, base), (x + 0.42, v)];
            chart
                .draw_series([Rectangle::new(corners, colour(label).filled())])
                .map_err(err)?;
            // Read bottom to top, just past the end of the bar.
            let (px, py) = chart.backend_coord(&(x, v));
            let text = short(v);
            let (w, h) = root.estimate_text_size(&text, &value_font).map_err(err)?;
            let y = if v >= base {
                (py - 4).max(rows.start + w as i32 + 2)
            } else {
                (py + 4 + w as i32).min(rows.end - 2)
            };
            let at = (px - h as i32 / 2, y);
            root.draw(&Text::new(text, at, value_font.clone()))
                .map_err(err)?;
        }
        // The group's name under its band, on two lines if it is too wide.
        let left = chart.backend_coord(&(band.span.start, base)).0;
        let right = chart.backend_coord(&(band.span.end, base)).0;
        for (k, line) in wrap(band.name, (right - left) as u32, &root, &name_font)?
            .iter()
            .enumerate()
        {
            let (w, _) = root.estimate_text_size(line, &name_font).map_err(err)?;
            let at = (
                (left + right) / 2 - w as i32 / 2,
                rows.end + 10 + 20 * k as i32,
            );
            root.draw(&Text::new(line.as_str(), at, name_font.clone()))
                .map_err(err)?;
        }
    }

    draw_legend(&legend, layout, &lines).map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

/// The value axis and its grid, as every chart here has them; the x axis
/// names categories, which the charts write themselves.
fn draw_grid<'a, Y>(
    chart: &mut ChartContext<'a, BitMapBackend<'a>, Cartesian2d<RangedCoordf64, Y>>,
    value_label: &str,
) -> Result<(), DrawingAreaErrorKind<<BitMapBackend<'a> as DrawingBackend>::ErrorType>>
where
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_desc(value_label)
        .y_label_formatter(&|v| short(*v))
        .axis_desc_style(("sans-serif", 20))
        .label_style(("sans-serif", 16))
        .light_line_style(RGBColor(235, 235, 235))
        .max_light_lines(4)
        .bold_line_style(RGBColor(200, 200, 200))
        .draw()
}

/// A white PNG canvas: the whole image, and the part under the title.
type Area<'a> = DrawingArea<BitMapBackend<'a>, plotters::coord::Shift>;

fn canvas<'a>(path: &'a Path, title: &str) -> anyhow::Result<(Area<'a>, Area<'a>)> {
    let err = |e: DrawingAreaErrorKind<_>| anyhow!("drawing {}: {e}", path.display());
    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let body = root
        .margin(12, 0, 0, 0)
        .titled(title, ("sans-serif", 30))
        .map_err(err)?;
    Ok((root, body))
}

/// The legend's rows, which sit between the title and the chart, out of the
/// bars' way: as many labels to a row as its width holds, and the width of
/// each label with its swatch.
struct LegendRow {
    labels: std::ops::Range<usize>,
    widths: Vec<i32>,
}

fn legend_rows<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    layout: &Layout,
) -> Result<Vec<LegendRow>, DrawingAreaErrorKind<DB::ErrorType>> {
    let font = legend_font();
    let (room, _) = area.dim_in_pixel();
    let mut rows: Vec<LegendRow> = Vec::new();
    for (i, label) in layout.labels.iter().enumerate() {
        let w = area.estimate_text_size(label, &font)?.0 as i32 + 44;
        match rows.last_mut() {
            Some(row) if row.widths.iter().sum::<i32>() + w <= room as i32 => {
                row.labels.end = i + 1;
                row.widths.push(w);
            }
            _ => rows.push(LegendRow {
                labels: i..i + 1,
                widths: vec![w],
            }),
        }
    }
    Ok(rows)
}

fn legend_font() -> TextStyle<'static> {
    TextStyle::from(("sans-serif", 18).into_font())
}

fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    layout: &Layout,
    rows: &[LegendRow],
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let font = legend_font();
    let (w, _) = area.dim_in_pixel();
    for (row, LegendRow { labels, widths }) in rows.iter().enumerate() {
        let mut x = (w as i32 - widths.iter().sum::<i32>()).max(0) / 2;
        let y = 6 + 28 * row as i32;
        for (k, width) in labels.clone().zip(widths) {
            area.draw(&Rectangle::new(
                [(x, y + 2), (x + 18, y + 20)],
                colour(k).filled(),
            ))?;
            area.draw(&Text::new(layout.labels[k], (x + 24, y + 2), font.clone()))?;
            x += width;
        }
    }
    Ok(())
}

/// Splits `text` at the space that best halves it when it is wider than `max`.
fn wrap<DB: DrawingBackend>(
    text: &str,
    max: u32,
    area: &DrawingArea<DB, plotters::coord::Shift>,
    font: &TextStyle,
) -> anyhow::Result<Vec<String>> {
    let width = |s: &str| {
        area.estimate_text_size(s, font)
            .map(|(w, _)| w)
            .map_err(|e| anyhow!("{e}"))
    };
    match split_point(text) {
        Some(i) if width(text)? > max => Ok(vec![text[..i].to_string(), text[i + 1..].to_string()]),
        _ => Ok(vec![text.to_string()]),
    }
}

/// The space nearest the middle of `text`.
fn split_point(text: &str) -> Option<usize> {
    let mid = text.len() / 2;
    text.match_indices(' ')
        .map(|(i, _)| i)
        .min_by_key(|i| i.abs_diff(mid))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<BarGroup> {
        let g = |name: &str, bars: &[(&str, f64)]| BarGroup {
            name: name.into(),
            bars: bars.iter().map(|(l, v)| (l.to_string(), *v)).collect(),
        };
        vec![
            g(
                "IPC1 one core",
                &[
                    ("atoll", 800.0),
                    ("pipe", 5000.0),
                    ("futex", 4800.0),
                    ("shmspin", 2900.0),
                ],
            ),
            g(
                "IPC1 two cores",
                &[("atoll", 1500.0), ("pipe", 44000.0), ("shmspin", 450.0)],
            ),
            g(
                "COPY1 1 MiB",
                &[("atoll", 90000.0), ("cma", 106000.0), ("memcpy", 22000.0)],
            ),
        ]
    }

    #[test]
    fn draws_a_png() {
        let dir = tempfile::tempdir().unwrap();
        for log in [true, false] {
            let path = dir.path().join(format!("bars-{log}.png"));
            grouped_bars(&path, "IPC round trip", "ns per round trip", &sample(), log).unwrap();
            let bytes = std::fs::read(&path).unwrap();
            assert!(bytes.len() > 1000, "{} bytes", bytes.len());
            assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        }
    }

    #[test]
    fn draws_line_charts() {
        let dir = tempfile::tempdir().unwrap();
        let categories: Vec<String> = ["0 B", "1 MiB", "64 MiB", "256 MiB"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let series = [
            Series {
                name: "hand-over".into(),
                values: vec![20.0, 25.0, 30.0, 31.0],
            },
            Series {
                name: "copy".into(),
                values: vec![300.0, f64::NAN, 900.0, 1200.0],
            },
        ];
        let levels = [Level {
            name: "target".into(),
            value: 100.0,
            colour_of: 0,
        }];
        for log in [true, false] {
            let path = dir.path().join(format!("lines-{log}.png"));
            let chart = LineChart {
                title: "Downtime",
                x_label: "memory",
                value_label: "us",
                categories: &categories,
                series: &series,
                levels: &levels,
                log,
            };
            chart.draw(&path).unwrap();
            let bytes = std::fs::read(&path).unwrap();
            assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        }
        let nothing = [Series {
            name: "x".into(),
            values: vec![0.0; 4],
        }];
        let chart = LineChart {
            title: "t",
            x_label: "x",
            value_label: "v",
            categories: &categories,
            series: &nothing,
            levels: &[],
            log: true,
        };
        assert!(chart.draw(&dir.path().join("none.png")).is_err());
    }

    #[test]
    fn refuses_nothing_to_draw() {
        let dir = tempfile::tempdir().unwrap();
        let groups = [BarGroup {
            name: "empty".into(),
            bars: vec![("atoll".into(), 0.0)],
        }];
        assert!(grouped_bars(&dir.path().join("x.png"), "t", "v", &groups, true).is_err());
    }

    #[test]
    fn short_values() {
        assert_eq!(short(9300.1), "9.3k");
        assert_eq!(short(999_999.0), "1M");
        assert_eq!(short(-2500.0), "-2.5k");
        assert_eq!(short(44668.2), "44.7k");
        assert_eq!(short(970504.0), "971k");
        assert_eq!(short(1.2e6), "1.2M");
        assert_eq!(short(0.5), "0.5");
        assert_eq!(short(12.34), "12.3");
        assert_eq!(short(0.0069), "0.0069");
        assert_eq!(short(0.0), "0");
    }
}
