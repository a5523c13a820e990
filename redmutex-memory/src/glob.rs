//! Redis's glob patterns (`SCAN … MATCH`): `*`, `?`, `[abc]`, `[^a-z]`, and `\` to take
//! the next byte literally.

/// Whether `text` matches `pattern`, byte by byte, as Redis's `stringmatchlen` decides.
pub(crate) fn matches(pattern: &[u8], text: &[u8]) -> bool {
    match pattern.split_first() {
        None => text.is_empty(),
        Some((b'*', rest)) => {
            // Consecutive stars are one star.
            let rest = trim_stars(rest);
            rest.is_empty() || (0..=text.len()).any(|skip| matches(rest, &text[skip..]))
        }
        Some((b'?', rest)) => !text.is_empty() && matches(rest, &text[1..]),
        Some((b'[', rest)) => match (text.split_first(), class(rest)) {
            (Some((byte, text)), (set, rest)) => set.contains(*byte) && matches(rest, text),
            (None, _) => false,
        },
        Some((b'\\', rest)) if !rest.is_empty() => {
            text.first() == Some(&rest[0]) && matches(&rest[1..], &text[1..])
        }
        Some((literal, rest)) => text.first() == Some(literal) && matches(rest, &text[1..]),
    }
}

fn trim_stars(mut pattern: &[u8]) -> &[u8] {
    while let Some((b'*', rest)) = pattern.split_first() {
        pattern = rest;
    }
    pattern
}

/// A `[...]` class (after its `[`): what it matches, and the pattern after its `]` (an
/// unclosed class runs to the end of the pattern, as in Redis).
fn class(pattern: &[u8]) -> (Class, &[u8]) {
    let (negated, mut rest) = match pattern.split_first() {
        Some((b'^', rest)) => (true, rest),
        _ => (false, pattern),
    };
    let mut ranges = Vec::new();
    loop {
        match rest {
            [] => break,
            [b']', tail @ ..] => {
                rest = tail;
                break;
            }
            [b'\\', escaped, tail @ ..] => {
                ranges.push((*escaped, *escaped));
                rest = tail;
            }
            [low, b'-', high, tail @ ..] if *high != b']' => {
                ranges.push(((*low).min(*high), (*low).max(*high)));
                rest = tail;
            }
            [byte, tail @ ..] => {
                ranges.push((*byte, *byte));
                rest = tail;
            }
        }
    }
    (Class { negated, ranges }, rest)
}

struct Class {
    negated: bool,
    ranges: Vec<(u8, u8)>,
}

impl Class {
    fn contains(&self, byte: u8) -> bool {
        let inside = (self.ranges.iter()).any(|(low, high)| (*low..=*high).contains(&byte));
        inside != self.negated
    }
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn patterns_match_as_in_redis() {
        let cases: &[(&str, &str, bool)] = &[
            ("*", "", true),
            ("lock:*", "lock:a", true),
            ("lock:*", "lockx", false),
            ("a*b*c", "a-b-b-c", true),
            ("a*b*c", "a-b-b-", false),
            ("h?llo", "hello", true),
            ("h?llo", "hllo", false),
            ("h[ae]llo", "hallo", true),
            ("h[ae]llo", "hillo", false),
            ("h[^e]llo", "hallo", true),
            ("h[^e]llo", "hello", false),
            ("h[a-c]llo", "hbllo", true),
            ("h[c-a]llo", "hbllo", true),
            ("h[a-c]llo", "hdllo", false),
            ("a\\*b", "a*b", true),
            ("a\\*b", "axb", false),
            ("**x", "abx", true),
        ];
        for (pattern, text, expected) in cases {
            assert_eq!(
                matches(pattern.as_bytes(), text.as_bytes()),
                *expected,
                "{pattern} ~ {text}"
            );
        }
    }
}
