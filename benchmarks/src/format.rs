//! How the suite writes numbers, in the report and in the notes scenarios attach to their
//! figures: thousands separated by commas, milliseconds, ratios, percentages.

/// 12345.6 → "12,346".
pub fn int(v: f64) -> String {
    let s = format!("{:.0}", v.abs());
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    if v < 0.0 && out != "0" {
        out.insert(0, '-');
    }
    out
}

/// `f(v)`, or a dash when there is no figure.
pub fn opt(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map_or_else(|| "–".into(), f)
}

/// 1.234 → "1.23×".
pub fn ratio(v: f64) -> String {
    format!("{v:.2}×")
}

/// Milliseconds, with two decimals below 10 ms and one above.
pub fn ms(v: f64) -> String {
    if v < 10.0 {
        format!("{v:.2} ms")
    } else {
        format!("{v:.1} ms")
    }
}

/// CPU seconds (per 1,000 jobs, say).
pub fn cpu(v: f64) -> String {
    format!("{v:.3}")
}

/// 0.754 → "75%".
pub fn percent(v: f64) -> String {
    format!("{:.0}%", v * 100.0)
}

/// Two decimals below 10, a whole number with separators above; 0 as "0".
pub fn small(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v.abs() < 10.0 {
        format!("{v:.2}")
    } else {
        int(v)
    }
}

/// Bytes as MiB with one decimal.
pub fn mib(bytes: i64) -> String {
    format!("{:.1}", bytes as f64 / (1024.0 * 1024.0))
}

#[cfg(test)]
mod tests {
    use super::{int, ms, small};

    #[test]
    fn numbers_read_as_the_report_writes_them() {
        assert_eq!(int(12345.6), "12,346");
        assert_eq!(int(999.0), "999");
        assert_eq!(int(-1234.0), "-1,234");
        assert_eq!(int(-0.2), "0");
        assert_eq!(ms(1.234), "1.23 ms");
        assert_eq!(ms(12.34), "12.3 ms");
        assert_eq!(small(0.0), "0");
        assert_eq!(small(2.5), "2.50");
        assert_eq!(small(2500.0), "2,500");
    }
}
