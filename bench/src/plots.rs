//! PNG plots with plotters' bitmap backend. Text is drawn with ab_glyph from a
//! TrueType font file (DejaVu Sans, Debian's fonts-dejavu-core, which
//! scripts/bench installs), so no fontconfig or system font lookup is needed.

use std::path::Path;

use anyhow::{anyhow, Context};
use plotters::prelude::*;

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

pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    /// Dashed-looking: drawn with points only.
    pub points_only: bool,
}

pub struct Axes<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    pub log_x: bool,
    pub log_y: bool,
}

fn palette(i: usize) -> RGBColor {
    const COLORS: [RGBColor; 6] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
    ];
    COLORS[i % COLORS.len()]
}

fn bounds(values: impl Iterator<Item = f64>, log: bool) -> (f64, f64) {
    let vals: Vec<f64> = values
        .filter(|v| v.is_finite() && (!log || *v > 0.0))
        .collect();
    let lo = vals.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = vals.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if !lo.is_finite() || !hi.is_finite() {
        return (0.1, 1.0);
    }
    if log {
        (lo / 2.0, hi * 2.0)
    } else if (hi - lo).abs() < f64::EPSILON {
        (lo - 1.0, hi + 1.0)
    } else {
        (lo.min(0.0), hi * 1.1)
    }
}

/// Draws one chart into `area`.
pub fn draw_lines<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    axes: &Axes<'_>,
    series: &[Series],
    vertical_markers: &[(f64, String)],
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let (x0, x1) = bounds(
        series.iter().flat_map(|s| s.points.iter().map(|p| p.0)),
        axes.log_x,
    );
    let (y0, y1) = bounds(
        series.iter().flat_map(|s| s.points.iter().map(|p| p.1)),
        axes.log_y,
    );
    let mut builder = ChartBuilder::on(area);
    builder
        .caption(axes.title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70);
    macro_rules! body {
        ($chart:expr) => {{
            let mut chart = $chart;
            chart
                .configure_mesh()
                .x_desc(axes.x_label)
                .y_desc(axes.y_label)
                .label_style(("sans-serif", 13))
                .draw()
                .map_err(|e| anyhow!("{e:?}"))?;
            for (i, s) in series.iter().enumerate() {
                let color = palette(i);
                let pts: Vec<(f64, f64)> = s
                    .points
                    .iter()
                    .copied()
                    .filter(|(x, y)| {
                        x.is_finite()
                            && y.is_finite()
                            && (!axes.log_y || *y > 0.0)
                            && (!axes.log_x || *x > 0.0)
                    })
                    .collect();
                if !s.points_only {
                    chart
                        .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
                        .map_err(|e| anyhow!("{e:?}"))?
                        .label(s.name.clone())
                        .legend(move |(x, y)| {
                            PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
                        });
                    chart
                        .draw_series(pts.iter().map(|p| Circle::new(*p, 3, color.filled())))
                        .map_err(|e| anyhow!("{e:?}"))?;
                } else {
                    chart
                        .draw_series(pts.iter().map(|p| Cross::new(*p, 5, color.stroke_width(2))))
                        .map_err(|e| anyhow!("{e:?}"))?
                        .label(s.name.clone())
                        .legend(move |(x, y)| Cross::new((x + 9, y), 5, color.stroke_width(2)));
                }
            }
            for (x, label) in vertical_markers {
                let black = RGBColor(90, 90, 90);
                chart
                    .draw_series(LineSeries::new(
                        vec![(*x, y0), (*x, y1)],
                        black.stroke_width(1),
                    ))
                    .map_err(|e| anyhow!("{e:?}"))?
                    .label(label.clone())
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], black));
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .label_font(("sans-serif", 13))
                .position(SeriesLabelPosition::UpperLeft)
                .draw()
                .map_err(|e| anyhow!("{e:?}"))?;
        }};
    }
    match (axes.log_x, axes.log_y) {
        (true, true) => body!(builder
            .build_cartesian_2d((x0..x1).log_scale(), (y0..y1).log_scale())
            .map_err(|e| anyhow!("{e:?}"))?),
        (true, false) => body!(builder
            .build_cartesian_2d((x0..x1).log_scale(), y0..y1)
            .map_err(|e| anyhow!("{e:?}"))?),
        (false, true) => body!(builder
            .build_cartesian_2d(x0..x1, (y0..y1).log_scale())
            .map_err(|e| anyhow!("{e:?}"))?),
        (false, false) => body!(builder
            .build_cartesian_2d(x0..x1, y0..y1)
            .map_err(|e| anyhow!("{e:?}"))?),
    }
    Ok(())
}

/// One chart of a figure: axes, lines, and labelled vertical markers.
pub struct Chart<'a> {
    pub axes: Axes<'a>,
    pub series: Vec<Series>,
    pub markers: Vec<(f64, String)>,
}

/// One PNG with `charts.len()` charts side by side.
pub fn line_charts(path: &Path, charts: &[Chart<'_>]) -> anyhow::Result<()> {
    let width = 640 * charts.len().max(1) as u32;
    let root = BitMapBackend::new(path, (width, 460)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e:?}"))?;
    let areas = root.split_evenly((1, charts.len().max(1)));
    for (area, chart) in areas.iter().zip(charts) {
        draw_lines(area, &chart.axes, &chart.series, &chart.markers)?;
    }
    root.present()
        .map_err(|e| anyhow!("{e:?}"))
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// Ratio medians with their range as whiskers and the target as a red tick.
pub fn ratio_chart(path: &Path, ratios: &[crate::report::Ratio]) -> anyhow::Result<()> {
    let n = ratios.len().max(1);
    let root = BitMapBackend::new(path, (220 * n as u32 + 160, 460)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e:?}"))?;
    let hi = ratios
        .iter()
        .flat_map(|r| [r.ratio.max, r.target.unwrap_or(0.0)])
        .filter(|v| v.is_finite())
        .fold(1.0, f64::max)
        * 1.15;
    let names: Vec<String> = ratios.iter().map(|r| r.name.clone()).collect();
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Ratios (median, range over repetitions; red: target)",
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(-0.5f64..(n as f64 - 0.5), 0f64..hi)
        .map_err(|e| anyhow!("{e:?}"))?;
    chart
        .configure_mesh()
        .x_labels(n)
        .x_label_formatter(&|x| {
            let i = x.round() as i64;
            if (x - i as f64).abs() < 0.01 && i >= 0 && (i as usize) < names.len() {
                names[i as usize].clone()
            } else {
                String::new()
            }
        })
        .disable_x_mesh()
        .y_desc("ratio")
        .label_style(("sans-serif", 13))
        .draw()
        .map_err(|e| anyhow!("{e:?}"))?;
    let blue = RGBColor(31, 119, 180);
    for (i, r) in ratios.iter().enumerate() {
        let x = i as f64;
        if !r.ratio.median.is_finite() {
            continue;
        }
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(x - 0.25, 0.0), (x + 0.25, r.ratio.median)],
                blue.mix(0.7).filled(),
            )))
            .map_err(|e| anyhow!("{e:?}"))?;
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(x, r.ratio.min), (x, r.ratio.max)],
                BLACK.stroke_width(2),
            )))
            .map_err(|e| anyhow!("{e:?}"))?;
        if let Some(t) = r.target {
            chart
                .draw_series(std::iter::once(PathElement::new(
                    vec![(x - 0.35, t), (x + 0.35, t)],
                    RED.stroke_width(3),
                )))
                .map_err(|e| anyhow!("{e:?}"))?;
        }
    }
    root.present().map_err(|e| anyhow!("{e:?}"))?;
    Ok(())
}
