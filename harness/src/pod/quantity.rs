//! Kubernetes resource quantities, compared by value as the API machinery's `Quantity.Cmp`
//! does: an API server may write a request back in its canonical form (`1024Mi` as `1Gi`,
//! `1073741824` as `1Gi`), which changes nothing, while `1G` (10^9) is not `1Gi` (2^30).
//!
//! The grammar is the documented one of `k8s.io/apimachinery/pkg/api/resource`
//! (`quantity.go`, `suffix.go`): an optionally signed decimal number (`12`, `1.5`, `.5`,
//! `5.`), then a binary SI suffix (`Ki` .. `Ei`), a decimal SI suffix (`n`, `u`, `m`, none,
//! `k`, `M`, `G`, `T`, `P`, `E`) or a decimal exponent (`e3`, `E-2`). Like `ParseQuantity`,
//! non-zero values are rounded up (away from zero) to a precision of 10^-9. Not mirrored,
//! as no claim size an API server writes back needs them: the cap of huge binary values at
//! 2^63-1, and the scanner's leniency towards a missing number (Go reads `Gi` as zero; here
//! it is no quantity). Values whose digits do not fit 128 bits are not parsed.

/// A quantity's exact value, `±digits × 10^exponent`, normalised (no trailing zeros in
/// `digits`; zero is `+0 × 10^0`) so that equal values compare equal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quantity {
    negative: bool,
    digits: u128,
    exponent: i32,
}

impl Quantity {
    fn normalised(negative: bool, mut digits: u128, mut exponent: i32) -> Self {
        if digits == 0 {
            return Quantity {
                negative: false,
                digits: 0,
                exponent: 0,
            };
        }
        while digits.is_multiple_of(10) {
            digits /= 10;
            exponent = exponent.saturating_add(1);
        }
        Quantity {
            negative,
            digits,
            exponent,
        }
    }
}

/// The smallest step a quantity keeps (nano), as a power of ten.
const MIN_EXPONENT: i32 = -9;

/// Parses a quantity; `None` when it is not one (or its digits overflow 128 bits).
pub fn parse(text: &str) -> Option<Quantity> {
    let text = text.trim();
    let (negative, rest) = match text.as_bytes().first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    let number_end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(number_end);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() || fraction.contains('.') {
        return None;
    }
    let mut digits: u128 = 0;
    for c in whole.chars().chain(fraction.chars()) {
        let digit = u128::from(c.to_digit(10)?);
        digits = digits.checked_mul(10)?.checked_add(digit)?;
    }
    let mut exponent = -i32::try_from(fraction.len()).ok()?;
    let binary = |power: u32| 1u128.checked_shl(10 * power);
    match suffix {
        "" => {}
        "n" => exponent -= 9,
        "u" => exponent -= 6,
        "m" => exponent -= 3,
        "k" => exponent += 3,
        "M" => exponent += 6,
        "G" => exponent += 9,
        "T" => exponent += 12,
        "P" => exponent += 15,
        "E" => exponent += 18,
        "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" => {
            let power = "KMGTPE".find(&suffix[..1])? as u32 + 1;
            digits = digits.checked_mul(binary(power)?)?;
        }
        _ => {
            let decimal = suffix
                .strip_prefix('e')
                .or_else(|| suffix.strip_prefix('E'))?;
            let unsigned = decimal
                .strip_prefix('-')
                .or_else(|| decimal.strip_prefix('+'))
                .unwrap_or(decimal);
            if unsigned.is_empty() || !unsigned.chars().all(|c| c.is_ascii_digit()) {
                return None;
            }
            exponent = exponent.checked_add(decimal.parse::<i32>().ok()?)?;
        }
    }
    let mut value = Quantity::normalised(negative, digits, exponent);
    if value.exponent < MIN_EXPONENT {
        // Round up (away from zero) to a multiple of 10^-9, as the API machinery does.
        let divisor = 10u128.checked_pow(value.exponent.abs_diff(MIN_EXPONENT));
        let (quotient, remainder) = match divisor {
            Some(d) => (value.digits / d, value.digits % d),
            // 10^39 and up exceed any u128: the value is below one step.
            None => (0, value.digits),
        };
        let rounded = quotient + u128::from(remainder != 0);
        value = Quantity::normalised(value.negative, rounded, MIN_EXPONENT);
    }
    Some(value)
}

/// Whether two quantities have the same value; text that does not parse is the same only
/// as the same text.
pub fn same(a: &str, b: &str) -> bool {
    match (parse(a), parse(b)) {
        (Some(a), Some(b)) => a == b,
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_and_decimal_units_compare_by_value() {
        assert!(same("1024Mi", "1Gi"));
        assert!(same("1073741824", "1Gi"));
        assert!(same("1Gi", "1048576Ki"));
        assert!(same("0.5Gi", "512Mi"));
        assert!(same("1000M", "1G"));
        assert!(same("1e9", "1G"));
        assert!(same("1E9", "1G"));
        assert!(same("1500m", "1.5"));
        assert!(same("+10Gi", "10Gi"));
        assert!(same("5.", "5"));
        assert!(same(".5", "500m"));
        assert!(same("0", "0Gi"));
        assert!(same("-0", "0"));
        assert!(same("1000n", "1u"));
        assert!(!same("1G", "1Gi"));
        assert!(!same("1Gi", "1Mi"));
        assert!(!same("-1Gi", "1Gi"));
        assert!(!same("1E", "1e"), "1E is 10^18; 1e is no quantity");
    }

    #[test]
    fn exa_and_exponent_are_told_apart() {
        assert_eq!(parse("1E"), parse("1000P"));
        assert_eq!(parse("1E3"), parse("1k"));
        assert_eq!(parse("2e-3"), parse("2m"));
    }

    #[test]
    fn precision_below_nano_rounds_up() {
        assert_eq!(parse("0.0000000001"), parse("1n"));
        assert_eq!(parse("1.0000000001"), parse("1000000001n"));
        assert_eq!(parse("-0.0000000001"), parse("-1n"));
        assert_eq!(parse("1e-60"), parse("1n"));
    }

    #[test]
    fn what_is_no_quantity_is_refused() {
        for text in [
            "", "Gi", "1.2.3", "1GB", "1gi", "1e", "1e+", "1 Gi", "--1", "1Ki2", "0x10", "1.5.Gi",
        ] {
            assert_eq!(parse(text), None, "{text:?}");
        }
        assert!(same("weird", "weird"));
        assert!(!same("weird", "1Gi"));
    }

    #[test]
    fn big_values_are_exact_or_refused() {
        assert!(same("8Ei", "9223372036854775808"));
        assert!(same("1e30", "1000000000000000000000000000000"));
        assert_eq!(parse("1000000000000000000000000000000000000000"), None);
    }
}
