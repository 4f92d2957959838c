//! Throughput charts as inline SVG: bars of completed (and failed) jobs per bucket, and a line
//! of enqueued jobs. No script draws them, so they render with the page.

use maud::{html, Markup};

/// Counts of one bucket: enqueued, completed, failed, retried.
pub type Bucket = [i64; 4];

/// Sums `minutes` (minute in epoch seconds, counts) into `buckets` buckets of `width`
/// seconds each, the last ending at `now` (epoch seconds).
pub fn bucketize(
    minutes: impl Iterator<Item = (i64, [i64; 4])>,
    now: i64,
    width: i64,
    buckets: usize,
) -> Vec<Bucket> {
    let mut out = vec![[0i64; 4]; buckets];
    let end = now - now.rem_euclid(width) + width;
    let start = end - width * buckets as i64;
    for (minute, counts) in minutes {
        if minute < start || minute >= end {
            continue;
        }
        let index = ((minute - start) / width) as usize;
        for (sum, count) in out[index].iter_mut().zip(counts) {
            *sum += count;
        }
    }
    out
}

/// A chart of `buckets`, titled, with the axis labels given.
pub fn chart(title: &str, buckets: &[Bucket], left: &str, right: &str, id: &str) -> Markup {
    let (w, h) = (600.0f64, 120.0f64);
    let max = buckets
        .iter()
        .map(|b| b[0].max(b[1] + b[2]))
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let step = w / buckets.len().max(1) as f64;
    let y = |v: i64| h - (v as f64 / max) * (h - 4.0);
    let line: Vec<String> = buckets
        .iter()
        .enumerate()
        .map(|(i, b)| format!("{:.1},{:.1}", i as f64 * step + step / 2.0, y(b[0])))
        .collect();
    let totals = buckets.iter().fold([0i64; 4], |mut t, b| {
        (0..4).for_each(|i| t[i] += b[i]);
        t
    });
    html! {
        figure.chart id=(id) {
            figcaption {
                (title) ": "
                span.done { (totals[1]) " completed" } ", "
                span.bad { (totals[2]) " failed" } ", "
                (totals[3]) " retried, "
                span.new { (totals[0]) " enqueued" }
                " (peak " (max as i64) " per bar)"
            }
            svg viewBox=(format!("0 0 {w} {}", h + 14.0)) role="img" aria-label=(title) {
                @for (i, b) in buckets.iter().enumerate() {
                    @let x = i as f64 * step + 0.5;
                    @let bar = (step - 1.0).max(0.5);
                    @if b[1] > 0 {
                        rect.done x=(format!("{x:.1}")) y=(format!("{:.1}", y(b[1] + b[2])))
                            width=(format!("{bar:.1}")) height=(format!("{:.1}", h - y(b[1]))) {}
                    }
                    @if b[2] > 0 {
                        rect.bad x=(format!("{x:.1}")) y=(format!("{:.1}", y(b[2])))
                            width=(format!("{bar:.1}")) height=(format!("{:.1}", h - y(b[2]))) {}
                    }
                }
                polyline.new points=(line.join(" ")) {}
                line.axis x1="0" y1=(h) x2=(w) y2=(h) {}
                text x="0" y=(h + 12.0) { (left) }
                text x=(w) y=(h + 12.0) text-anchor="end" { (right) }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minutes_fall_into_their_buckets() {
        let now = 3600 * 10 + 59;
        let minutes = vec![
            (3600 * 10, [1, 2, 3, 4]),
            (3600 * 10 - 60, [1, 1, 1, 1]),
            (3600 * 9, [5, 5, 5, 5]),
            (3600 * 8, [9, 9, 9, 9]),
        ];
        let buckets = bucketize(minutes.into_iter(), now, 60, 60);
        assert_eq!(buckets[59], [1, 2, 3, 4]);
        assert_eq!(buckets[58], [1, 1, 1, 1]);
        assert_eq!(
            buckets[0], [0; 4],
            "the minute an hour ago is out of the hour"
        );
        assert_eq!(buckets.iter().map(|b| b[0]).sum::<i64>(), 2);
    }
}
