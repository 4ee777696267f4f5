//! Printing events as text lines or JSON objects.
//!
//! Output is the hot path of `sdt trace` (millions of events a second can
//! arrive), so each event is formatted into a reused buffer with `itoa`
//! rather than through `format!`, and written through one large
//! `BufWriter` that is flushed once per batch of events.
//!
//! Strings come from the traced process and must never reach the terminal
//! raw: printable UTF-8 is kept, everything else is escaped.

use std::io::{self, BufWriter, Write};

use sdt_runtime::event::{Event, Value};

/// Counts for the end of a trace.
#[derive(Clone, Copy, Debug, Default)]
pub struct Summary {
    /// Events delivered.
    pub events: u64,
    /// Events the ring buffer had no room for.
    pub lost: u64,
    /// Sites attached.
    pub sites: usize,
}

pub struct Printer {
    out: BufWriter<Box<dyn Write>>,
    json: bool,
    start_ns: u64,
    line: Vec<u8>,
    error: Option<io::Error>,
}

impl Printer {
    pub fn new(out: BufWriter<Box<dyn Write>>, json: bool) -> Printer {
        Printer {
            out,
            json,
            start_ns: monotonic_ns(),
            line: Vec::with_capacity(512),
            error: None,
        }
    }

    pub fn event(&mut self, event: &Event<'_>) {
        if self.error.is_some() {
            return;
        }
        self.line.clear();
        if self.json {
            json_event(&mut self.line, event);
        } else {
            text_event(&mut self.line, event, self.start_ns);
        }
        if let Err(err) = self.out.write_all(&self.line) {
            self.error = Some(err);
        }
    }

    pub fn summary(&mut self, summary: &Summary) {
        if self.json {
            let line = format!(
                "{{\"summary\":{{\"events\":{},\"lost\":{},\"sites\":{}}}}}\n",
                summary.events, summary.lost, summary.sites
            );
            if self.error.is_none() {
                if let Err(err) = self.out.write_all(line.as_bytes()) {
                    self.error = Some(err);
                }
            }
        } else {
            eprintln!(
                "sdt: {} events, {} lost, {} sites",
                summary.events, summary.lost, summary.sites
            );
        }
    }

    pub fn flush(&mut self) {
        if self.error.is_none() {
            if let Err(err) = self.out.flush() {
                self.error = Some(err);
            }
        }
    }

    /// Whether output failed, so that tracing should stop.
    pub fn broken(&self) -> bool {
        self.error.is_some()
    }

    pub fn error(&self) -> Option<&io::Error> {
        self.error.as_ref()
    }
}

fn text_event(line: &mut Vec<u8>, event: &Event<'_>, start_ns: u64) {
    let mut num = itoa::Buffer::new();
    let since = event.time_ns.saturating_sub(start_ns);
    let nanos = (since % 1_000_000_000) as u32;
    line.extend_from_slice(num.format(since / 1_000_000_000).as_bytes());
    line.push(b'.');
    let digits = num.format(nanos);
    line.extend(std::iter::repeat_n(b'0', 9 - digits.len()));
    line.extend_from_slice(digits.as_bytes());
    line.push(b' ');
    line.extend_from_slice(num.format(event.pid).as_bytes());
    line.push(b' ');
    line.extend_from_slice(num.format(event.tid).as_bytes());
    line.push(b' ');
    escape_text(line, event.comm, false);
    line.push(b' ');
    line.extend_from_slice(event.site.provider.as_bytes());
    line.push(b':');
    line.extend_from_slice(event.site.name.as_bytes());
    for (n, value) in event.args().enumerate() {
        line.extend_from_slice(b" arg");
        line.extend_from_slice(num.format(n).as_bytes());
        line.push(b'=');
        match value {
            Value::Unsigned(v) => line.extend_from_slice(num.format(v).as_bytes()),
            Value::Signed(v) => line.extend_from_slice(num.format(v).as_bytes()),
            Value::Float(v) => line.extend_from_slice(v.to_string().as_bytes()),
            Value::Str(Ok(bytes)) => {
                line.push(b'"');
                escape_text(line, bytes, true);
                line.push(b'"');
            }
            Value::Str(Err((errno, pointer))) => {
                line.extend_from_slice(
                    format!("<unreadable {pointer:#x}: error {errno}>").as_bytes(),
                );
            }
            Value::Unreadable => line.extend_from_slice(b"<unreadable>"),
        }
    }
    line.push(b'\n');
}

/// Appends `bytes`, keeping printable UTF-8 and escaping the rest.
fn escape_text(line: &mut Vec<u8>, bytes: &[u8], quoted: bool) {
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\n' => line.extend_from_slice(b"\\n"),
                '\t' => line.extend_from_slice(b"\\t"),
                '\r' => line.extend_from_slice(b"\\r"),
                '\\' => line.extend_from_slice(b"\\\\"),
                '"' if quoted => line.extend_from_slice(b"\\\""),
                ' ' if !quoted => line.extend_from_slice(b"\\x20"),
                c if c.is_control() => {
                    line.extend_from_slice(format!("\\u{{{:x}}}", c as u32).as_bytes())
                }
                c => {
                    let mut utf8 = [0; 4];
                    line.extend_from_slice(c.encode_utf8(&mut utf8).as_bytes());
                }
            }
        }
        for byte in chunk.invalid() {
            line.extend_from_slice(format!("\\x{byte:02x}").as_bytes());
        }
    }
}

fn json_event(line: &mut Vec<u8>, event: &Event<'_>) {
    let mut num = itoa::Buffer::new();
    line.extend_from_slice(b"{\"time_ns\":");
    line.extend_from_slice(num.format(event.time_ns).as_bytes());
    line.extend_from_slice(b",\"pid\":");
    line.extend_from_slice(num.format(event.pid).as_bytes());
    line.extend_from_slice(b",\"tid\":");
    line.extend_from_slice(num.format(event.tid).as_bytes());
    line.extend_from_slice(b",\"comm\":");
    json_string(line, event.comm);
    line.extend_from_slice(b",\"provider\":");
    json_string(line, event.site.provider.as_bytes());
    line.extend_from_slice(b",\"name\":");
    json_string(line, event.site.name.as_bytes());
    line.extend_from_slice(b",\"path\":");
    json_string(line, event.site.path.as_os_str().as_encoded_bytes());
    line.extend_from_slice(b",\"address\":");
    line.extend_from_slice(num.format(event.site.address).as_bytes());
    line.extend_from_slice(b",\"args\":[");
    for (n, value) in event.args().enumerate() {
        if n > 0 {
            line.push(b',');
        }
        match value {
            Value::Unsigned(v) => line.extend_from_slice(num.format(v).as_bytes()),
            Value::Signed(v) => line.extend_from_slice(num.format(v).as_bytes()),
            Value::Float(v) if v.is_finite() => line.extend_from_slice(v.to_string().as_bytes()),
            Value::Float(_) => line.extend_from_slice(b"null"),
            Value::Str(Ok(bytes)) => json_string(line, bytes),
            Value::Str(Err(_)) | Value::Unreadable => line.extend_from_slice(b"null"),
        }
    }
    line.extend_from_slice(b"]}\n");
}

/// Appends `bytes` as a JSON string; invalid UTF-8 becomes U+FFFD.
fn json_string(line: &mut Vec<u8>, bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    // Writing JSON into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *line, &*text);
}

fn monotonic_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn escaped(bytes: &[u8]) -> String {
        let mut line = Vec::new();
        escape_text(&mut line, bytes, true);
        String::from_utf8(line).unwrap()
    }

    #[test]
    fn control_characters_never_reach_the_terminal() {
        assert_eq!(escaped(b"fib"), "fib");
        assert_eq!(escaped(b"a\nb\x1b[31m"), "a\\nb\\u{1b}[31m");
        assert_eq!(escaped(b"q\"uote\\"), "q\\\"uote\\\\");
        assert_eq!(escaped("héllo".as_bytes()), "héllo");
        assert_eq!(escaped(b"\xff\xfe"), "\\xff\\xfe");
        assert_eq!(escaped("\u{85}".as_bytes()), "\\u{85}");
    }
}
