//! `fleetrl plot RUN...`: learning curves as a PNG, evaluation return against env steps (left)
//! and against wall time (right), one line per label.
//!
//! A run is a `fleetrl train` output directory (its `summary.json`) or any JSON file shaped like
//! one: an `evaluations` list whose entries are objects with `env_steps`, `mean_return` and
//! optionally `wall_seconds`, or arrays `[env_steps, mean_return(, wall_seconds)]` (what the
//! bench's peer scripts print). `LABEL=RUN` names a run's line; runs that share a label (seeds
//! of one system) are drawn as one line, their median at each evaluation, over a band from the
//! lowest to the highest. No Python is needed; text is drawn with a TrueType font found on the
//! system (or `FLEETRL_PLOT_FONT`).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use plotters::prelude::*;
use serde_json::Value;

/// One evaluation point of a curve.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Point {
    pub(crate) env_steps: f64,
    pub(crate) mean_return: f64,
    pub(crate) wall_seconds: Option<f64>,
}

/// One run's evaluations and the name its line gets in the legend.
#[derive(Debug, Clone)]
pub(crate) struct Curve {
    pub(crate) label: String,
    pub(crate) points: Vec<Point>,
}

/// Reads a run directory (its `summary.json`) or a curve JSON file.
pub(crate) fn load(path: &Path) -> anyhow::Result<Curve> {
    let file = if path.is_dir() {
        path.join("summary.json")
    } else {
        path.to_path_buf()
    };
    let text = std::fs::read_to_string(&file).with_context(|| {
        if path.is_dir() {
            format!(
                "reading {} (is {} a finished `fleetrl train` output directory?)",
                file.display(),
                path.display()
            )
        } else {
            format!("reading {}", file.display())
        }
    })?;
    let json: Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", file.display()))?;
    let curve = parse(&json, &default_label(path))
        .with_context(|| format!("reading the evaluations in {}", file.display()))?;
    Ok(curve)
}

/// Reads a run argument: a run (see [`load`]), or `LABEL=RUN` to give the run's line that
/// label. An argument that exists as a path is a run, `=` in its name or not.
pub(crate) fn load_arg(arg: &Path) -> anyhow::Result<Curve> {
    let labelled = arg.to_str().and_then(|s| s.split_once('='));
    match labelled {
        Some((label, run)) if !label.is_empty() && !arg.exists() => {
            let mut curve = load(Path::new(run))?;
            curve.label = label.to_string();
            Ok(curve)
        }
        _ => load(arg),
    }
}

fn default_label(path: &Path) -> String {
    let name = if path.is_dir() {
        path.file_name()
    } else {
        path.file_stem()
    };
    name.map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// The curve in a summary-shaped JSON value. The label is the value's `label` or `system`, else
/// `fallback` (the run directory's name).
pub(crate) fn parse(json: &Value, fallback: &str) -> anyhow::Result<Curve> {
    let label = ["label", "system"]
        .iter()
        .find_map(|k| json.get(k).and_then(Value::as_str))
        .unwrap_or(fallback)
        .to_string();
    let Some(evaluations) = json.get("evaluations").and_then(Value::as_array) else {
        bail!("no `evaluations` list");
    };
    let points = evaluations
        .iter()
        .enumerate()
        .map(|(i, e)| point(e).with_context(|| format!("evaluation {i}: {e}")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    if points.is_empty() {
        bail!("`evaluations` is empty: the run made no evaluation to plot");
    }
    Ok(Curve { label, points })
}

fn point(e: &Value) -> anyhow::Result<Point> {
    let number = |v: Option<&Value>, what: &str| -> anyhow::Result<f64> {
        let x = v
            .and_then(Value::as_f64)
            .with_context(|| format!("`{what}` is missing or not a number"))?;
        if !x.is_finite() {
            bail!("`{what}` is not finite");
        }
        Ok(x)
    };
    match e {
        Value::Object(o) => Ok(Point {
            env_steps: number(o.get("env_steps"), "env_steps")?,
            mean_return: number(o.get("mean_return"), "mean_return")?,
            wall_seconds: o
                .get("wall_seconds")
                .map(|w| number(Some(w), "wall_seconds"))
                .transpose()?,
        }),
        Value::Array(a) if (2..=3).contains(&a.len()) => Ok(Point {
            env_steps: number(a.first(), "env_steps")?,
            mean_return: number(a.get(1), "mean_return")?,
            wall_seconds: a
                .get(2)
                .map(|w| number(Some(w), "wall_seconds"))
                .transpose()?,
        }),
        _ => bail!("expected {{env_steps, mean_return, wall_seconds}} or [env_steps, mean_return(, wall_seconds)]"),
    }
}

/// Where a TrueType font is looked for, in order, after `FLEETRL_PLOT_FONT`.
const FONT_CANDIDATES: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/liberation-sans/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/noto/NotoSans-Regular.ttf",
    "/Library/Fonts/Arial.ttf",
    "/System/Library/Fonts/Supplemental/Arial.ttf",
];

/// Registers the first usable font as plotters' `sans-serif` (once per process).
fn register_font() -> anyhow::Result<()> {
    static REGISTERED: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    let outcome = REGISTERED.get_or_init(|| {
        let wanted = std::env::var_os("FLEETRL_PLOT_FONT").map(PathBuf::from);
        let candidates: Vec<PathBuf> = match &wanted {
            Some(path) => vec![path.clone()],
            None => FONT_CANDIDATES.iter().map(PathBuf::from).collect(),
        };
        for path in candidates {
            let Ok(bytes) = std::fs::read(&path) else {
                continue;
            };
            // plotters keeps fonts for the life of the process.
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                return Ok(path);
            }
        }
        Err(match wanted {
            Some(path) => format!(
                "FLEETRL_PLOT_FONT={} is not a readable TrueType font",
                path.display()
            ),
            None => format!(
                "no TrueType font found (looked for {}); install one (Debian: apt install \
                 fonts-dejavu-core) or point FLEETRL_PLOT_FONT at a .ttf file",
                FONT_CANDIDATES.join(", ")
            ),
        })
    });
    outcome.clone().map(|_| ()).map_err(anyhow::Error::msg)
}

/// Line colours, one per run, cycling.
const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// The colour of the `i`-th curve.
pub(crate) fn colour(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// The runs that share a label, as one line: at each evaluation every run reached, the median
/// env steps, return and wall seconds, and the lowest and highest return. A single run is its
/// own points, lowest and highest being its return.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Line {
    pub(crate) label: String,
    pub(crate) runs: usize,
    pub(crate) points: Vec<Point>,
    /// The lowest and highest return at each point.
    pub(crate) range: Vec<(f64, f64)>,
    /// Evaluations that some runs made and others did not reach, left out.
    pub(crate) left_out: usize,
}

impl Line {
    /// The legend's text: the label, and for several runs what the line and the band are.
    fn legend(&self) -> String {
        match self.runs {
            1 => self.label.clone(),
            n => format!("{} (median of {n}; band: lowest to highest)", self.label),
        }
    }
}

/// `curves` grouped by label, in the order each label first appears, each group as one [`Line`].
/// The runs of a label are matched evaluation by evaluation (the i-th of each), so they must
/// evaluate at the same env steps; an error names the label where they do not.
pub(crate) fn lines(curves: Vec<Curve>) -> anyhow::Result<Vec<Line>> {
    let mut groups: Vec<(String, Vec<Curve>)> = Vec::new();
    for curve in curves {
        match groups.iter_mut().find(|(label, _)| *label == curve.label) {
            Some((_, runs)) => runs.push(curve),
            None => groups.push((curve.label.clone(), vec![curve])),
        }
    }
    groups
        .into_iter()
        .map(|(label, runs)| line(label, &runs))
        .collect()
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// The lowest and the highest of `values`.
fn extent(values: &[f64]) -> (f64, f64) {
    values
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| {
            (lo.min(x), hi.max(x))
        })
}

fn line(label: String, runs: &[Curve]) -> anyhow::Result<Line> {
    let reached = runs.iter().map(|c| c.points.len()).min().unwrap_or(0);
    let longest = runs.iter().map(|c| c.points.len()).max().unwrap_or(0);
    let mut points = Vec::with_capacity(reached);
    let mut range = Vec::with_capacity(reached);
    let mut steps_range = Vec::with_capacity(reached);
    for i in 0..reached {
        let at = || runs.iter().map(move |c| c.points[i]);
        let mut steps: Vec<f64> = at().map(|p| p.env_steps).collect();
        let mut returns: Vec<f64> = at().map(|p| p.mean_return).collect();
        let walls: Option<Vec<f64>> = at().map(|p| p.wall_seconds).collect();
        steps_range.push(extent(&steps));
        range.push(extent(&returns));
        points.push(Point {
            env_steps: median(&mut steps),
            mean_return: median(&mut returns),
            wall_seconds: walls.map(|mut w| median(&mut w)),
        });
    }
    // Matched by index, the i-th evaluations must sit nearer each other than their neighbours.
    for (i, &(lo, hi)) in steps_range.iter().enumerate() {
        let gap = [i.checked_sub(1), Some(i + 1)]
            .into_iter()
            .flatten()
            .filter_map(|j| points.get(j))
            .map(|p| (p.env_steps - points[i].env_steps).abs())
            .fold(f64::INFINITY, f64::min);
        if hi - lo > gap / 2.0 {
            bail!(
                "the runs labelled `{label}` evaluate at different env steps (evaluation {i} is \
                 at {lo} in one and {hi} in another): their curves cannot be matched point by \
                 point; give them different labels (LABEL=RUN)"
            );
        }
    }
    Ok(Line {
        label,
        runs: runs.len(),
        points,
        range,
        left_out: longest - reached,
    })
}

/// Draws `lines` into a `width`×`height` PNG at `out`: return against env steps on the left,
/// against wall seconds on the right (points without wall times are left out of that panel).
pub(crate) fn draw(
    lines: &[Line],
    title: &str,
    out: &Path,
    (width, height): (u32, u32),
) -> anyhow::Result<()> {
    if lines.is_empty() {
        bail!("nothing to plot: give at least one run directory or curve file");
    }
    register_font()?;
    let root = BitMapBackend::new(out, (width, height)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_error)?;
    let root = root.titled(title, ("sans-serif", 22)).map_err(plot_error)?;
    let (left, right) = root.split_horizontally(width / 2);

    let series = |x: fn(&Point) -> Option<f64>| -> Vec<Vec<Band>> {
        lines
            .iter()
            .map(|l| {
                l.points
                    .iter()
                    .zip(&l.range)
                    .filter_map(|(p, &(lo, hi))| {
                        x(p).map(|x| Band {
                            x,
                            y: p.mean_return,
                            lo,
                            hi,
                        })
                    })
                    .collect()
            })
            .collect()
    };
    panel(&left, lines, &series(|p| Some(p.env_steps)), "env steps")?;
    panel(&right, lines, &series(|p| p.wall_seconds), "wall seconds")?;
    root.present()
        .with_context(|| format!("writing {}", out.display()))?;
    Ok(())
}

/// One point of a line as drawn: its median `y` at `x`, over a band from `lo` to `hi`.
#[derive(Debug, Clone, Copy)]
struct Band {
    x: f64,
    y: f64,
    lo: f64,
    hi: f64,
}

fn panel(
    area: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
    lines: &[Line],
    series: &[Vec<Band>],
    x_label: &str,
) -> anyhow::Result<()> {
    let all = || series.iter().flatten();
    let x_max = all().map(|b| b.x).fold(0.0, f64::max).max(1.0) * 1.02;
    let (y_min, y_max) = all().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), b| {
        (lo.min(b.lo), hi.max(b.hi))
    });
    let (y_min, y_max) = if y_min.is_finite() {
        let pad = ((y_max - y_min) * 0.05).max(1.0);
        (y_min - pad, y_max + pad)
    } else {
        (0.0, 1.0)
    };
    let mut chart = ChartBuilder::on(area)
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..x_max, y_min..y_max)
        .map_err(plot_error)?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc("evaluation return")
        .x_label_formatter(&|x| short_number(*x))
        .y_label_formatter(&|y| short_number(*y))
        .light_line_style(RGBColor(238, 238, 238))
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(plot_error)?;
    // Every band first, so that no band hides another line.
    for (i, (line, bands)) in lines.iter().zip(series).enumerate() {
        if line.runs > 1 && bands.len() > 1 {
            let outline = bands
                .iter()
                .map(|b| (b.x, b.hi))
                .chain(bands.iter().rev().map(|b| (b.x, b.lo)));
            chart
                .draw_series(std::iter::once(Polygon::new(
                    outline.collect::<Vec<_>>(),
                    colour(i).mix(BAND_OPACITY).filled(),
                )))
                .map_err(plot_error)?;
        }
    }
    for (i, (line, bands)) in lines.iter().zip(series).enumerate() {
        if bands.is_empty() {
            continue;
        }
        let style = colour(i).stroke_width(2);
        chart
            .draw_series(LineSeries::new(bands.iter().map(|b| (b.x, b.y)), style))
            .map_err(plot_error)?
            .label(line.legend())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], style));
        chart
            .draw_series(
                bands
                    .iter()
                    .map(|b| Circle::new((b.x, b.y), 3, colour(i).filled())),
            )
            .map_err(plot_error)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()
        .map_err(plot_error)?;
    Ok(())
}

/// How much of a line's colour its band takes (the rest is what lies under it).
const BAND_OPACITY: f64 = 0.2;

fn short_number(x: f64) -> String {
    match x.abs() {
        a if a >= 1e6 => format!("{:.1}M", x / 1e6),
        a if a >= 1e4 => format!("{:.0}k", x / 1e3),
        a if a >= 1e3 => format!("{:.1}k", x / 1e3),
        _ if (x - x.round()).abs() < 1e-9 => format!("{x:.0}"),
        a if a >= 10.0 => format!("{x:.1}"),
        _ => format!("{x:.2}"),
    }
}

fn plot_error<E: std::error::Error + Send + Sync + 'static>(e: E) -> anyhow::Error {
    anyhow::Error::new(e).context("drawing the plot")
}

/// `fleetrl plot`: loads every run (see [`load_arg`]) and writes the PNG, one line per label.
pub(crate) fn run(runs: &[PathBuf], out: &Path, title: Option<&str>) -> anyhow::Result<()> {
    let curves = runs
        .iter()
        .map(|r| load_arg(r))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let count = curves.len();
    let lines = lines(curves)?;
    for line in lines.iter().filter(|l| l.left_out > 0) {
        eprintln!(
            "[fleetrl] `{}`: drawn to its {} evaluations that all {} runs reached ({} more in \
             some runs left out)",
            line.label,
            line.points.len(),
            line.runs,
            line.left_out
        );
    }
    let title = title.map_or_else(|| "evaluation return".to_string(), str::to_string);
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    draw(&lines, &title, out, (1280, 480))?;
    eprintln!(
        "[fleetrl] wrote {} ({count} run{}, {} line{})",
        out.display(),
        if count == 1 { "" } else { "s" },
        lines.len(),
        if lines.len() == 1 { "" } else { "s" }
    );
    Ok(())
}

#[cfg(test)]
mod tests;
