//! One run, several sinks: the chosen format and, beside it, the
//! pictures asked for (`--flamegraph`, `--timeline`).
//!
//! Each call goes to every sink in order. A `printf` is handed to each in
//! turn (the runtime's records make their text once, when the first sink
//! asks, and keep it for the others). The first error of any sink is the tee's: a full
//! disk under the timeline stops the run as a closed standard output
//! does, rather than leaving a file that silently ends early.

use std::io;

use crate::{Event, Sink};

/// Hands everything to several sinks.
pub struct Tee<'w> {
    sinks: Vec<Box<dyn Sink + 'w>>,
}

impl<'w> Tee<'w> {
    /// A tee to `first`, the main output, and then to `others`.
    pub fn new(first: Box<dyn Sink + 'w>, others: Vec<Box<dyn Sink + 'w>>) -> Tee<'w> {
        let mut sinks = vec![first];
        sinks.extend(others);
        Tee { sinks }
    }

    /// One sink as it is, or a tee when there are others.
    pub fn of(first: Box<dyn Sink + 'w>, others: Vec<Box<dyn Sink + 'w>>) -> Box<dyn Sink + 'w> {
        if others.is_empty() {
            first
        } else {
            Box::new(Tee::new(first, others))
        }
    }
}

impl Sink for Tee<'_> {
    fn event(&mut self, mut event: Event<'_>) {
        for sink in &mut self.sinks {
            sink.event(event.reborrow());
        }
    }

    fn flush(&mut self) {
        self.sinks.iter_mut().for_each(|s| s.flush());
    }

    fn finish(&mut self) {
        self.sinks.iter_mut().for_each(|s| s.finish());
    }

    fn error(&self) -> Option<&io::Error> {
        self.sinks.iter().find_map(|s| s.error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::Text;
    use crate::{Datum, Printed};
    use std::cell::RefCell;
    use std::rc::Rc;

    #[derive(Clone, Default)]
    struct Shared(Rc<RefCell<Vec<u8>>>);

    impl io::Write for Shared {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.borrow_mut().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    struct Line;

    impl Printed for Line {
        fn format(&self) -> u32 {
            0
        }
        fn text(&mut self) -> &[u8] {
            b"hello\n"
        }
        fn args(&mut self) -> Vec<Datum> {
            Vec::new()
        }
    }

    /// A writer that is full.
    struct Full;

    impl io::Write for Full {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::other("no space left"))
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn every_sink_gets_everything_and_the_first_error_is_the_tees() {
        let (a, b) = (Shared::default(), Shared::default());
        let mut tee = Tee::new(
            Box::new(Text::new(Box::new(a.clone()))),
            vec![Box::new(Text::new(Box::new(b.clone())))],
        );
        let mut line = Line;
        tee.event(Event::Printf(&mut line));
        tee.event(Event::Value(&Datum::int(5)));
        tee.finish();
        assert_eq!(*a.0.borrow(), b"hello\n5\n");
        assert_eq!(*b.0.borrow(), b"hello\n5\n");
        assert!(tee.error().is_none());

        let mut tee = Tee::new(
            Box::new(Text::new(Box::new(a.clone()))),
            vec![Box::new(Text::new(Box::new(Full)))],
        );
        tee.event(Event::Value(&Datum::int(6)));
        assert_eq!(tee.error().unwrap().to_string(), "no space left");
    }
}
