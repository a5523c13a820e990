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
        let unit_nanos: u128 = match unit {
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "d" => 86_400_000_000_000,
            _ => {
                return Err(format!(
                    "{text:?}: unknown unit {unit:?}; use ms, s, m, h or d"
                ))
            }
        };
        // Decimal arithmetic, not floating point: `1.001s` is exactly 1001 ms, and what
        // `format` prints reads back to the same duration at any size. Digits below a
        // nanosecond are dropped.
        let too_long = || format!("{text:?}: too long");
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        let mut nanos = parse_digits(whole)
            .and_then(|w| w.checked_mul(unit_nanos))
            .ok_or_else(too_long)?;
        let mut scale = unit_nanos;
        for digit in fraction.bytes() {
            scale /= 10;
            nanos = nanos
                .checked_add(u128::from(digit - b'0') * scale)
                .ok_or_else(too_long)?;
        }
        let part = u64::try_from(nanos / 1_000_000_000)
            .map(|secs| Duration::new(secs, (nanos % 1_000_000_000) as u32))
            .map_err(|_| too_long())?;
        total = total.checked_add(part).ok_or_else(too_long)?;
        rest = next;
    }
    Ok(total)
}

/// The value of a run of ASCII digits (`""` is 0), or `None` past `u128`.
fn parse_digits(digits: &str) -> Option<u128> {
    digits.bytes().try_fold(0u128, |n, d| {
        n.checked_mul(10)?.checked_add(u128::from(d - b'0'))
    })
}

/// Formats a duration the way [`parse`] reads it, e.g. `1.5s`, `250ms`.
pub fn format(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{}ms", d.as_millis())
    } else {
        // Whole milliseconds, in integers: exact at any size.
        let text = format!("{}.{:03}", d.as_secs(), d.subsec_millis());
        format!("{}s", text.trim_end_matches('0').trim_end_matches('.'))
    }
}

/// A relative time for people, to two units at most: `850ms`, `29s`, `3m12s`, `1h04m`,
/// `2d03h`.
pub fn human(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0 => format!("{}ms", d.as_millis()),
        1..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86_400, s % 86_400 / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_times_keep_two_units() {
        let text: Vec<String> = [850, 29_400, 192_000, 3_840_000, 183_600_000]
            .map(|n| human(ms(n)))
            .into();
        assert_eq!(text, ["850ms", "29s", "3m12s", "1h04m", "2d03h"]);
    }

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

    mod properties {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn any_text_is_read_or_refused_without_panic(
                text in prop_oneof![
                    r"\PC{0,24}",
                    r"[0-9.]{0,8}(ms|s|m|h|d|x|)([0-9.]{0,6}(ms|s|m|h|d))?",
                    r"[0-9]{20,45}(ms|s|d)",
                ]
            ) {
                if let Ok(d) = parse(&text) {
                    // Whatever is accepted has a digit and a unit.
                    prop_assert!(text.bytes().any(|b| b.is_ascii_digit()), "{text:?} → {d:?}");
                }
            }

            #[test]
            fn what_format_prints_reads_back_exactly(millis in 0u64..u64::MAX / 1_000_000) {
                let d = Duration::from_millis(millis);
                prop_assert_eq!(parse(&format(d)), Ok(d), "{}", format(d));
            }

            #[test]
            fn parts_add_up_exactly(
                d in 0u64..1000, h in 0u64..1000, m in 0u64..1000, s in 0u64..1000,
                ms in 0u64..1000, frac in 0u32..1000,
            ) {
                let text = format!("{d}d{h}h{m}m{s}.{frac:03}s{ms}ms");
                let expected = Duration::from_secs(d * 86_400 + h * 3600 + m * 60 + s)
                    + Duration::from_millis(u64::from(frac) + ms);
                prop_assert_eq!(parse(&text), Ok(expected), "{}", text);
            }
        }
    }
}
