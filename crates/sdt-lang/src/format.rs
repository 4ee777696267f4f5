//! `printf` formats: parsed once when the script is checked, rendered in
//! user space for each record.
//!
//! The conversions are C's, as bpftrace takes them: `%d %i %u %x %X %o
//! %c %p %s`, bpftrace's `%r` for buffers, the flags `- 0 + space #`, a
//! width, a precision, and the length modifiers `hh h l ll z j t`, which
//! change nothing because every integer arrives as 64 bits with its sign
//! known. Rendering is done here rather than through libc's `printf` so
//! that a format from a script can never read memory it should not.

use std::borrow::Cow;
use std::fmt::Write as _;

/// One piece of a format.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece {
    Literal(Vec<u8>),
    Conv(Spec),
}

/// A conversion specification.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spec {
    pub left: bool,
    pub zero: bool,
    pub plus: bool,
    pub space: bool,
    pub alternate: bool,
    pub width: Option<usize>,
    pub precision: Option<usize>,
    /// Bytes of the integer the conversion reads: 4 by default as in C,
    /// 8 with `l`, `ll`, `z`, `j` or `t`, 2 with `h`, 1 with `hh`.
    pub int_bytes: u8,
    pub conv: Conv,
}

impl Spec {
    /// `%d`: no flags, width or precision, a C `int`; what parsing a
    /// conversion starts from.
    const PLAIN: Spec = Spec {
        left: false,
        zero: false,
        plus: false,
        space: false,
        alternate: false,
        width: None,
        precision: None,
        int_bytes: 4,
        conv: Conv::Signed,
    };
}

/// What a conversion prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Conv {
    /// `%d`, `%i`
    Signed,
    /// `%u`
    Unsigned,
    /// `%x`
    Hex,
    /// `%X`
    HexUpper,
    /// `%o`
    Octal,
    /// `%c`
    Char,
    /// `%p`
    Pointer,
    /// `%s`
    Str,
    /// `%r`: a buffer, printable bytes as they are and the others as
    /// `\xNN`.
    Raw,
    /// `%rx`: a buffer, every byte as `\xNN`.
    RawHex,
    /// `%rh`: a buffer, every byte as two hex digits, separated by spaces.
    RawHexSpaced,
}

impl Conv {
    /// Whether the conversion takes an integer.
    pub fn wants_integer(self) -> bool {
        !matches!(
            self,
            Conv::Str | Conv::Raw | Conv::RawHex | Conv::RawHexSpaced
        )
    }

    /// Whether the conversion prints a buffer's bytes.
    pub fn is_raw(self) -> bool {
        matches!(self, Conv::Raw | Conv::RawHex | Conv::RawHexSpaced)
    }
}

/// A parsed format.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Format {
    pub text: Vec<u8>,
    pub pieces: Vec<Piece>,
}

impl Format {
    /// Parses a format; the error says what is wrong and at which byte.
    pub fn parse(text: &[u8]) -> Result<Format, (usize, String)> {
        let mut pieces = Vec::new();
        let mut literal = Vec::new();
        let mut i = 0;
        while i < text.len() {
            if text[i] != b'%' {
                literal.push(text[i]);
                i += 1;
                continue;
            }
            let start = i;
            i += 1;
            if text.get(i) == Some(&b'%') {
                literal.push(b'%');
                i += 1;
                continue;
            }
            let mut spec = Spec::PLAIN;
            while let Some(&c) = text.get(i) {
                match c {
                    b'-' => spec.left = true,
                    b'0' => spec.zero = true,
                    b'+' => spec.plus = true,
                    b' ' => spec.space = true,
                    b'#' => spec.alternate = true,
                    _ => break,
                }
                i += 1;
            }
            let number = |i: &mut usize| -> Option<usize> {
                let begin = *i;
                while text.get(*i).is_some_and(u8::is_ascii_digit) {
                    *i += 1;
                }
                std::str::from_utf8(&text[begin..*i]).ok()?.parse().ok()
            };
            if text.get(i) == Some(&b'*') {
                return Err((
                    i,
                    "`*` widths are not supported; write the width as a number".into(),
                ));
            }
            spec.width = number(&mut i);
            if text.get(i) == Some(&b'.') {
                i += 1;
                spec.precision = Some(number(&mut i).unwrap_or(0));
            }
            let mut h = 0;
            while let Some(&c @ (b'h' | b'l' | b'z' | b'j' | b't')) = text.get(i) {
                if c == b'h' {
                    h += 1;
                } else {
                    spec.int_bytes = 8;
                }
                i += 1;
            }
            if spec.int_bytes == 4 && h > 0 {
                spec.int_bytes = if h == 1 { 2 } else { 1 };
            }
            spec.conv = match text.get(i) {
                Some(b'd' | b'i') => Conv::Signed,
                Some(b'u') => Conv::Unsigned,
                Some(b'x') => Conv::Hex,
                Some(b'X') => Conv::HexUpper,
                Some(b'o') => Conv::Octal,
                Some(b'c') => Conv::Char,
                Some(b'p') => Conv::Pointer,
                Some(b's') => Conv::Str,
                Some(b'r') => match text.get(i + 1) {
                    Some(b'x') => {
                        i += 1;
                        Conv::RawHex
                    }
                    Some(b'h') => {
                        i += 1;
                        Conv::RawHexSpaced
                    }
                    _ => Conv::Raw,
                },
                Some(&c) => {
                    return Err((
                        i,
                        format!(
                        "`%{}` is not a conversion sdt knows; use %d %u %x %X %o %c %p %s or %r",
                        (c as char).escape_debug()
                    ),
                    ))
                }
                None => {
                    return Err((
                        start,
                        "the format ends in the middle of a `%` conversion".into(),
                    ))
                }
            };
            i += 1;
            if !literal.is_empty() {
                pieces.push(Piece::Literal(std::mem::take(&mut literal)));
            }
            pieces.push(Piece::Conv(spec));
        }
        if !literal.is_empty() {
            pieces.push(Piece::Literal(literal));
        }
        Ok(Format {
            text: text.to_vec(),
            pieces,
        })
    }

    /// Parses a format the way bpftrace 0.17 finds its conversions: only
    /// `%[-][WIDTH][.PRECISION][LENGTH]TYPE` is one, and any other `%` is
    /// text. Scripts written for bpftrace rely on that: SPDK's `sched.bt`
    /// prints `"busy:%2d% core_busy:%2d%\n"` with two values. (bpftrace
    /// then hands `% core_busy:%2d` to C's printf, which prints garbage;
    /// here the text is printed as written.) Never fails.
    pub fn parse_bpftrace(text: &[u8]) -> Format {
        let mut pieces = Vec::new();
        let mut literal = Vec::new();
        let mut i = 0;
        while i < text.len() {
            match (text[i] == b'%')
                .then(|| bpftrace_spec(&text[i + 1..]))
                .flatten()
            {
                Some((spec, len)) => {
                    if !literal.is_empty() {
                        pieces.push(Piece::Literal(std::mem::take(&mut literal)));
                    }
                    pieces.push(Piece::Conv(spec));
                    i += 1 + len;
                }
                None => {
                    literal.push(text[i]);
                    i += 1;
                }
            }
        }
        if !literal.is_empty() {
            pieces.push(Piece::Literal(literal));
        }
        Format {
            text: text.to_vec(),
            pieces,
        }
    }

    /// The conversions, in order.
    pub fn specs(&self) -> impl Iterator<Item = &Spec> {
        self.pieces.iter().filter_map(|p| match p {
            Piece::Conv(spec) => Some(spec),
            Piece::Literal(_) => None,
        })
    }

    /// Renders the format with `args`, one per conversion.
    pub fn render(&self, args: &[Arg<'_>], out: &mut Vec<u8>) {
        let mut args = args.iter();
        for piece in &self.pieces {
            match piece {
                Piece::Literal(bytes) => out.extend_from_slice(bytes),
                Piece::Conv(spec) => {
                    let arg = args.next().cloned().unwrap_or(Arg::Text(b""));
                    render_one(spec, &arg, out);
                }
            }
        }
    }
}

/// A bpftrace 0.17 conversion at the start of `text` (just after its
/// `%`): `-?[0-9]*(\.[0-9]+)?(hh|h|l|ll|j|z|t)?(s|r|rx|rh|c|d|u|o|x|X|p)`,
/// and how many bytes it takes.
fn bpftrace_spec(text: &[u8]) -> Option<(Spec, usize)> {
    let mut spec = Spec::PLAIN;
    let mut i = 0;
    if text.first() == Some(&b'-') {
        spec.left = true;
        i += 1;
    }
    let digits = |i: &mut usize| {
        let begin = *i;
        while text.get(*i).is_some_and(u8::is_ascii_digit) {
            *i += 1;
        }
        &text[begin..*i]
    };
    let width = digits(&mut i);
    if width.first() == Some(&b'0') {
        spec.zero = true;
    }
    spec.width = std::str::from_utf8(width).ok()?.parse().ok();
    if text.get(i) == Some(&b'.') {
        let mut j = i + 1;
        let precision = digits(&mut j);
        if !precision.is_empty() {
            spec.precision = std::str::from_utf8(precision).ok()?.parse().ok();
            i = j;
        }
    }
    for (length, bytes) in [
        (&b"hh"[..], 1),
        (b"h", 2),
        (b"ll", 8),
        (b"l", 8),
        (b"j", 8),
        (b"z", 8),
        (b"t", 8),
    ] {
        if text[i..].starts_with(length) {
            spec.int_bytes = bytes;
            i += length.len();
            break;
        }
    }
    spec.conv = match text.get(i)? {
        b'd' => Conv::Signed,
        b'u' => Conv::Unsigned,
        b'x' => Conv::Hex,
        b'X' => Conv::HexUpper,
        b'o' => Conv::Octal,
        b'c' => Conv::Char,
        b'p' => Conv::Pointer,
        b's' => Conv::Str,
        b'r' => match text.get(i + 1) {
            Some(b'x') => {
                i += 1;
                Conv::RawHex
            }
            Some(b'h') => {
                i += 1;
                Conv::RawHexSpaced
            }
            _ => Conv::Raw,
        },
        _ => return None,
    };
    Some((spec, i + 1))
}

/// A value to render.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Arg<'a> {
    Int {
        value: u64,
        signed: bool,
    },
    /// Text that is shown as it is (already escaped where needed).
    Text(&'a [u8]),
    Owned(Vec<u8>),
}

fn render_one(spec: &Spec, arg: &Arg<'_>, out: &mut Vec<u8>) {
    let body: Cow<'_, [u8]>;
    let mut sign = "";
    let mut numeric = false;
    match (spec.conv, arg) {
        (Conv::Str | Conv::Raw | Conv::RawHex | Conv::RawHexSpaced, Arg::Text(text)) => {
            body = Cow::Borrowed(precision_cut(text, spec.precision));
        }
        (Conv::Str | Conv::Raw | Conv::RawHex | Conv::RawHexSpaced, Arg::Owned(text)) => {
            body = Cow::Borrowed(precision_cut(text, spec.precision));
        }
        (Conv::Str | Conv::Raw | Conv::RawHex | Conv::RawHexSpaced, Arg::Int { value, signed }) => {
            body = Cow::Owned(if *signed {
                (*value as i64).to_string().into_bytes()
            } else {
                value.to_string().into_bytes()
            });
        }
        (conv, Arg::Int { value, signed }) => {
            numeric = true;
            // The conversion reads as many bytes as its length modifier
            // says, as C's printf does: `%d` of a 64-bit value shows its
            // low 32 bits.
            let (value, signed) = &narrow(*value, *signed, spec, conv);
            let mut text = String::new();
            match conv {
                Conv::Signed => {
                    let (negative, magnitude) = if *signed {
                        let v = *value as i64;
                        (v < 0, v.unsigned_abs())
                    } else {
                        (false, *value)
                    };
                    if negative {
                        sign = "-";
                    } else if spec.plus {
                        sign = "+";
                    } else if spec.space {
                        sign = " ";
                    }
                    let _ = write!(text, "{magnitude}");
                }
                Conv::Unsigned => {
                    let _ = write!(text, "{value}");
                }
                Conv::Hex => {
                    if spec.alternate && *value != 0 {
                        sign = "0x";
                    }
                    let _ = write!(text, "{value:x}");
                }
                Conv::HexUpper => {
                    if spec.alternate && *value != 0 {
                        sign = "0X";
                    }
                    let _ = write!(text, "{value:X}");
                }
                Conv::Octal => {
                    let _ = write!(text, "{value:o}");
                    if spec.alternate && !text.starts_with('0') {
                        text.insert(0, '0');
                    }
                }
                // glibc's spelling, which bpftrace shows: `(nil)` for 0.
                Conv::Pointer if *value == 0 => {
                    pad(spec, b"", b"(nil)", false, out);
                    return;
                }
                Conv::Pointer => {
                    sign = "0x";
                    let _ = write!(text, "{value:x}");
                }
                Conv::Char => {
                    pad(spec, b"", &[*value as u8], false, out);
                    return;
                }
                Conv::Str | Conv::Raw | Conv::RawHex | Conv::RawHexSpaced => {
                    unreachable!("handled above")
                }
            }
            if let Some(p) = spec.precision {
                if text.len() < p {
                    text.insert_str(0, &"0".repeat(p - text.len()));
                }
            }
            body = Cow::Owned(text.into_bytes());
        }
        (_, Arg::Text(text)) => body = Cow::Borrowed(text),
        (_, Arg::Owned(text)) => body = Cow::Borrowed(text),
    }
    let zero_pad = numeric && spec.zero && !spec.left && spec.precision.is_none();
    pad(spec, sign.as_bytes(), &body, zero_pad, out);
}

/// The integer a conversion reads from a 64-bit value.
fn narrow(value: u64, _signed: bool, spec: &Spec, conv: Conv) -> (u64, bool) {
    let bytes = match conv {
        Conv::Pointer => 8,
        Conv::Char => 1,
        _ => spec.int_bytes,
    };
    if bytes >= 8 {
        return (value, conv == Conv::Signed);
    }
    let shift = 64 - 8 * u32::from(bytes);
    match conv {
        Conv::Signed => ((((value << shift) as i64) >> shift) as u64, true),
        _ => ((value << shift) >> shift, false),
    }
}

fn precision_cut(text: &[u8], precision: Option<usize>) -> &[u8] {
    match precision {
        Some(p) if p < text.len() => &text[..p],
        _ => text,
    }
}

fn pad(spec: &Spec, prefix: &[u8], body: &[u8], zero_pad: bool, out: &mut Vec<u8>) {
    let len = prefix.len() + body.len();
    let fill = spec.width.unwrap_or(0).saturating_sub(len);
    if spec.left {
        out.extend_from_slice(prefix);
        out.extend_from_slice(body);
        out.resize(out.len() + fill, b' ');
    } else if zero_pad {
        out.extend_from_slice(prefix);
        out.resize(out.len() + fill, b'0');
        out.extend_from_slice(body);
    } else {
        out.resize(out.len() + fill, b' ');
        out.extend_from_slice(prefix);
        out.extend_from_slice(body);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(fmt: &str, args: &[Arg<'_>]) -> String {
        let format = Format::parse(fmt.as_bytes()).unwrap();
        let mut out = Vec::new();
        format.render(args, &mut out);
        String::from_utf8(out).unwrap()
    }

    fn int(v: i64) -> Arg<'static> {
        Arg::Int {
            value: v as u64,
            signed: true,
        }
    }

    fn uint(v: u64) -> Arg<'static> {
        Arg::Int {
            value: v,
            signed: false,
        }
    }

    #[test]
    fn integers_render_like_c() {
        let cases: &[(&str, &[Arg<'_>], &str)] = &[
            (
                "%d|%i|%u",
                &[int(-5), int(7), uint(u64::MAX)],
                "-5|7|4294967295",
            ),
            (
                "%ld|%lu|%lld",
                &[uint(u64::MAX - 15), int(-16), int(-1)],
                "-16|18446744073709551600|-1",
            ),
            (
                "%d %u %x",
                &[uint(1 << 32 | 5), int(-1), int(-1)],
                "5 4294967295 ffffffff",
            ),
            ("%hd %hhu", &[int(65535), int(257)], "-1 1"),
            (
                "%5d|%-5d|%05d|%+d|% d",
                &[int(42), int(42), int(-42), int(3), int(3)],
                "   42|42   |-0042|+3| 3",
            ),
            (
                "%x %X %#x %o %#o",
                &[uint(255), uint(255), uint(255), uint(8), uint(8)],
                "ff FF 0xff 10 010",
            ),
            ("%lx", &[uint(0xdead_beef_0000)], "deadbeef0000"),
            ("%p", &[uint(0x7ffd1234)], "0x7ffd1234"),
            ("%p|%7p", &[uint(0), uint(0)], "(nil)|  (nil)"),
            ("%.3d %8.3d", &[int(7), int(-7)], "007     -007"),
            (
                "%ld %lld %lu %hhd %hx %zu",
                &[int(1), int(2), uint(3), int(4), uint(5), uint(6)],
                "1 2 3 4 5 6",
            ),
            ("%d", &[uint(u64::MAX)], "-1"),
            ("%lu", &[int(-1)], "18446744073709551615"),
            ("%c%c", &[uint(72), uint(105)], "Hi"),
            ("%3c|", &[uint(65)], "  A|"),
        ];
        for (fmt, args, want) in cases {
            assert_eq!(render(fmt, args), *want, "{fmt}");
        }
    }

    #[test]
    fn strings_pad_and_cut() {
        assert_eq!(
            render(
                "[%s] [%8s] [%-8s] [%.3s]",
                &[
                    Arg::Text(b"abc"),
                    Arg::Text(b"abc"),
                    Arg::Text(b"abc"),
                    Arg::Text(b"abcdef")
                ]
            ),
            "[abc] [     abc] [abc     ] [abc]"
        );
        assert_eq!(render("100%% %s", &[Arg::Text(b"done")]), "100% done");
        assert_eq!(render("%s", &[int(-3)]), "-3");
    }

    #[test]
    fn bpftrace_conversions_only() {
        // SPDK's sched.bt: `% c` and a final `%` are text to bpftrace.
        let f = Format::parse_bpftrace(b"td_busy:%2d% core_busy:%2d%\n");
        assert_eq!(f.specs().count(), 2);
        let mut out = Vec::new();
        f.render(&[int(30), int(15)], &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "td_busy:30% core_busy:15%\n"
        );
        // What bpftrace takes: `-`, width, precision, length, type; not
        // `%i`, `%+d`, `% d` or `%#x`.
        let f = Format::parse_bpftrace(b"%-5d|%08.3lu|%hhx|%s|%rx|%i|%+d|% d|%#x|100%");
        let specs: Vec<_> = f.specs().collect();
        assert_eq!(specs.len(), 5);
        assert!(specs[0].left && specs[0].width == Some(5));
        assert!(specs[1].zero && specs[1].precision == Some(3) && specs[1].int_bytes == 8);
        assert_eq!(specs[2].int_bytes, 1);
        let mut out = Vec::new();
        f.render(
            &[int(1), uint(2), uint(255), Arg::Text(b"s"), Arg::Text(b"r")],
            &mut out,
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "1    |     002|ff|s|r|%i|%+d|% d|%#x|100%"
        );
        assert_eq!(specs[4].conv, Conv::RawHex);
    }

    #[test]
    fn buffers_print_raw_or_in_hex() {
        for parse in [Format::parse, |t: &[u8]| Ok(Format::parse_bpftrace(t))] {
            let f = parse(b"%r|%rx|%rh|%ry").unwrap();
            let convs: Vec<Conv> = f.specs().map(|s| s.conv).collect();
            assert_eq!(
                convs,
                [Conv::Raw, Conv::RawHex, Conv::RawHexSpaced, Conv::Raw]
            );
            assert!(convs.iter().all(|c| c.is_raw() && !c.wants_integer()));
        }
    }

    #[test]
    fn bad_formats_say_where() {
        let (at, why) = Format::parse(b"value %q").unwrap_err();
        assert_eq!(at, 7);
        assert!(why.contains("%q"), "{why}");
        assert!(Format::parse(b"trailing %").is_err());
        assert!(Format::parse(b"%*d").is_err());
        assert_eq!(Format::parse(b"%-08.3lld").unwrap().specs().count(), 1);
    }
}
