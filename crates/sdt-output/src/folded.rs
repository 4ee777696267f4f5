//! Folded stacks: every map keyed by a user stack as `frame;frame;frame
//! count` lines, root first and leaf last, the input of FlameGraph,
//! inferno, speedscope and Perfetto.
//!
//! A map keyed by `ustack` alone gives one line per stack, sorted, with
//! the counts of stacks that fold to the same line (the same functions
//! called from different places in them) added up. Other parts of
//! the key (`@[comm, ustack]`) become the root frames, in key order, so
//! that a flame graph splits by them first. A frame is its function's
//! (demangled) name, without the offset, so that hits at different
//! places in one function add up; where the symbol is unknown, the
//! object's name in brackets (`[libc.so.6]`), else the address; a stack
//! without frames (one the kernel could not record, which is counted and
//! reported) is the one frame `[no stack]`. A `;` in a frame would split
//! it in two, so it becomes `:`; control characters become `?`.
//!
//! A language tool's own stacks (`sdt calls`' call stacks) are printed
//! as they come, one line each. Everything else a run produces (maps
//! without a stack, `printf`, values, a language tool's reports) is not
//! a stack: it goes to standard error as text, so that
//! standard output holds only folded lines.

use std::io::Write;

use crate::model::{Datum, MapPrint, Stack};
use crate::text::{self, Context};
use crate::{Event, Out, Sink};

/// The folded format.
pub struct Folded<'w> {
    out: Out<'w>,
    /// What is not a stack.
    rest: text::Text<'w>,
}

impl<'w> Folded<'w> {
    pub fn new(out: Box<dyn Write + 'w>) -> Folded<'w> {
        Folded {
            out: Out::new(out),
            rest: text::Text::new(Box::new(std::io::stderr())),
        }
    }
}

impl Sink for Folded<'_> {
    /// Maps keyed by stacks and a tool's own stacks (already folded) as
    /// folded lines; everything else as text, on standard error.
    fn event(&mut self, event: Event<'_>) {
        let stacks = match event {
            Event::Map(map) => match fold(map) {
                Some(stacks) => stacks,
                None => return self.rest.event(event),
            },
            Event::Stacks { stacks, .. } => stacks.to_vec(),
            // Nothing separates the maps from what came before.
            Event::MapsFollow => return,
            other => return self.rest.event(other),
        };
        let mut lines = String::new();
        for (path, count) in stacks {
            lines.push_str(&format!("{path} {count}\n"));
        }
        self.out.write(lines.as_bytes());
    }

    fn flush(&mut self) {
        self.out.flush();
        self.rest.flush();
    }

    fn error(&self) -> Option<&std::io::Error> {
        self.out.error()
    }
}

/// The stacks of a map keyed by a user stack, folded (`frame;frame`,
/// root first), sorted, with their counts (divided by `print`'s `div`);
/// stacks that fold to the same line are added up. `None` for a map
/// without a stack in its key.
pub fn fold(map: &MapPrint) -> Option<Vec<(String, i128)>> {
    let stacked = map
        .rows
        .first()
        .is_some_and(|row| row.key.iter().any(|k| matches!(k, Datum::Stack(_))));
    if !stacked {
        return None;
    }
    let mut folded: std::collections::BTreeMap<String, i128> = Default::default();
    for row in &map.rows {
        let mut frames: Vec<String> = Vec::new();
        for part in &row.key {
            match part {
                Datum::Stack(stack) => frames.extend(stack_frames(stack)),
                other => frames.push(frame(&text::datum(other, Context::Key))),
            }
        }
        *folded.entry(frames.join(";")).or_default() += row.value.number();
    }
    let div = i128::from(map.div.max(1));
    Some(
        folded
            .into_iter()
            .map(|(path, n)| (path, n / div))
            .collect(),
    )
}

/// A stack's frames, root first; a stack without any (one that could not
/// be recorded, or a probe without a user stack) is one frame that says so.
fn stack_frames(stack: &Stack) -> Box<dyn Iterator<Item = String> + '_> {
    if stack.frames.is_empty() {
        return Box::new(std::iter::once(NO_STACK.to_string()));
    }
    Box::new(
        stack
            .frames
            .iter()
            .rev()
            .map(|f| match (&f.symbol, &f.module) {
                (Some((name, _)), _) if stack.kernel => frame(&format!("{name}_[k]")),
                (Some((name, _)), _) => frame(name),
                (None, Some(module)) => {
                    let base = module.rsplit('/').next().unwrap_or(module);
                    frame(&format!("[{base}]"))
                }
                (None, None) => format!("{:#x}", f.addr),
            }),
    )
}

/// The frame of a stack without frames.
const NO_STACK: &str = "[no stack]";

/// A frame's text, with what would break a folded line replaced; also
/// the frames of a language tool's call stacks ([`crate::calls`]).
pub(crate) fn frame(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            ';' => ':',
            c if c.is_control() => '?',
            c => c,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Frame, MapKind, MapRow, MapValue, StackStyle};

    fn frame_at(addr: u64, name: Option<&str>, module: Option<&str>) -> Frame {
        Frame {
            addr,
            symbol: name.map(|n| (n.to_string(), 4)),
            module: module.map(str::to_string),
            build_id: None,
        }
    }

    #[test]
    fn stacks_fold_root_first_with_other_keys_as_roots() {
        let stack = Datum::Stack(Stack {
            frames: vec![
                frame_at(0x30, Some("leaf;x"), Some("/bin/x")),
                frame_at(0x20, None, Some("/lib/libc.so.6")),
                frame_at(0x10, Some("main"), Some("/bin/x")),
                frame_at(0x8, None, None),
            ],
            style: StackStyle::Bpftrace,
            kernel: false,
        });
        let map = MapPrint {
            name: "@".into(),
            kind: MapKind::Count,
            keyed: true,
            rows: vec![
                MapRow {
                    key: vec![Datum::Str(b"app".to_vec()), stack.clone()],
                    value: MapValue::Number(7),
                },
                MapRow {
                    key: vec![Datum::Str(b"app".to_vec()), stack],
                    value: MapValue::Number(2),
                },
                MapRow {
                    key: vec![Datum::Str(b"zap".to_vec()), Datum::Stack(Stack::default())],
                    value: MapValue::Number(1),
                },
            ],
            div: 1,
        };
        let mut out = Vec::new();
        {
            let mut sink = Folded::new(Box::new(&mut out));
            sink.event(Event::Map(&map));
            sink.flush();
        }
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "app;0x8;main;[libc.so.6];leaf:x 9\nzap;[no stack] 1\n"
        );
    }

    #[test]
    fn kernel_frames_are_marked_above_the_user_frames_they_came_from() {
        let user = Datum::Stack(Stack {
            frames: vec![
                frame_at(0x20, Some("read_file"), Some("/bin/x")),
                frame_at(0x10, Some("main"), Some("/bin/x")),
            ],
            style: StackStyle::Bpftrace,
            kernel: false,
        });
        let kernel = Datum::Stack(Stack {
            frames: vec![
                frame_at(0xffff_ffff_8100_0020, Some("filemap_read"), None),
                frame_at(0xffff_ffff_8100_0010, Some("do_syscall_64"), None),
            ],
            style: StackStyle::Bpftrace,
            kernel: true,
        });
        let map = MapPrint {
            name: "@".into(),
            kind: MapKind::Count,
            keyed: true,
            rows: vec![MapRow {
                key: vec![user, kernel],
                value: MapValue::Number(3),
            }],
            div: 1,
        };
        let mut out = Vec::new();
        {
            let mut sink = Folded::new(Box::new(&mut out));
            sink.event(Event::Map(&map));
            sink.flush();
        }
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "main;read_file;do_syscall_64_[k];filemap_read_[k] 3\n"
        );
    }
}
