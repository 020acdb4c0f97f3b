//! The row format of the benchmark examples (feature `bench`), as `cargo xtask bench`
//! collects it.

/// Prints one benchmark row: a JSON object on its own stdout line. `ratio` is the
/// caller's, since benchmarks differ in which way a figure is compared.
pub fn bench_row(
    name: &str,
    value: f64,
    unit: &str,
    reference: Option<f64>,
    ratio: Option<f64>,
    target: Option<&str>,
    pass: Option<bool>,
) {
    println!(
        "{}",
        row_json(name, value, unit, reference, ratio, target, pass)
    );
}

/// [`bench_row`] with the usual ratio: value ÷ reference, when there is a positive
/// reference.
pub fn bench_row_against(
    name: &str,
    value: f64,
    unit: &str,
    reference: Option<f64>,
    target: Option<&str>,
    pass: Option<bool>,
) {
    let ratio = reference.filter(|r| *r > 0.0).map(|r| value / r);
    bench_row(name, value, unit, reference, ratio, target, pass);
}

fn row_json(
    name: &str,
    value: f64,
    unit: &str,
    reference: Option<f64>,
    ratio: Option<f64>,
    target: Option<&str>,
    pass: Option<bool>,
) -> serde_json::Value {
    serde_json::json!({
        "name": name, "value": value, "unit": unit, "reference": reference,
        "ratio": ratio, "target": target, "pass": pass,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_has_every_field_xtask_reads() {
        let row = row_json(
            "p50",
            1.5,
            "ms",
            Some(3.0),
            Some(0.5),
            Some("<= 2 ms"),
            Some(true),
        );
        assert_eq!(
            row,
            serde_json::json!({
                "name": "p50", "value": 1.5, "unit": "ms", "reference": 3.0,
                "ratio": 0.5, "target": "<= 2 ms", "pass": true,
            })
        );
        let bare = row_json("rss", 10.0, "KiB", None, None, None, None);
        assert!(
            bare["reference"].is_null() && bare["pass"].is_null(),
            "{bare}"
        );
    }
}
