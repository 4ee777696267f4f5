//! A `tseries()` entry as bpftrace 0.24 to 0.26 draw it: each interval a
//! row with its local start time, a 53-column strip with `*` where its
//! value is between the least and the greatest value shown (`.` marks 0
//! when the values straddle it), and the value; an interval without a
//! value has `-`. Above and below, the least and greatest values.
//!
//! ```text
//!              8                                                  10
//! hh:mm:ss.ms  |___________________________________________________|
//! 10:00:00.500 |                         *                         | 9
//! 10:00:00.600 |                                                   | -
//!              v___________________________________________________v
//!              8                                                  10
//! ```

use std::fmt::Write as _;

use chrono::{Local, TimeZone};

/// Columns of the strip, its two ends included.
const STRIP: usize = 53;
/// The width the least value is left-aligned in.
const LEFT: usize = 21;

/// The drawing of one entry's intervals (`points`: each start, in
/// nanoseconds since the Unix epoch, with its value if it has one),
/// ending with a blank line.
pub fn series(points: &[(i128, Option<i64>)], out: &mut String) {
    let values: Vec<i64> = points.iter().filter_map(|(_, v)| *v).collect();
    let (Some(&low), Some(&high)) = (values.iter().min(), values.iter().max()) else {
        out.push_str("<no data>\n\n");
        return;
    };
    let (low, high) = if low == high {
        (low.saturating_sub(1), high.saturating_add(1))
    } else {
        (low, high)
    };
    let digits = fraction_digits(points);
    let label = match digits {
        0 => "hh:mm:ss",
        3 => "hh:mm:ss.ms",
        6 => "hh:mm:ss.μs",
        _ => "hh:mm:ss.ns",
    };
    let time_size = 8 + if digits > 0 { 1 + digits } else { 0 };
    let bounds = format!(
        "{:w$}{low:<LEFT$}{high:>right$}\n",
        "",
        w = time_size + 1,
        right = STRIP - LEFT
    );
    let rule = "_".repeat(STRIP - 2);
    out.push_str(&bounds);
    let _ = writeln!(out, "{label:<w$}|{rule}|", w = time_size + 1);
    for &(start, value) in points {
        let _ = write!(out, "{} ", time(start, digits));
        let mut strip = vec![' '; STRIP];
        strip[0] = '|';
        strip[STRIP - 1] = '|';
        let span = i128::from(high) - i128::from(low);
        if low < 0 && high > 0 {
            strip[column(0, low, span, STRIP as i128)] = '.';
        }
        match value {
            Some(v) => {
                strip[column(v, low, span, STRIP as i128 - 1)] = '*';
                out.extend(strip);
                let _ = writeln!(out, " {v}");
            }
            None => {
                out.extend(strip);
                out.push_str(" -\n");
            }
        }
    }
    let _ = writeln!(out, "{:time_size$} v{rule}v", "");
    out.push_str(&bounds);
    out.push('\n');
}

/// The column of `v` in a strip scaled `scale` columns from `low` to
/// `low + span`.
fn column(v: i64, low: i64, span: i128, scale: i128) -> usize {
    let at = scale * (i128::from(v) - i128::from(low)) / span;
    at.clamp(0, STRIP as i128 - 1) as usize
}

/// Digits of a second the times show: as many as the interval between
/// rows needs (none from a second up, milliseconds, microseconds, or
/// nanoseconds, also for a single row).
fn fraction_digits(points: &[(i128, Option<i64>)]) -> usize {
    let interval = match (points.first(), points.last()) {
        (Some(first), Some(last)) if points.len() > 1 => {
            (last.0 - first.0) / (points.len() as i128 - 1)
        }
        _ => 0,
    };
    match interval {
        i if i >= 1_000_000_000 => 0,
        i if i >= 1_000_000 => 3,
        i if i >= 1_000 => 6,
        _ => 9,
    }
}

/// `HH:MM:SS[.fraction]` of `ns` since the Unix epoch, in local time.
fn time(ns: i128, digits: usize) -> String {
    let seconds = ns.div_euclid(1_000_000_000);
    let nanos = ns.rem_euclid(1_000_000_000) as u32;
    let clock = match Local.timestamp_opt(seconds as i64, nanos).single() {
        Some(t) => t.format("%H:%M:%S").to_string(),
        None => "??:??:??".to_string(),
    };
    if digits == 0 {
        return clock;
    }
    let fraction = nanos / 10u32.pow(9 - digits as u32);
    format!("{clock}.{fraction:0digits$}")
}

/// `YYYY-MM-DD HH:MM:SS.nnnnnnnnn` of `ns` since the Unix epoch, in UTC,
/// as JSON gives an interval's start.
pub fn utc(ns: i128) -> String {
    let seconds = ns.div_euclid(1_000_000_000);
    let nanos = ns.rem_euclid(1_000_000_000) as u32;
    match chrono::Utc.timestamp_opt(seconds as i64, nanos).single() {
        Some(t) => t.format("%Y-%m-%d %H:%M:%S%.9f").to_string(),
        None => ns.to_string(),
    }
}
