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
    let row = serde_json::json!({
        "name": name, "value": value, "unit": unit, "reference": reference,
        "ratio": ratio, "target": target, "pass": pass,
    });
    println!("{row}");
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
