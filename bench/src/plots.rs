//! PNG plots with plotters' bitmap backend. Text is drawn with ab_glyph from a
//! TrueType font file (DejaVu Sans, Debian's fonts-dejavu-core, which
//! scripts/bench installs), so no fontconfig or system font lookup is needed.
//!
//! House rules, so that each plot answers its question at a glance:
//! - the title is the question or the comparison;
//! - log axes where values span decades, with ticks only at 1-2-5 steps (or
//!   decades) and nothing in between, so labels never overlap;
//! - tick labels are plain: 1k, 10k, 1.5M, 0.1, 10⁻⁴ (see `tick`);
//! - linear axes of amounts start at 0, so bar and line heights compare honestly;
//! - ratios are drawn divided by their target, around the line 1 to beat.

use std::path::Path;

use anyhow::{anyhow, Context};
use plotters::{
    coord::{
        combinators::LogCoord,
        ranged1d::{DefaultFormatting, KeyPointHint, Ranged},
        types::RangedCoordf64,
    },
    prelude::*,
    style::text_anchor::{HPos, Pos, VPos},
};

pub use plotters::{chart::SeriesLabelPosition, style::RGBColor};

pub const BLUE: RGBColor = RGBColor(31, 119, 180);
pub const ORANGE: RGBColor = RGBColor(255, 127, 14);
pub const GREEN: RGBColor = RGBColor(44, 160, 44);
pub const RED: RGBColor = RGBColor(214, 39, 40);
pub const PURPLE: RGBColor = RGBColor(148, 103, 189);
pub const BROWN: RGBColor = RGBColor(140, 86, 75);
const DARK: RGBColor = RGBColor(60, 60, 60);
const GRID: RGBColor = RGBColor(225, 225, 225);

const FONT_CANDIDATES: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
];

/// Registers the font once; call before drawing.
pub fn init_fonts() -> anyhow::Result<()> {
    let path = std::env::var("BENCH_FONT")
        .ok()
        .into_iter()
        .chain(FONT_CANDIDATES.iter().map(|s| s.to_string()))
        .find(|p| Path::new(p).exists())
        .context("no TrueType font found: install fonts-dejavu-core or set BENCH_FONT")?;
    let bytes: &'static [u8] = Box::leak(std::fs::read(&path)?.into_boxed_slice());
    plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
        .map_err(|_| anyhow!("{path} is not a usable font"))?;
    Ok(())
}

fn err(e: impl std::fmt::Debug) -> anyhow::Error {
    anyhow!("{e:?}")
}

/// A plain tick label: 0, 12, 2.5, 1.5k, 600k, 2M, 0.05, 0.001, 10⁻⁴, 2×10⁻⁶.
/// Values a float step away from a round number print as that number.
pub fn tick(v: f64) -> String {
    if !v.is_finite() {
        return String::new();
    }
    if v == 0.0 {
        return "0".into();
    }
    let sign = if v < 0.0 { "-" } else { "" };
    let a = round_significant(v.abs(), 3);
    let body = if a >= 1e9 {
        format!("{}G", plain(a / 1e9))
    } else if a >= 1e6 {
        format!("{}M", plain(a / 1e6))
    } else if a >= 1e3 {
        format!("{}k", plain(a / 1e3))
    } else if a >= 1e-3 {
        plain(a)
    } else {
        let exp = a.log10().floor() as i32;
        let mantissa = round_significant(a / 10f64.powi(exp), 3);
        let power = format!("10{}", superscript(exp));
        if mantissa == 1.0 {
            power
        } else {
            format!("{}×{power}", plain(mantissa))
        }
    };
    format!("{sign}{body}")
}

fn round_significant(a: f64, digits: i32) -> f64 {
    if a == 0.0 || !a.is_finite() {
        return a;
    }
    let scale = 10f64.powi(digits - 1 - a.log10().floor() as i32);
    (a * scale).round() / scale
}

/// At most 3 significant digits, no trailing zeros.
fn plain(a: f64) -> String {
    let decimals = (2 - a.abs().log10().floor() as i32).max(0) as usize;
    let s = format!("{a:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

fn superscript(n: i32) -> String {
    n.to_string()
        .chars()
        .map(|c| match c {
            '-' => '⁻',
            '0' => '⁰',
            '1' => '¹',
            '2' => '²',
            '3' => '³',
            '4' => '⁴',
            '5' => '⁵',
            '6' => '⁶',
            '7' => '⁷',
            '8' => '⁸',
            '9' => '⁹',
            other => other,
        })
        .collect()
}

/// Axis bounds snapped to ticks, and the ticks: 1-2-5 (or 1-2-3-5, or
/// decades only) on a log axis; 1-2-5 steps from 0 on a linear one.
fn axis_ticks(values: &[f64], log: bool, from_zero: bool) -> (f64, f64, Vec<f64>) {
    let vals: Vec<f64> = values
        .iter()
        .copied()
        .filter(|v| v.is_finite() && (!log || *v > 0.0))
        .collect();
    let lo = vals.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = vals.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if !lo.is_finite() {
        return if log {
            (0.1, 10.0, vec![0.1, 1.0, 10.0])
        } else {
            (0.0, 1.0, vec![0.0, 0.5, 1.0])
        };
    }
    if log {
        log_ticks(lo, hi)
    } else {
        linear_ticks(if from_zero { lo.min(0.0) } else { lo }, hi)
    }
}

fn log_ticks(lo: f64, hi: f64) -> (f64, f64, Vec<f64>) {
    let (lo, hi) = if hi / lo < 1.5 {
        (lo / 1.5, hi * 1.5)
    } else {
        (lo, hi)
    };
    let decades = (hi / lo).log10();
    if decades > 3.5 {
        // Decades only: a little room past the data rather than a whole
        // decade more to reach the next tick.
        let (lo, hi) = (lo / 1.6, hi * 1.6);
        let step = if decades > 9.0 { 2 } else { 1 };
        let ticks = (lo.log10().ceil() as i32..=hi.log10().floor() as i32)
            .filter(|e| e % step == 0)
            .map(|e| 10f64.powi(e))
            .collect();
        return (lo, hi, ticks);
    }
    let multiples: &[f64] = if decades <= 1.2 {
        &[1.0, 2.0, 3.0, 5.0]
    } else {
        &[1.0, 2.0, 5.0]
    };
    let (e0, e1) = (lo.log10().floor() as i32 - 1, hi.log10().ceil() as i32 + 1);
    let mut candidates = vec![];
    for e in e0..=e1 {
        for m in multiples {
            candidates.push(m * 10f64.powi(e));
        }
    }
    // A little room so points do not sit on the frame.
    let lo_snap = candidates
        .iter()
        .copied()
        .filter(|c| *c <= lo / 1.08)
        .fold(candidates[0], f64::max);
    let hi_snap = candidates
        .iter()
        .copied()
        .filter(|c| *c >= hi * 1.08)
        .fold(*candidates.last().expect("candidates"), f64::min);
    let ticks = candidates
        .into_iter()
        .filter(|c| *c >= lo_snap * 0.999 && *c <= hi_snap * 1.001)
        .collect();
    (lo_snap, hi_snap, ticks)
}

fn linear_ticks(lo: f64, hi: f64) -> (f64, f64, Vec<f64>) {
    let span = if (hi - lo).abs() < f64::EPSILON {
        hi.abs().max(1.0)
    } else {
        hi - lo
    };
    let raw = span / 5.0;
    let e = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .into_iter()
        .map(|m| m * e)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * e);
    let lo_snap = (lo / step).floor() * step;
    let hi_snap = ((hi + span * 0.06) / step).ceil() * step;
    let mut ticks = vec![];
    let mut t = lo_snap;
    while t <= hi_snap + step * 1e-6 {
        ticks.push(if t.abs() < step * 1e-9 { 0.0 } else { t });
        t += step;
    }
    (lo_snap, hi_snap, ticks)
}

/// An axis whose ticks (and grid lines) are exactly the given values, and
/// nothing in between.
struct Ticked<R> {
    inner: R,
    ticks: Vec<f64>,
}

impl<R: Ranged<ValueType = f64>> Ranged for Ticked<R> {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;
    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.inner.map(value, limit)
    }
    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            vec![]
        } else {
            self.ticks.clone()
        }
    }
    fn range(&self) -> std::ops::Range<f64> {
        self.inner.range()
    }
}

fn linear_axis(lo: f64, hi: f64, ticks: Vec<f64>) -> Ticked<RangedCoordf64> {
    Ticked {
        inner: (lo..hi).into(),
        ticks,
    }
}

fn log_axis(lo: f64, hi: f64, ticks: Vec<f64>) -> Ticked<LogCoord<f64>> {
    Ticked {
        inner: (lo..hi).log_scale().into(),
        ticks,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    Line,
    /// Markers only (a policy, a threshold).
    Points,
    /// An experiment, drawn beside the measured lines.
    Dashed,
}

pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    /// Optional (min, max) per point, drawn as whiskers.
    pub ranges: Vec<(f64, f64)>,
    /// `None`: the palette's colour for its position.
    pub color: Option<RGBColor>,
    pub style: Style,
}

impl Series {
    pub fn line(name: &str, points: Vec<(f64, f64)>) -> Series {
        Series {
            name: name.into(),
            points,
            ranges: vec![],
            color: None,
            style: Style::Line,
        }
    }
    pub fn points(name: &str, points: Vec<(f64, f64)>) -> Series {
        Series {
            style: Style::Points,
            ..Series::line(name, points)
        }
    }
}

pub struct Axes<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    pub log_x: bool,
    pub log_y: bool,
}

fn palette(i: usize) -> RGBColor {
    // Ten distinct colours (matplotlib's tab10): the soak draws seven tables.
    const MORE: [RGBColor; 4] = [
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
        RGBColor(188, 189, 34),
        RGBColor(23, 190, 207),
    ];
    [
        BLUE, ORANGE, GREEN, RED, PURPLE, BROWN, MORE[0], MORE[1], MORE[2], MORE[3],
    ][i % 10]
}

/// One line chart: axes, lines, labelled vertical markers.
pub struct Chart<'a> {
    pub axes: Axes<'a>,
    pub series: Vec<Series>,
    pub markers: Vec<(f64, String)>,
    /// Ticks of the x axis when the data has few values (worker counts).
    pub x_ticks: Option<Vec<f64>>,
    /// Where the legend goes (a corner the data leaves free); `None`: no
    /// legend (one series, named by the title).
    pub legend: Option<SeriesLabelPosition>,
}

/// One bar of a bar chart; `stacked` is a second segment on top (lighter).
pub struct Bar {
    pub label: String,
    pub color: RGBColor,
    pub value: f64,
    pub range: Option<(f64, f64)>,
    pub stacked: Option<f64>,
}

pub struct BarChart<'a> {
    pub title: &'a str,
    pub y_label: &'a str,
    pub bars: Vec<Bar>,
    /// Legend names of the two segments when bars are stacked.
    pub stack_names: Option<(&'a str, &'a str)>,
}

pub enum Panel<'a> {
    Lines(Chart<'a>),
    Bars(BarChart<'a>),
}

/// One PNG with a grid of panels (`rows`, `cols`), each 640 × 460.
pub fn panels(
    path: &Path,
    (rows, cols): (usize, usize),
    panels: &[Panel<'_>],
) -> anyhow::Result<()> {
    let (rows, cols) = (rows.max(1), cols.max(1));
    let root = BitMapBackend::new(path, (640 * cols as u32, 460 * rows as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let areas = root.split_evenly((rows, cols));
    for (area, panel) in areas.iter().zip(panels) {
        match panel {
            Panel::Lines(chart) => draw_lines(area, chart)?,
            Panel::Bars(chart) => draw_bars(area, chart)?,
        }
    }
    root.present()
        .map_err(err)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// One PNG with `charts.len()` line charts side by side.
pub fn line_charts(path: &Path, charts: Vec<Chart<'_>>) -> anyhow::Result<()> {
    let n = charts.len();
    let panels_: Vec<Panel<'_>> = charts.into_iter().map(Panel::Lines).collect();
    panels(path, (1, n), &panels_)
}

fn draw_lines<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    chart: &Chart<'_>,
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let axes = &chart.axes;
    let xs: Vec<f64> = chart
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .chain(chart.markers.iter().map(|m| m.0))
        .collect();
    let ys: Vec<f64> = chart
        .series
        .iter()
        .flat_map(|s| {
            s.points
                .iter()
                .map(|p| p.1)
                .chain(s.ranges.iter().flat_map(|r| [r.0, r.1]))
        })
        .collect();
    let (x0, x1, x_ticks) = match &chart.x_ticks {
        Some(t) if !t.is_empty() => {
            let (lo, hi) = (t[0], t[t.len() - 1]);
            if axes.log_x {
                (lo / 1.3, hi * 1.3, t.clone())
            } else {
                let pad = (hi - lo).max(1.0) * 0.08;
                (lo - pad, hi + pad, t.clone())
            }
        }
        _ => axis_ticks(&xs, axes.log_x, false),
    };
    let (y0, y1, y_ticks) = axis_ticks(&ys, axes.log_y, true);
    let mut builder = ChartBuilder::on(area);
    builder
        .caption(axes.title, ("sans-serif", 20))
        .margin(14)
        .x_label_area_size(44)
        .y_label_area_size(64);
    macro_rules! body {
        ($chart:expr) => {{
            let mut c = $chart;
            c.configure_mesh()
                .x_desc(axes.x_label)
                .y_desc(axes.y_label)
                .x_label_formatter(&|v| tick(*v))
                .y_label_formatter(&|v| tick(*v))
                .bold_line_style(GRID)
                .light_line_style(WHITE.mix(0.0))
                .label_style(("sans-serif", 14))
                .axis_desc_style(("sans-serif", 14))
                .draw()
                .map_err(err)?;
            for (i, s) in chart.series.iter().enumerate() {
                let color = s.color.unwrap_or_else(|| palette(i));
                let keep = |x: f64, y: f64| {
                    x.is_finite()
                        && y.is_finite()
                        && (!axes.log_y || y > 0.0)
                        && (!axes.log_x || x > 0.0)
                };
                let pts: Vec<(f64, f64)> = s
                    .points
                    .iter()
                    .copied()
                    .filter(|(x, y)| keep(*x, *y))
                    .collect();
                for (p, r) in s.points.iter().zip(&s.ranges) {
                    if keep(p.0, r.0) && keep(p.0, r.1) {
                        c.draw_series(std::iter::once(PathElement::new(
                            vec![(p.0, r.0), (p.0, r.1)],
                            color.stroke_width(2),
                        )))
                        .map_err(err)?;
                    }
                }
                match s.style {
                    Style::Line | Style::Dashed => {
                        let anno = if s.style == Style::Line {
                            c.draw_series(LineSeries::new(pts.clone(), color.stroke_width(3)))
                                .map_err(err)?
                        } else {
                            c.draw_series(DashedLineSeries::new(
                                pts.clone(),
                                10,
                                6,
                                color.stroke_width(3),
                            ))
                            .map_err(err)?
                        };
                        // A dashed series shows a gap in its legend swatch.
                        let gap = if s.style == Style::Dashed { 5 } else { 0 };
                        anno.label(s.name.clone()).legend(move |(x, y)| {
                            EmptyElement::at((x, y))
                                + PathElement::new(vec![(0, 0), (8, 0)], color.stroke_width(3))
                                + PathElement::new(
                                    vec![(8 + gap, 0), (20, 0)],
                                    color.stroke_width(3),
                                )
                        });
                        c.draw_series(pts.iter().map(|p| Circle::new(*p, 4, color.filled())))
                            .map_err(err)?;
                    }
                    Style::Points => {
                        c.draw_series(pts.iter().map(|p| Cross::new(*p, 6, color.stroke_width(3))))
                            .map_err(err)?
                            .label(s.name.clone())
                            .legend(move |(x, y)| {
                                Cross::new((x + 10, y), 6, color.stroke_width(3))
                            });
                    }
                }
            }
            for (x, label) in &chart.markers {
                c.draw_series(LineSeries::new(
                    vec![(*x, y0), (*x, y1)],
                    DARK.stroke_width(2),
                ))
                .map_err(err)?
                .label(label.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], DARK.stroke_width(2))
                });
            }
            if let Some(position) = &chart.legend {
                c.configure_series_labels()
                    .background_style(WHITE.mix(0.9))
                    .border_style(DARK)
                    .label_font(("sans-serif", 14))
                    .position(position.clone())
                    .draw()
                    .map_err(err)?;
            }
        }};
    }
    match (axes.log_x, axes.log_y) {
        (true, true) => body!(builder
            .build_cartesian_2d(log_axis(x0, x1, x_ticks), log_axis(y0, y1, y_ticks))
            .map_err(err)?),
        (true, false) => body!(builder
            .build_cartesian_2d(log_axis(x0, x1, x_ticks), linear_axis(y0, y1, y_ticks))
            .map_err(err)?),
        (false, true) => body!(builder
            .build_cartesian_2d(linear_axis(x0, x1, x_ticks), log_axis(y0, y1, y_ticks))
            .map_err(err)?),
        (false, false) => body!(builder
            .build_cartesian_2d(linear_axis(x0, x1, x_ticks), linear_axis(y0, y1, y_ticks))
            .map_err(err)?),
    }
    Ok(())
}

fn draw_bars<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    chart: &BarChart<'_>,
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    if chart.bars.iter().all(|b| !b.value.is_finite()) {
        // An older results file without this figure.
        area.titled(chart.title, ("sans-serif", 20))
            .map_err(err)?
            .draw(&Text::new(
                "not measured in this run",
                (40, 60),
                ("sans-serif", 16).into_font().color(&DARK),
            ))
            .map_err(err)?;
        return Ok(());
    }
    let n = chart.bars.len().max(1);
    let tops: Vec<f64> = chart
        .bars
        .iter()
        .flat_map(|b| {
            [
                b.value + b.stacked.unwrap_or(0.0),
                b.range.map(|r| r.1).unwrap_or(0.0),
            ]
        })
        .collect();
    // Room above the tallest bar for its value label.
    let top = tops
        .iter()
        .copied()
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max)
        * 1.15;
    let (y0, y1, y_ticks) = linear_ticks(0.0, top.max(f64::MIN_POSITIVE));
    let labels: Vec<String> = chart.bars.iter().map(|b| b.label.clone()).collect();
    let mut c = ChartBuilder::on(area)
        .caption(chart.title, ("sans-serif", 20))
        .margin(14)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(
            linear_axis(-0.5, n as f64 - 0.5, (0..n).map(|i| i as f64).collect()),
            linear_axis(y0, y1, y_ticks),
        )
        .map_err(err)?;
    c.configure_mesh()
        .disable_x_mesh()
        .bold_line_style(GRID)
        .light_line_style(WHITE.mix(0.0))
        .x_label_formatter(&|x| {
            let i = x.round();
            if (x - i).abs() < 0.01 && i >= 0.0 && (i as usize) < labels.len() {
                labels[i as usize].clone()
            } else {
                String::new()
            }
        })
        .y_label_formatter(&|v| tick(*v))
        .y_desc(chart.y_label)
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 14))
        .draw()
        .map_err(err)?;
    let value_style = TextStyle::from(("sans-serif", 14).into_font())
        .color(&DARK)
        .pos(Pos::new(HPos::Center, VPos::Bottom));
    for (i, b) in chart.bars.iter().enumerate() {
        if !b.value.is_finite() {
            continue;
        }
        let x = i as f64;
        c.draw_series(std::iter::once(Rectangle::new(
            [(x - 0.32, 0.0), (x + 0.32, b.value)],
            b.color.filled(),
        )))
        .map_err(err)?;
        let mut total = b.value;
        if let Some(s) = b.stacked.filter(|s| s.is_finite()) {
            c.draw_series(std::iter::once(Rectangle::new(
                [(x - 0.32, b.value), (x + 0.32, b.value + s)],
                b.color.mix(0.4).filled(),
            )))
            .map_err(err)?;
            total += s;
        }
        let mut label_at = total;
        if let Some((lo, hi)) = b.range.filter(|r| r.0.is_finite() && r.1.is_finite()) {
            c.draw_series(std::iter::once(PathElement::new(
                vec![(x, lo), (x, hi)],
                DARK.stroke_width(2),
            )))
            .map_err(err)?;
            label_at = label_at.max(hi);
        }
        c.draw_series(std::iter::once(Text::new(
            tick(total),
            (x, label_at + (y1 - y0) * 0.01),
            value_style.clone(),
        )))
        .map_err(err)?;
    }
    if let Some((first, second)) = chart.stack_names {
        let grey = RGBColor(110, 110, 110);
        c.draw_series(std::iter::empty::<Rectangle<(f64, f64)>>())
            .map_err(err)?
            .label(first)
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], grey.filled()));
        c.draw_series(std::iter::empty::<Rectangle<(f64, f64)>>())
            .map_err(err)?
            .label(second)
            .legend(move |(x, y)| {
                Rectangle::new([(x, y - 6), (x + 14, y + 6)], grey.mix(0.4).filled())
            });
        c.configure_series_labels()
            .background_style(WHITE.mix(0.9))
            .border_style(DARK)
            .label_font(("sans-serif", 14))
            .position(SeriesLabelPosition::UpperRight)
            .draw()
            .map_err(err)?;
    }
    Ok(())
}

/// Every ratio that has a target, divided by it, as a bar from the line 1
/// (the target) to the measured median, on a log axis: right of 1 (green) the
/// target is met, left of it (red) missed; whiskers span the repetitions.
/// Ratios recorded without a target are left to the tables.
pub fn target_chart(
    path: &Path,
    title: &str,
    ratios: &[crate::report::Ratio],
) -> anyhow::Result<()> {
    let rows: Vec<&crate::report::Ratio> = ratios
        .iter()
        .filter(|r| matches!(r.target, Some(t) if t > 0.0) && r.ratio.median.is_finite())
        .collect();
    let n = rows.len().max(1);
    // The label area fits the longest ratio name (they run to ~70 characters),
    // so names are never cut at the image's left edge; the plot keeps its width.
    let label_font = ("sans-serif", 15).into_font();
    let longest_label = rows
        .iter()
        .map(|r| {
            label_font
                .box_size(&r.name)
                .map(|(w, _)| w)
                .unwrap_or(8 * r.name.chars().count() as u32)
        })
        .max()
        .unwrap_or(0);
    let label_area = (longest_label + 24).max(300);
    let root =
        BitMapBackend::new(path, (980 + label_area, 120 + 40 * n as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let norm = |r: &crate::report::Ratio, v: f64| v / r.target.unwrap_or(1.0);
    let mut extent: Vec<f64> = vec![0.6, 1.8];
    for r in &rows {
        extent.extend([
            norm(r, r.ratio.min),
            norm(r, r.ratio.max),
            norm(r, r.ratio.median),
        ]);
    }
    let (x0, x1, x_ticks) = axis_ticks(&extent, true, false);
    let names: Vec<String> = rows.iter().rev().map(|r| r.name.clone()).collect();
    let mut c = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(14)
        .margin_right(280)
        .x_label_area_size(48)
        .y_label_area_size(label_area)
        .build_cartesian_2d(
            log_axis(x0, x1, x_ticks),
            linear_axis(-0.5, n as f64 - 0.5, (0..n).map(|i| i as f64).collect()),
        )
        .map_err(err)?;
    c.configure_mesh()
        .disable_y_mesh()
        .bold_line_style(GRID)
        .light_line_style(WHITE.mix(0.0))
        .x_label_formatter(&|v| tick(*v))
        .y_label_formatter(&|y| {
            let i = y.round();
            if (y - i).abs() < 0.01 && i >= 0.0 && (i as usize) < names.len() {
                names[i as usize].clone()
            } else {
                String::new()
            }
        })
        .x_desc("measured ÷ target (log scale): right of 1 = target met")
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 14))
        .draw()
        .map_err(err)?;
    let note_style = TextStyle::from(("sans-serif", 14).into_font())
        .color(&DARK)
        .pos(Pos::new(HPos::Left, VPos::Center));
    for (i, r) in rows.iter().enumerate() {
        let y = (n - 1 - i) as f64;
        let (med, lo, hi) = (
            norm(r, r.ratio.median),
            norm(r, r.ratio.min),
            norm(r, r.ratio.max),
        );
        let color = if med >= 1.0 { GREEN } else { RED };
        c.draw_series(std::iter::once(Rectangle::new(
            [(med.min(1.0), y + 0.3), (med.max(1.0), y - 0.3)],
            color.mix(0.85).filled(),
        )))
        .map_err(err)?;
        if lo.is_finite() && hi.is_finite() {
            c.draw_series([
                PathElement::new(vec![(lo, y), (hi, y)], DARK.stroke_width(2)),
                PathElement::new(vec![(lo, y - 0.15), (lo, y + 0.15)], DARK.stroke_width(2)),
                PathElement::new(vec![(hi, y - 0.15), (hi, y + 0.15)], DARK.stroke_width(2)),
            ])
            .map_err(err)?;
        }
        let (px, py) = c.backend_coord(&(hi.max(med).max(1.0), y));
        root.draw(&Text::new(
            format!(
                "{}, target ≥ {}",
                r.ratio.show(2),
                tick(r.target.unwrap_or(1.0))
            ),
            (px + 10, py),
            note_style.clone(),
        ))
        .map_err(err)?;
    }
    c.draw_series(std::iter::once(PathElement::new(
        vec![(1.0, -0.5), (1.0, n as f64 - 0.5)],
        BLACK.stroke_width(2),
    )))
    .map_err(err)?;
    root.present()
        .map_err(err)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tick_labels_are_plain() {
        for (v, want) in [
            (1_000_000.0, "1M"),
            (999_999.999_999, "1M"),
            (1_500_000.0, "1.5M"),
            (600_000.0, "600k"),
            (1_000.0, "1k"),
            (1_500.0, "1.5k"),
            (12.0, "12"),
            (2.5, "2.5"),
            (0.5, "0.5"),
            (0.1, "0.1"),
            (0.001, "0.001"),
            (9.99999e-5, "10⁻⁴"),
            (2.5e-6, "2.5×10⁻⁶"),
            (0.0, "0"),
            (-2000.0, "-2k"),
        ] {
            assert_eq!(tick(v), want, "tick({v})");
        }
    }

    #[test]
    fn log_ticks_snap_to_round_values_and_never_crowd() {
        let (lo, hi, ticks) = log_ticks(3.9, 90.0);
        assert_eq!((lo, hi), (2.0, 100.0));
        assert_eq!(ticks, vec![2.0, 5.0, 10.0, 20.0, 50.0, 100.0]);
        // Seven decades: decades only.
        let (_, _, ticks) = log_ticks(1e-6, 0.5);
        assert!(ticks
            .iter()
            .all(|t| (t.log10() - t.log10().round()).abs() < 1e-9));
        assert!(ticks.len() <= 9, "{ticks:?}");
    }

    #[test]
    fn linear_ticks_start_at_zero_in_round_steps() {
        let (lo, hi, ticks) = linear_ticks(0.0, 23_000.0);
        assert_eq!(lo, 0.0);
        assert!(hi >= 23_000.0);
        assert_eq!(ticks[1], 5_000.0);
    }
}
