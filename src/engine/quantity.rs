//! Kubernetes resource quantities read as whole numbers.
//!
//! GPU resources are counts, MiB and percentages: only whole, non-negative
//! numbers make sense. A quantity such as `1k` or `2Ki` is accepted when it
//! denotes a whole number; `0.5`, `500m` or `-1` are refused rather than
//! rounded (HAMi silently drops or clamps such values).

/// Why a quantity is not a usable whole number.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error("{0:?} is not a Kubernetes quantity")]
    Malformed(String),
    #[error("{0:?} is negative")]
    Negative(String),
    #[error("{0:?} is not a whole number")]
    NotInteger(String),
    #[error("{0:?} is too large")]
    TooLarge(String),
}

/// Parses a quantity string into a non-negative whole number.
pub fn parse_whole(text: &str) -> Result<u64, QuantityError> {
    parse_scaled(text, 0)
}

/// Parses a quantity string into thousandths (`9500m` and `9.5` give 9500;
/// a CPU count in millicores), refusing what is not a whole number of them.
pub fn parse_milli(text: &str) -> Result<u64, QuantityError> {
    parse_scaled(text, 3)
}

/// Whether a quantity is above zero, as Kubernetes' QoS rules ask
/// (`Quantity.Sign() == 1`): a number with a non-zero digit and no minus
/// sign, whatever its suffix (`500m`, `1Gi`, `1e3`). Text that is not a
/// quantity is not above zero.
pub fn is_positive(text: &str) -> bool {
    let s = text.trim();
    if s.starts_with('-') {
        return false;
    }
    let s = s.trim_start_matches('+');
    let number_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    s[..number_end].bytes().any(|b| (b'1'..=b'9').contains(&b))
}

/// The quantity times 10^`scale`, as a non-negative whole number.
fn parse_scaled(text: &str, scale: i32) -> Result<u64, QuantityError> {
    let s = text.trim();
    let malformed = || QuantityError::Malformed(text.to_string());
    let (sign_negative, s) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        Some(_) => (false, s),
        None => return Err(malformed()),
    };
    // Split number and suffix: the number is digits with at most one '.'.
    let num_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(num_end);
    if number.is_empty() || number == "." || number.matches('.').count() > 1 {
        return Err(malformed());
    }
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
    // Mantissa as an integer with `frac_len` decimal places.
    let digits: String = format!("{int_part}{frac_part}");
    let digits = digits.trim_start_matches('0');
    if digits.len() > 30 {
        return Err(QuantityError::TooLarge(text.to_string()));
    }
    let mantissa: u128 = if digits.is_empty() {
        0
    } else {
        digits.parse().map_err(|_| malformed())?
    };
    let frac_len = i32::try_from(frac_part.len()).map_err(|_| malformed())?;
    // (multiplier numerator, decimal exponent)
    let (binary, dec_exp): (u128, i32) = match suffix {
        "" => (1, 0),
        "n" => (1, -9),
        "u" => (1, -6),
        "m" => (1, -3),
        "k" => (1, 3),
        "M" => (1, 6),
        "G" => (1, 9),
        "T" => (1, 12),
        "P" => (1, 15),
        "E" => (1, 18),
        "Ki" => (1 << 10, 0),
        "Mi" => (1 << 20, 0),
        "Gi" => (1 << 30, 0),
        "Ti" => (1 << 40, 0),
        "Pi" => (1 << 50, 0),
        "Ei" => (1 << 60, 0),
        other => {
            let exp = other
                .strip_prefix('e')
                .or_else(|| other.strip_prefix('E'))
                .ok_or_else(malformed)?;
            let exp: i32 = exp.parse().map_err(|_| malformed())?;
            if !(-30..=30).contains(&exp) {
                return Err(QuantityError::TooLarge(text.to_string()));
            }
            (1, exp)
        }
    };
    if mantissa == 0 {
        return Ok(0);
    }
    if sign_negative {
        return Err(QuantityError::Negative(text.to_string()));
    }
    let too_large = || QuantityError::TooLarge(text.to_string());
    let mut value = mantissa.checked_mul(binary).ok_or_else(too_large)?;
    let exp = dec_exp - frac_len + scale;
    if exp >= 0 {
        let factor = 10u128
            .checked_pow(exp.unsigned_abs())
            .ok_or_else(too_large)?;
        value = value.checked_mul(factor).ok_or_else(too_large)?;
    } else {
        let divisor = 10u128
            .checked_pow(exp.unsigned_abs())
            .ok_or_else(|| QuantityError::NotInteger(text.to_string()))?;
        if value % divisor != 0 {
            return Err(QuantityError::NotInteger(text.to_string()));
        }
        value /= divisor;
    }
    u64::try_from(value).map_err(|_| too_large())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn millis() {
        for (text, n) in [
            ("16", 16_000),
            ("9500m", 9500),
            ("9.5", 9500),
            ("0", 0),
            ("1k", 1_000_000),
        ] {
            assert_eq!(parse_milli(text), Ok(n), "{text}");
        }
        assert!(matches!(
            parse_milli("1500u"),
            Err(QuantityError::NotInteger(_))
        ));
        assert!(matches!(parse_milli("-1"), Err(QuantityError::Negative(_))));
    }

    #[test]
    fn whole_numbers_and_suffixes() {
        for (text, n) in [
            ("0", 0),
            ("3000", 3000),
            (" 7 ", 7),
            ("+2", 2),
            ("1k", 1000),
            ("2Ki", 2048),
            ("1.5k", 1500),
            ("1000m", 1),
            ("1e3", 1000),
            ("1E2", 100),
            ("-0", 0),
            ("1.0", 1),
        ] {
            assert_eq!(parse_whole(text), Ok(n), "{text:?}");
        }
    }

    #[test]
    fn refusals() {
        use QuantityError::*;
        let kind = |e: QuantityError| match e {
            NotInteger(_) => "not an integer",
            Negative(_) => "negative",
            Malformed(_) => "malformed",
            TooLarge(_) => "too large",
        };
        for (text, want) in [
            ("0.5", "not an integer"),
            ("500m", "not an integer"),
            ("-1", "negative"),
            ("", "malformed"),
            ("abc", "malformed"),
            ("1.2.3", "malformed"),
            ("1x", "malformed"),
            (".", "malformed"),
            ("17Ei", "too large"),
            ("99999999999999999999999999999999999", "too large"),
            ("1e99", "too large"),
        ] {
            assert_eq!(parse_whole(text).map_err(kind), Err(want), "{text:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,24}") {
            let _ = parse_whole(&s);
        }

        #[test]
        fn plain_integers_round_trip(n in 0u64..u64::MAX) {
            proptest::prop_assert_eq!(parse_whole(&n.to_string()), Ok(n));
        }
    }

    #[test]
    fn positive_quantities() {
        for q in ["1", "500m", "0.5", "1Gi", "+2", "1e3", "0.001", " 3 "] {
            assert!(is_positive(q), "{q}");
        }
        for q in ["0", "0m", "0.0", "-1", "-500m", "", "abc", "0e3", "."] {
            assert!(!is_positive(q), "{q}");
        }
    }
}
