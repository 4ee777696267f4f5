//! Call stacks of a runtime, built from its method entry and return
//! probes rather than walked through the native stack.
//!
//! For Python, Ruby or Java, a `ustack` is mostly the interpreter's own
//! frames (`_PyEval_EvalFrameDefault` over and over), which say nothing
//! about the program. The runtime's entry and return probes do: each
//! thread keeps a stack of its open calls, and a call's stack is the
//! names of the calls open under it, root first (`<module>;fib;fib`).
//!
//! From these stacks come folded lines for a flame graph, weighted by
//! calls (each entry adds one to its stack: a line's count is how many
//! calls had exactly that stack) or by time (each return adds its call's
//! own time, its duration less its callees', so that a frame's width is
//! the time spent in it, callees included), and a [`Span`] per call for a
//! timeline. The stacks seen are kept as a tree of calls, so an event
//! costs the same at any depth, and the lines are written out once, at
//! the end.
//!
//! Pairing is by name, as `sdt flow` does it, and never trusts entries
//! and returns to balance: a return closes the nearest open call of the
//! same name, the calls above that one never returned (a runtime that
//! does not report an exception's unwinding, a coroutine switch), and a
//! return that matches no open call had no entry (tracing began inside
//! it). Neither shifts the pairing of what follows; both are counted
//! ([`CallStacks::unpaired`]). A call that never returned is in the
//! counts by calls (it was entered) but not in those by time (it has no
//! duration), and is not a slice.

use std::collections::{BTreeMap, HashMap};

use crate::folded::frame;
use crate::model::{Span, Thread};
use crate::{Event, Sink};

/// What a folded line counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Weight {
    /// Calls entered with exactly that stack.
    Calls,
    /// Nanoseconds spent in calls with exactly that stack, callees not
    /// included.
    Time,
}

/// Calls open on one thread deeper than this: the oldest is given up as
/// never returned, so that a thread whose returns are never seen cannot
/// grow without bound.
const MAX_DEPTH: usize = 10_000;

/// An open call.
struct Open {
    /// Its stack, in [`CallStacks::nodes`].
    node: usize,
    start_ns: u64,
    /// Nanoseconds spent in its callees that returned.
    callees_ns: u64,
}

/// One thread's open calls, outermost first, and its name.
#[derive(Default)]
struct ThreadCalls {
    pid: u32,
    comm: Vec<u8>,
    open: Vec<Open>,
}

/// Counts of what could not be paired.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Unpaired {
    /// Returns that matched no open call.
    pub returns_without_entry: u64,
    /// Calls a deeper return went past, or still open at the end.
    pub entries_without_return: u64,
}

/// A stack seen: its innermost call's name, the stack it was called
/// from, and its weight. Stacks are kept as a tree, so that an entry
/// costs one lookup however deep it is, and paths are written out once,
/// at the end.
struct Node {
    name: String,
    caller: Option<usize>,
    weight: i128,
}

/// Builds each thread's call stack from entries and returns.
pub struct CallStacks {
    weight: Weight,
    threads: HashMap<u32, ThreadCalls>,
    nodes: Vec<Node>,
    /// Each node by its caller and name.
    index: HashMap<(Option<usize>, String), usize>,
    unpaired: Unpaired,
}

impl CallStacks {
    pub fn new(weight: Weight) -> CallStacks {
        CallStacks {
            weight,
            threads: HashMap::new(),
            nodes: Vec::new(),
            index: HashMap::new(),
            unpaired: Unpaired::default(),
        }
    }

    /// A call of `name` entered on `thread` at `time_ns`.
    pub fn entry(&mut self, thread: Thread<'_>, time_ns: u64, name: &str) {
        let calls = self.threads.entry(thread.tid).or_default();
        calls.pid = thread.pid;
        if calls.comm != thread.comm {
            calls.comm = thread.comm.to_vec();
        }
        let caller = calls.open.last().map(|o| o.node);
        let key = (caller, frame(name));
        let node = match self.index.get(&key) {
            Some(&node) => node,
            None => {
                self.nodes.push(Node {
                    name: key.1.clone(),
                    caller,
                    weight: 0,
                });
                self.index.insert(key, self.nodes.len() - 1);
                self.nodes.len() - 1
            }
        };
        calls.open.push(Open {
            node,
            start_ns: time_ns,
            callees_ns: 0,
        });
        if calls.open.len() > MAX_DEPTH {
            calls.open.remove(0);
            self.unpaired.entries_without_return += 1;
        }
        if self.weight == Weight::Calls {
            self.nodes[node].weight += 1;
        }
    }

    /// A call of `name` returned on `thread` at `time_ns`: its slice goes
    /// to `sink` (if any), named `name`.
    pub fn exit(
        &mut self,
        thread: Thread<'_>,
        time_ns: u64,
        name: &str,
        sink: Option<&mut dyn Sink>,
    ) {
        let name = frame(name);
        let Some(calls) = self.threads.get_mut(&thread.tid) else {
            self.unpaired.returns_without_entry += 1;
            return;
        };
        let nodes = &self.nodes;
        let Some(at) = calls.open.iter().rposition(|o| nodes[o.node].name == name) else {
            self.unpaired.returns_without_entry += 1;
            return;
        };
        let above = calls.open.len() - at - 1;
        self.unpaired.entries_without_return += above as u64;
        calls.open.truncate(at + 1);
        let took = time_ns.saturating_sub(calls.open[at].start_ns);
        let open = calls.open.pop().expect("the call matched");
        if self.weight == Weight::Time {
            let own = took.saturating_sub(open.callees_ns);
            self.nodes[open.node].weight += i128::from(own);
        }
        if let Some(caller) = calls.open.last_mut() {
            caller.callees_ns += took;
        }
        if let Some(sink) = sink {
            sink.event(Event::Span(&Span {
                thread,
                start_ns: open.start_ns,
                end_ns: time_ns,
                name: &self.nodes[open.node].name,
                args: &[],
            }));
        }
        if calls.open.is_empty() {
            self.threads.remove(&thread.tid);
        }
    }

    /// The stacks, folded (`frame;frame`, root first), sorted, with their
    /// weights; calls still open are counted as never returned.
    pub fn finish(&mut self) -> Vec<(String, i128)> {
        for (_, calls) in self.threads.drain() {
            self.unpaired.entries_without_return += calls.open.len() as u64;
        }
        let mut folded: BTreeMap<String, i128> = BTreeMap::new();
        for node in self.nodes.iter().filter(|n| n.weight != 0) {
            let mut names = vec![node.name.as_str()];
            let mut caller = node.caller;
            while let Some(up) = caller {
                names.push(&self.nodes[up].name);
                caller = self.nodes[up].caller;
            }
            names.reverse();
            *folded.entry(names.join(";")).or_default() += node.weight;
        }
        self.nodes.clear();
        self.index.clear();
        folded.into_iter().collect()
    }

    /// What could not be paired so far.
    pub fn unpaired(&self) -> Unpaired {
        self.unpaired
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Thread<'static> = Thread {
        pid: 7,
        tid: 8,
        comm: b"app",
    };

    /// Calls `f(n)` recursively as fib does, entering and returning.
    fn fib(stacks: &mut CallStacks, n: u32, clock: &mut u64) {
        stacks.entry(T, *clock, "fib");
        *clock += 10;
        if n >= 2 {
            fib(stacks, n - 1, clock);
            fib(stacks, n - 2, clock);
        }
        stacks.exit(T, *clock, "fib", None);
    }

    #[test]
    fn by_calls_each_line_counts_the_calls_at_its_depth() {
        let mut stacks = CallStacks::new(Weight::Calls);
        fib(&mut stacks, 4, &mut 0);
        let folded = stacks.finish();
        // fib(4): 1 call at depth 1, 2 at 2, 4 at 3, 2 at 4.
        assert_eq!(
            folded,
            vec![
                ("fib".to_string(), 1),
                ("fib;fib".to_string(), 2),
                ("fib;fib;fib".to_string(), 4),
                ("fib;fib;fib;fib".to_string(), 2),
            ]
        );
        assert_eq!(stacks.unpaired(), Unpaired::default());
    }

    #[test]
    fn by_time_each_line_is_the_time_spent_in_its_own_frames() {
        let mut stacks = CallStacks::new(Weight::Time);
        stacks.entry(T, 100, "main");
        stacks.entry(T, 110, "slow");
        stacks.exit(T, 150, "slow", None);
        stacks.entry(T, 160, "quick");
        stacks.exit(T, 165, "quick", None);
        stacks.exit(T, 200, "main", None);
        assert_eq!(
            stacks.finish(),
            vec![
                ("main".to_string(), 55),
                ("main;quick".to_string(), 5),
                ("main;slow".to_string(), 40),
            ]
        );
    }

    #[test]
    fn what_does_not_pair_is_counted_and_shifts_nothing() {
        struct Spans(Vec<(String, u64, u64)>);
        impl Sink for Spans {
            fn event(&mut self, event: Event<'_>) {
                if let Event::Span(span) = event {
                    self.0
                        .push((span.name.to_string(), span.start_ns, span.end_ns));
                }
            }
        }
        let mut spans = Spans(Vec::new());
        let mut stacks = CallStacks::new(Weight::Calls);
        // A return whose entry was before tracing.
        stacks.exit(T, 1, "early", Some(&mut spans));
        stacks.entry(T, 10, "main");
        stacks.entry(T, 20, "thrown;away");
        stacks.exit(T, 30, "main", Some(&mut spans));
        stacks.entry(T, 40, "open");
        let folded = stacks.finish();
        assert_eq!(
            folded,
            vec![
                ("main".to_string(), 1),
                ("main;thrown:away".to_string(), 1),
                ("open".to_string(), 1),
            ]
        );
        assert_eq!(spans.0, vec![("main".to_string(), 10, 30)]);
        assert_eq!(
            stacks.unpaired(),
            Unpaired {
                returns_without_entry: 1,
                entries_without_return: 2,
            }
        );
    }
}
