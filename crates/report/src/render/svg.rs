//! Hand-written SVG charts: horizontal stacked bars, line charts and grouped bars.
//!
//! Why by hand rather than `plotters`: the four charts need rectangles, polylines, axis ticks and
//! text — about 250 lines here — while a charting crate would bring a font stack or its own SVG
//! backend and its dependencies for the same output. Hand-written SVG is deterministic (the same
//! report gives the same bytes, which tests rely on), has no runtime code in the page (no script, no
//! network), stays small for a year of daily points, and styles through the page's CSS.
//!
//! Every chart is one `<svg>` element with `role="img"`, a `<title>`, a `data-chart` name and, when
//! there is nothing to draw, a visible "no data" note instead of an empty box.

use std::fmt::Write;

/// Escapes text for SVG/HTML content and attributes.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// One series of a chart.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend name.
    pub name: String,
    /// CSS colour.
    pub color: String,
    /// One value per category or x position (None: a gap).
    pub values: Vec<Option<f64>>,
}

fn open(out: &mut String, name: &str, title: &str, w: u32, h: u32) {
    let _ = write!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" role="img" data-chart="{}" viewBox="0 0 {w} {h}" width="{w}" height="{h}"><title>{}</title>"#,
        esc(name),
        esc(title)
    );
    let _ = write!(out, r#"<text class="ct" x="8" y="18">{}</text>"#, esc(title));
}

fn no_data(out: &mut String, w: u32, h: u32) {
    let _ = write!(
        out,
        r#"<rect class="frame" x="1" y="28" width="{}" height="{}"/><text class="nd" x="{}" y="{}">no data for this period</text></svg>"#,
        w - 2,
        h - 30,
        w / 2 - 70,
        h / 2 + 10
    );
}

/// Width of a tick label's character, px (the page's 11 px sans-serif, a little generous).
const CHAR_W: f64 = 6.5;
/// The longest category label drawn whole.
const LABEL_MAX: usize = 40;

/// A "nice" axis maximum and tick step for values up to `max`.
pub fn nice(max: f64) -> (f64, f64) {
    if !max.is_finite() || max <= 0.0 {
        return (1.0, 0.25);
    }
    let raw = max / 4.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0].iter().map(|m| m * mag).find(|s| *s >= raw).unwrap_or(10.0 * mag);
    ((max / step).ceil() * step, step)
}

/// Short number: 12.3k, 4.5M.
pub fn short(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if a >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else if a >= 10.0 || a == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

fn legend(out: &mut String, series: &[(&str, &str)], x0: f64, y: f64) {
    let mut x = x0;
    for (name, color) in series {
        let _ = write!(
            out,
            r#"<rect x="{x:.1}" y="{:.1}" width="10" height="10" fill="{}"/><text class="lg" x="{:.1}" y="{:.1}">{}</text>"#,
            y - 9.0,
            esc(color),
            x + 14.0,
            y,
            esc(name)
        );
        // 11 px sans-serif: about 6.2 px a character, so eight parts of the gap fit in 900 px.
        x += 20.0 + 6.2 * name.chars().count() as f64;
    }
}

/// Horizontal stacked bars: one bar per label, one segment per series.
pub fn stacked_bars(name: &str, title: &str, labels: &[String], series: &[Series], unit: &str) -> String {
    let w = 900u32;
    let bar = 18.0;
    let gap = 8.0;
    let top = 52.0;
    let left = 170.0;
    let right = 90.0;
    let h = (top + labels.len() as f64 * (bar + gap) + 40.0).max(120.0) as u32;
    let mut out = String::new();
    open(&mut out, name, title, w, h);
    let totals: Vec<f64> =
        (0..labels.len()).map(|i| series.iter().filter_map(|s| s.values.get(i).copied().flatten()).sum()).collect();
    let max = totals.iter().copied().fold(0.0, f64::max);
    if labels.is_empty() || max <= 0.0 {
        no_data(&mut out, w, h);
        return out;
    }
    let (axis, step) = nice(max);
    let span = f64::from(w) - left - right;
    let names: Vec<(&str, &str)> = series.iter().map(|s| (s.name.as_str(), s.color.as_str())).collect();
    // From the left edge, as the title: the gap's eight parts need the width.
    legend(&mut out, &names, 8.0, 40.0);
    let bottom = top + labels.len() as f64 * (bar + gap);
    let mut t = 0.0;
    while t <= axis + 1e-9 {
        let x = left + t / axis * span;
        let _ = write!(
            out,
            r#"<line class="grid" x1="{x:.1}" y1="{top:.1}" x2="{x:.1}" y2="{bottom:.1}"/><text class="tick" x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            bottom + 14.0,
            short(t)
        );
        t += step;
    }
    let _ = write!(
        out,
        r#"<text class="tick" x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
        left - 6.0,
        bottom + 14.0,
        esc(unit)
    );
    for (i, label) in labels.iter().enumerate() {
        let y = top + i as f64 * (bar + gap);
        let shown: String = label.chars().take(24).collect();
        let _ = write!(
            out,
            r#"<text class="lb" x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            left - 6.0,
            y + 13.0,
            esc(&shown)
        );
        let mut x = left;
        for s in series {
            let v = s.values.get(i).copied().flatten().unwrap_or(0.0);
            if v <= 0.0 {
                continue;
            }
            let wd = v / axis * span;
            let _ = write!(
                out,
                r#"<rect x="{x:.2}" y="{y:.1}" width="{wd:.2}" height="{bar}" fill="{}"><title>{}: {} {}</title></rect>"#,
                esc(&s.color),
                esc(&format!("{label} {}", s.name)),
                short(v),
                esc(unit)
            );
            x += wd;
        }
        let _ = write!(out, r#"<text class="val" x="{:.1}" y="{:.1}">{}</text>"#, x + 4.0, y + 13.0, short(totals[i]));
    }
    out.push_str("</svg>");
    out
}

/// A line chart over `x_labels` (shown sparsely), values from 0 to `y_max` (or the data's maximum).
pub fn lines(
    name: &str,
    title: &str,
    x_labels: &[String],
    series: &[Series],
    y_max: Option<f64>,
    y_fmt: fn(f64) -> String,
    size: (u32, u32),
) -> String {
    lines_marked(name, title, x_labels, series, y_max, None, y_fmt, size)
}

/// [`lines`] whose axis goes below zero when a value does (a budget overspent), with an optional
/// dashed horizontal `mark` at a value and its label (the budget line).
#[expect(clippy::too_many_arguments, reason = "a chart's knobs, each named at the call")]
pub fn lines_marked(
    name: &str,
    title: &str,
    x_labels: &[String],
    series: &[Series],
    y_max: Option<f64>,
    mark: Option<(f64, &str)>,
    y_fmt: fn(f64) -> String,
    size: (u32, u32),
) -> String {
    let (w, h) = size;
    let (left, right, top, bottom_pad) = (56.0, 16.0, 48.0, 28.0);
    let mut out = String::new();
    open(&mut out, name, title, w, h);
    let data = || series.iter().flat_map(|s| s.values.iter().flatten().copied());
    let max = y_max.unwrap_or_else(|| data().fold(0.0, f64::max)).max(data().fold(0.0, f64::max));
    let min = data().fold(0.0, f64::min);
    let any = series.iter().any(|s| s.values.iter().flatten().count() > 0);
    if x_labels.is_empty() || !any {
        no_data(&mut out, w, h);
        return out;
    }
    // The axis covers [lo, hi]: 0 to the maximum, and below 0 in whole steps when a value is.
    let (_, step) = nice(max - min);
    let hi = if max > 0.0 { (max / step - 1e-9).ceil() * step } else { step };
    let lo = if min < 0.0 { (min / step + 1e-9).floor() * step } else { 0.0 };
    let plot_w = f64::from(w) - left - right;
    let bottom = f64::from(h) - bottom_pad;
    let plot_h = bottom - top;
    let n = x_labels.len();
    let xp = |i: usize| if n <= 1 { left + plot_w / 2.0 } else { left + i as f64 / (n - 1) as f64 * plot_w };
    let yp = |v: f64| bottom - ((v - lo) / (hi - lo)).clamp(0.0, 1.0) * plot_h;
    let names: Vec<(&str, &str)> = series.iter().map(|s| (s.name.as_str(), s.color.as_str())).collect();
    legend(&mut out, &names, left, 36.0);
    if let Some((v, label)) = mark {
        let y = yp(v);
        let _ = write!(
            out,
            r##"<line class="mark" x1="{left:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#c62828" stroke-dasharray="5,3"/><text class="tick" x="{:.1}" y="{:.1}" text-anchor="end" fill="#c62828">{}</text>"##,
            left + plot_w,
            left + plot_w,
            y - 4.0,
            esc(label)
        );
    }
    let axis = hi;
    let mut t = lo;
    while t <= axis + 1e-9 {
        let y = yp(t);
        let _ = write!(
            out,
            r#"<line class="grid" x1="{left:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}"/><text class="tick" x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            left + plot_w,
            left - 4.0,
            y + 4.0,
            esc(&y_fmt(t))
        );
        t += step;
    }
    let every = (n / 6).max(1);
    for (i, l) in x_labels.iter().enumerate() {
        if i % every == 0 || i + 1 == n {
            let _ = write!(
                out,
                r#"<text class="tick" x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                xp(i),
                bottom + 16.0,
                esc(l)
            );
        }
    }
    for s in series {
        // Gaps split the line into runs; a lone point is a dot.
        let mut run: Vec<(f64, f64)> = Vec::new();
        let flush = |run: &mut Vec<(f64, f64)>, out: &mut String| {
            match run.len() {
                0 => {}
                1 => {
                    let _ = write!(
                        out,
                        r#"<circle cx="{:.1}" cy="{:.1}" r="2.5" fill="{}"/>"#,
                        run[0].0,
                        run[0].1,
                        esc(&s.color)
                    );
                }
                _ => {
                    let pts: Vec<String> = run.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
                    let _ = write!(
                        out,
                        r#"<polyline fill="none" stroke="{}" stroke-width="2" points="{}"/>"#,
                        esc(&s.color),
                        pts.join(" ")
                    );
                }
            }
            run.clear();
        };
        for (i, v) in s.values.iter().enumerate() {
            match v {
                Some(v) => run.push((xp(i), yp(*v))),
                None => flush(&mut run, &mut out),
            }
        }
        flush(&mut run, &mut out);
    }
    out.push_str("</svg>");
    out
}

/// Grouped vertical bars: one group per category, one bar per series.
pub fn grouped_bars(name: &str, title: &str, categories: &[String], series: &[Series], unit: &str) -> String {
    let w = 900u32;
    let (left, right, top) = (64.0, 16.0, 52.0);
    // Labels fit: horizontal when the longest fits its group, else turned 40° with room made below
    // the axis for the longest (up to LABEL_MAX characters; a longer one ends in `…`, whole in its
    // tooltip). They used to be cut at 14 characters.
    let group_w = (f64::from(w) - left - right) / categories.len().max(1) as f64;
    let longest = categories.iter().map(|c| c.chars().count()).max().unwrap_or(0).min(LABEL_MAX);
    let turned = longest as f64 * CHAR_W > group_w;
    let below = if turned { longest as f64 * CHAR_W * 0.643 + 24.0 } else { 0.0 };
    let bottom_pad = 56.0 + below;
    let h = 284 + bottom_pad.ceil() as u32;
    let mut out = String::new();
    open(&mut out, name, title, w, h);
    let max = series.iter().flat_map(|s| s.values.iter().flatten().copied()).fold(0.0, f64::max);
    if categories.is_empty() || max <= 0.0 {
        no_data(&mut out, w, h);
        return out;
    }
    let (axis, step) = nice(max);
    let plot_w = f64::from(w) - left - right;
    let bottom = f64::from(h) - bottom_pad;
    let plot_h = bottom - top;
    let names: Vec<(&str, &str)> = series.iter().map(|s| (s.name.as_str(), s.color.as_str())).collect();
    legend(&mut out, &names, left, 40.0);
    let mut t = 0.0;
    while t <= axis + 1e-9 {
        let y = bottom - t / axis * plot_h;
        let _ = write!(
            out,
            r#"<line class="grid" x1="{left:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}"/><text class="tick" x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            left + plot_w,
            left - 4.0,
            y + 4.0,
            short(t)
        );
        t += step;
    }
    let group_w = plot_w / categories.len() as f64;
    let bar_w = (group_w * 0.8 / series.len().max(1) as f64).min(40.0);
    for (c, cat) in categories.iter().enumerate() {
        let gx = left + c as f64 * group_w + (group_w - bar_w * series.len() as f64) / 2.0;
        for (k, s) in series.iter().enumerate() {
            let Some(v) = s.values.get(c).copied().flatten() else { continue };
            let bh = v / axis * plot_h;
            let _ = write!(
                out,
                r#"<rect x="{:.2}" y="{:.2}" width="{bar_w:.2}" height="{bh:.2}" fill="{}"><title>{}: {} {}</title></rect>"#,
                gx + k as f64 * bar_w,
                bottom - bh,
                esc(&s.color),
                esc(&format!("{cat} {}", s.name)),
                short(v),
                esc(unit)
            );
        }
        let shown: String = if cat.chars().count() > LABEL_MAX {
            cat.chars().take(LABEL_MAX - 1).chain(std::iter::once('…')).collect()
        } else {
            cat.clone()
        };
        let x = left + (c as f64 + 0.5) * group_w;
        if turned {
            let y = bottom + 12.0;
            let _ = write!(
                out,
                r#"<text class="tick" x="{x:.1}" y="{y:.1}" text-anchor="end" transform="rotate(-40 {x:.1} {y:.1})"><title>{}</title>{}</text>"#,
                esc(cat),
                esc(&shown)
            );
        } else {
            let _ = write!(
                out,
                r#"<text class="tick" x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                bottom + 16.0,
                esc(&shown)
            );
        }
    }
    let _ = write!(out, r#"<text class="tick" x="{left:.1}" y="{:.1}">{}</text>"#, bottom + 36.0 + below, esc(unit));
    out.push_str("</svg>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burn_down_goes_below_zero_and_marks_the_budget() {
        // 6,000 budgeted, 8,023 spent: the line ends at -2,023, under the dashed budget line at 0.
        let s =
            Series { name: "p".into(), color: "#123".into(), values: vec![Some(6000.0), Some(1000.0), Some(-2023.0)] };
        let svg = lines_marked(
            "b",
            "t",
            &["d1".into(), "d2".into(), "d3".into()],
            &[s],
            Some(6000.0),
            Some((0.0, "budget spent")),
            short,
            (440, 200),
        );
        assert!(svg.contains(">-2.5k<") || svg.contains(">-4.0k<"), "a tick below zero: {svg}");
        assert!(svg.contains("class=\"mark\"") && svg.contains(">budget spent<"), "{svg}");
        // The last point is below the budget line's y.
        let y_of = |needle: &str| -> f64 {
            let i = svg.find(needle).unwrap() + needle.len();
            svg[i..].split('"').next().unwrap().parse().unwrap()
        };
        let mark_y = y_of("class=\"mark\" x1=\"56.0\" y1=\"");
        let pts = svg.split("points=\"").nth(1).unwrap().split('"').next().unwrap();
        let last_y: f64 = pts.split(' ').next_back().unwrap().split(',').nth(1).unwrap().parse().unwrap();
        assert!(last_y > mark_y, "{last_y} below {mark_y} on screen");
    }

    #[test]
    fn bar_labels_fit_their_group_or_turn() {
        let s = Series { name: "on demand".into(), color: "#123".into(), values: vec![Some(1.0); 6] };
        let cats: Vec<String> = (0..6).map(|i| format!("llm-7b-sft-long-context × 8 H100 #{i}")).collect();
        let g = grouped_bars("g", "t", &cats, std::slice::from_ref(&s), "CNY");
        // Six 33-character labels cannot sit side by side in 900 px: turned, whole, with room below.
        assert_eq!(g.matches("rotate(-40").count(), 6, "{g}");
        assert!(g.contains(">llm-7b-sft-long-context × 8 H100 #5</text>"), "{g}");
        let h: f64 = g.split("height=\"").nth(1).unwrap().split('"').next().unwrap().parse().unwrap();
        assert!(h > 340.0, "taller for the labels: {h}");
        // Short ones stay flat and whole.
        let g = grouped_bars("g", "t", &["nlp".into(), "vision".into()], &[s], "CNY");
        assert!(!g.contains("rotate(") && g.contains(">vision</text>"), "{g}");
    }

    #[test]
    fn nice_axes() {
        assert_eq!(nice(0.0), (1.0, 0.25));
        assert_eq!(nice(1.0), (1.0, 0.25));
        assert_eq!(nice(97.0), (100.0, 25.0));
        assert_eq!(nice(1234.0), (1500.0, 500.0));
    }

    #[test]
    fn charts_escape_labels_and_draw_something() {
        let s = Series { name: "prod".into(), color: "#123".into(), values: vec![Some(3.0), Some(1.0)] };
        let svg = stacked_bars("x", "t<1>", &["a&b".into(), "c".into()], std::slice::from_ref(&s), "GPU-h");
        assert!(svg.contains("a&amp;b") && svg.contains("t&lt;1&gt;"));
        assert_eq!(svg.matches("<rect x=").count(), 2 + 1, "two bars and a legend swatch");
        let empty = stacked_bars("x", "t", &[], &[], "GPU-h");
        assert!(empty.contains("no data"));
        let l = lines(
            "l",
            "t",
            &["d1".into(), "d2".into(), "d3".into()],
            &[Series { values: vec![Some(0.5), None, Some(0.2)], ..s.clone() }],
            Some(1.0),
            |v| format!("{v}"),
            (400, 200),
        );
        assert_eq!(l.matches("<circle").count(), 2, "a gap splits the line into two dots");
        let g = grouped_bars("g", "t", &["p".into()], &[s], "CNY");
        assert!(g.contains("<rect x=") && g.ends_with("</svg>"));
    }
}
