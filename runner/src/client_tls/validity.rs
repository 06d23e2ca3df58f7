//! The validity dates of a DER certificate (`tbsCertificate.validity`, RFC 5280 §4.1.2.5), read
//! with a few lines of DER so that a pinned certificate's dates are checked like any other's.

/// One DER element of `input`: (tag, contents, what follows).
fn element(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |a, &b| (a << 8) | usize::from(b));
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

/// The element of `input` with `tag`: (contents, what follows).
fn expect(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    match element(input)? {
        (t, contents, rest) if t == tag => Some((contents, rest)),
        _ => None,
    }
}

const SEQUENCE: u8 = 0x30;
const INTEGER: u8 = 0x02;
const VERSION: u8 = 0xa0;
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;

/// Days from 1970-01-01 to the civil date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// A `UTCTime` (`YYMMDDHHMMSSZ`) or `GeneralizedTime` (`YYYYMMDDHHMMSSZ`), as Unix seconds.
fn time(tag: u8, text: &[u8]) -> Option<i64> {
    let digits = text.strip_suffix(b"Z")?;
    if !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let number = |s: &[u8]| -> Option<i64> {
        s.iter()
            .try_fold(0i64, |a, &d| Some(a * 10 + i64::from(d - b'0')))
    };
    let (year, rest) = match (tag, digits.len()) {
        (UTC_TIME, 12) => {
            let yy = number(&digits[..2])?;
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, &digits[2..])
        }
        (GENERALIZED_TIME, 14) => (number(&digits[..4])?, &digits[4..]),
        _ => return None,
    };
    let field = |i: usize| number(&rest[i..i + 2]);
    let (month, day) = (field(0)?, field(2)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    Some(days_from_civil(year, month, day) * 86_400 + field(4)? * 3600 + field(6)? * 60 + field(8)?)
}

/// `notBefore` and `notAfter` of the certificate `der`, as Unix seconds; `None` when it cannot
/// be read.
pub fn validity(der: &[u8]) -> Option<(i64, i64)> {
    let (cert, _) = expect(der, SEQUENCE)?;
    let (tbs, _) = expect(cert, SEQUENCE)?;
    let mut rest = tbs;
    if let Some((_, after)) = expect(rest, VERSION) {
        rest = after;
    }
    let (_, rest) = expect(rest, INTEGER)?; // serialNumber
    let (_, rest) = expect(rest, SEQUENCE)?; // signature
    let (_, rest) = expect(rest, SEQUENCE)?; // issuer
    let (dates, _) = expect(rest, SEQUENCE)?;
    let (tag, not_before, rest) = element(dates)?;
    let not_before = time(tag, not_before)?;
    let (tag, not_after, _) = element(rest)?;
    Some((not_before, time(tag, not_after)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert(not_before: (i32, u8, u8), not_after: (i32, u8, u8)) -> Vec<u8> {
        let mut p = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        p.not_before = rcgen::date_time_ymd(not_before.0, not_before.1, not_before.2);
        p.not_after = rcgen::date_time_ymd(not_after.0, not_after.1, not_after.2);
        let key = rcgen::KeyPair::generate().unwrap();
        p.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn dates_of_utc_and_generalized_times() {
        // 2020-01-01 and 2049-12-31 (UTCTime), 2060-03-01 (GeneralizedTime).
        assert_eq!(
            validity(&cert((2020, 1, 1), (2049, 12, 31))),
            Some((1_577_836_800, 2_524_521_600))
        );
        assert_eq!(
            validity(&cert((1999, 2, 28), (2060, 3, 1))),
            Some((920_160_000, 2_845_324_800))
        );
    }

    #[test]
    fn what_is_not_a_certificate_has_no_dates() {
        assert_eq!(validity(b""), None);
        assert_eq!(validity(&[0x30, 0x82, 0xff]), None);
        let mut der = cert((2020, 1, 1), (2030, 1, 1));
        der.truncate(60);
        assert_eq!(validity(&der), None);
        assert_eq!(time(UTC_TIME, b"2001011200Z"), None);
        assert_eq!(time(UTC_TIME, b"201301000000Z"), None);
    }
}
