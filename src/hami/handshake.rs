//! The liveness handshake, `hami.io/node-handshake` (hami-compat.md 3.4).
//!
//! The scheduler writes `Requesting_<2006-01-02 15:04:05>` (local time, no
//! zone); device plugins before v2.8.0 answered `Reported <Go time.String()>`
//! and the v2.4.0 to v2.7.x scheduler wrote `Deleted_<time>` when it gave a
//! node up. HAMi v2.4.0 wrote the `Requesting_` time as
//! `2006.01.02 15:04:05`; both layouts are read, the first is written.

use jiff::civil::DateTime;

use super::DecodeError;
use super::keys::NODE_HANDSHAKE;

/// A handshake annotation value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handshake {
    /// The scheduler asked the device plugin to report, at this (zone-less)
    /// time.
    Requesting(DateTime),
    /// The device plugin reported; the text after `Reported ` is kept as is.
    Reported(String),
    /// The node was given up; the text after `Deleted_` is kept as is.
    Deleted(String),
}

const REQUESTING: &str = "Requesting_";
const REPORTED: &str = "Reported ";
const DELETED: &str = "Deleted_";

fn err(piece: &str, problem: impl Into<String>) -> DecodeError {
    DecodeError::new(NODE_HANDSHAKE, piece, problem)
}

/// Decodes `hami.io/node-handshake`. A `Requesting_` time must be exactly
/// `YYYY-MM-DD hh:mm:ss` (or `YYYY.MM.DD hh:mm:ss`) and a valid date and
/// time; any other prefix is an error.
pub fn decode_handshake(value: &str) -> Result<Handshake, DecodeError> {
    if let Some(time) = value.strip_prefix(REQUESTING) {
        parse_time(time).map(Handshake::Requesting)
    } else if let Some(rest) = value.strip_prefix(REPORTED) {
        Ok(Handshake::Reported(rest.to_string()))
    } else if let Some(rest) = value.strip_prefix(DELETED) {
        Ok(Handshake::Deleted(rest.to_string()))
    } else {
        Err(err(
            value,
            "expected Requesting_<time>, Reported <time> or Deleted_<time>",
        ))
    }
}

/// Encodes a handshake value. A `Requesting` time is written with whole
/// seconds (fractions are dropped); only years 0000 to 9999 can be read back.
pub fn encode_handshake(h: &Handshake) -> String {
    match h {
        Handshake::Requesting(t) => format!(
            "{REQUESTING}{:04}-{:02}-{:02} {:02}:{:02}:{:02}",
            t.year(),
            t.month(),
            t.day(),
            t.hour(),
            t.minute(),
            t.second()
        ),
        Handshake::Reported(s) => format!("{REPORTED}{s}"),
        Handshake::Deleted(s) => format!("{DELETED}{s}"),
    }
}

/// Go's `time.DateTime` layout (`2006-01-02 15:04:05`), or v2.4.0's
/// `2006.01.02 15:04:05`; digits exactly as many as the layout has.
fn parse_time(text: &str) -> Result<DateTime, DecodeError> {
    let bad = |problem: &str| err(text, format!("Requesting_ time: {problem}"));
    let b = text.as_bytes();
    let shape_ok = b.len() == 19
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-' || *c == b'.',
            10 => *c == b' ',
            13 | 16 => *c == b':',
            _ => c.is_ascii_digit(),
        })
        && b.get(4) == b.get(7);
    if !shape_ok {
        return Err(bad("expected YYYY-MM-DD hh:mm:ss"));
    }
    let num = |from: usize, to: usize| -> i16 {
        text.get(from..to)
            .and_then(|s| s.parse().ok())
            .unwrap_or(-1)
    };
    let as_i8 = |v: i16| i8::try_from(v).unwrap_or(-1);
    DateTime::new(
        num(0, 4),
        as_i8(num(5, 7)),
        as_i8(num(8, 10)),
        as_i8(num(11, 13)),
        as_i8(num(14, 16)),
        as_i8(num(17, 19)),
        0,
    )
    .map_err(|e| bad(&format!("not a valid date and time: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::civil::date;

    fn decode_err(value: &str) -> DecodeError {
        crate::hami::expect_decode_error(value, decode_handshake(value), NODE_HANDSHAKE)
    }

    #[test]
    fn requesting_both_layouts() {
        let want = Handshake::Requesting(date(2024, 9, 28).at(15, 4, 5, 0));
        assert_eq!(
            decode_handshake("Requesting_2024-09-28 15:04:05").unwrap(),
            want
        );
        assert_eq!(
            decode_handshake("Requesting_2024.09.28 15:04:05").unwrap(),
            want
        );
        assert_eq!(encode_handshake(&want), "Requesting_2024-09-28 15:04:05");
    }

    #[test]
    fn reported_and_deleted_keep_their_text() {
        let v = "Reported 2024-09-28 15:04:05.123456789 +0800 CST m=+12.345";
        let h = decode_handshake(v).unwrap();
        assert_eq!(
            h,
            Handshake::Reported("2024-09-28 15:04:05.123456789 +0800 CST m=+12.345".into())
        );
        assert_eq!(encode_handshake(&h), v);
        let h = decode_handshake("Deleted_2024.09.28 15:04:05").unwrap();
        assert_eq!(h, Handshake::Deleted("2024.09.28 15:04:05".into()));
        assert_eq!(encode_handshake(&h), "Deleted_2024.09.28 15:04:05");
        assert_eq!(
            decode_handshake("Reported ").unwrap(),
            Handshake::Reported(String::new())
        );
        assert_eq!(
            decode_handshake("Deleted_").unwrap(),
            Handshake::Deleted(String::new())
        );
    }

    #[test]
    fn encode_pads_and_drops_fractions() {
        let h = Handshake::Requesting(date(7, 1, 2).at(3, 4, 5, 999));
        assert_eq!(encode_handshake(&h), "Requesting_0007-01-02 03:04:05");
    }

    #[test]
    fn errors() {
        let cases = [
            ("", ""),
            ("Reported", "Reported"),
            ("reported 2024", "reported 2024"),
            ("Requesting", "Requesting"),
            ("Deleted 2024", "Deleted 2024"),
            (
                " Requesting_2024-09-28 15:04:05",
                " Requesting_2024-09-28 15:04:05",
            ),
        ];
        for (value, piece) in cases {
            let e = decode_err(value);
            assert_eq!(e.piece, piece, "{value:?}");
        }
        let times = [
            "",
            "2024-09-28",
            "2024-09-28T15:04:05",
            "2024-09-28 15:04:05.5",
            "2024-09-28 15:04:05 ",
            "2024-9-28 15:04:05",
            "2024-09.28 15:04:05",
            "2024/09/28 15:04:05",
            "2024-09-28 15:04:5a",
            "+024-09-28 15:04:05",
            "2024-02-30 15:04:05",
            "2024-13-01 15:04:05",
            "2024-09-28 24:00:00",
            "2024-09-28 23:60:00",
            "2024-09-28 23:59:60",
            "２024-09-28 15:04:05",
        ];
        for t in times {
            let e = decode_err(&format!("Requesting_{t}"));
            assert_eq!(e.piece, t, "{t:?}");
            assert!(e.problem.starts_with("Requesting_ time"), "{t:?}: {e}");
        }
    }
}
