//! Human-readable durations: `250ms`, `1500ms`, `30s`, `1.5s`, `2m`, `1h30m`, `1d`.

use std::time::Duration;

/// Parses a duration made of one or more `<number><unit>` parts, with units `ms`, `s`,
/// `m`, `h` and `d`; numbers may have a fractional part (`1.5s`). A bare number is
/// refused: `30` could mean seconds or milliseconds.
pub fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("empty duration; use e.g. 250ms, 30s, 2m".into());
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("{text:?}: missing unit (ms, s, m, h or d), e.g. {text}s"))?;
        let (number, after) = rest.split_at(number_len);
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_len);
        if number.is_empty() || number.matches('.').count() > 1 || number == "." {
            return Err(format!(
                "{text:?}: not a duration; use e.g. 250ms, 30s, 2m, 1h30m"
            ));
        }
        let scale = match unit {
            "ms" => 0.001,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "d" => 86_400.0,
            _ => {
                return Err(format!(
                    "{text:?}: unknown unit {unit:?}; use ms, s, m, h or d"
                ))
            }
        };
        let value: f64 = number
            .parse()
            .map_err(|_| format!("{text:?}: not a duration; use e.g. 250ms, 30s, 2m"))?;
        let part = Duration::try_from_secs_f64(value * scale)
            .map_err(|_| format!("{text:?}: too long"))?;
        total = total
            .checked_add(part)
            .ok_or_else(|| format!("{text:?}: too long"))?;
        rest = next;
    }
    Ok(total)
}

/// Formats a duration the way [`parse`] reads it, e.g. `1.5s`, `250ms`.
pub fn format(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{}ms", d.as_millis())
    } else {
        let secs = d.as_secs_f64();
        let text = format!("{secs:.3}");
        format!("{}s", text.trim_end_matches('0').trim_end_matches('.'))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn parses_the_documented_forms() {
        assert_eq!(parse("250ms").unwrap(), ms(250));
        assert_eq!(parse("1500ms").unwrap(), ms(1500));
        assert_eq!(parse("30s").unwrap(), ms(30_000));
        assert_eq!(parse("1.5s").unwrap(), ms(1500));
        assert_eq!(parse("2m").unwrap(), ms(120_000));
        assert_eq!(parse("1h30m").unwrap(), ms(5_400_000));
        assert_eq!(parse("1d").unwrap(), ms(86_400_000));
        assert_eq!(parse(" 0s ").unwrap(), Duration::ZERO);
    }

    #[test]
    fn refuses_malformed_input() {
        for bad in [
            "",
            "30",
            "s",
            "ms",
            "1.2.3s",
            "5x",
            "-1s",
            "1 s",
            "1sec",
            "1h 30m",
            ".s",
            "1e9s",
            "99999999999999999999d",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn formats_round_trip() {
        for d in [ms(0), ms(250), ms(1000), ms(1500), ms(30_000), ms(123_456)] {
            assert_eq!(parse(&format(d)).unwrap(), d);
        }
    }
}
