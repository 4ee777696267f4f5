//! A live tracing session: programs loaded, sites attached, events read.
//!
//! Start-up order matters for the traced programs: maps first, then every
//! program is generated and loaded, and only then is anything attached, so
//! a verifier rejection leaves no uprobe and no raised semaphore behind.
//! Shut-down runs the other way round: [`Session::finish`] detaches first
//! (the kernel lowers the semaphores it raised), then drains what the
//! programs had already written, then reads the loss counter, so the final
//! counts are exact. If sdt dies instead, the kernel closes its file
//! descriptors, which detaches and lowers the semaphores just the same.

use std::collections::BTreeMap;
use std::os::fd::BorrowedFd;
use std::path::PathBuf;
use std::time::Duration;

use sdt_bpf::{
    Attachment, Features, LoadOptions, Map, MapSpec, MapType, Mechanism, Program, RingBuf,
    UprobeAttach, UprobeSite,
};

use crate::codegen::{self, Shape, SiteId, StringArg};
use crate::event::Event;
use crate::plan::{Plan, PlannedSite};
use crate::Error;

/// Default ring-buffer size: room for about 60,000 events of two arguments.
///
/// The kernel maps a ring buffer's data twice into the reader, so the buffer
/// counts twice in sdt's resident memory: 4 MiB keeps sdt at about 12 MB
/// while still absorbing the bursts of two threads hitting a probe flat out
/// (see the exact-count test). Slow outputs such as a terminal can ask for
/// more with `--buffer-size`; loss is never silent either way.
pub const DEFAULT_BUFFER_SIZE: u32 = 4 << 20;

/// The longest an event waits in the ring before the reader sees it: the
/// programs wake the reader only when the ring fills up, so the reader
/// looks on its own this often.
pub const DELIVERY_INTERVAL: Duration = Duration::from_millis(20);

/// What to record besides the arguments, and how.
#[derive(Clone, Debug)]
pub struct Options {
    /// Arguments to read as strings.
    pub string_args: Vec<StringArg>,
    /// Ring-buffer size in bytes: a power of two, at least one page.
    pub buffer_size: u32,
    /// Trace only this process.
    pub pid: Option<i32>,
    /// How to attach; `None` picks the best the kernel offers. Forcing an
    /// older mechanism exercises the paths older kernels take.
    pub mechanism: Option<Mechanism>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            string_args: Vec::new(),
            buffer_size: DEFAULT_BUFFER_SIZE,
            pid: None,
            mechanism: None,
        }
    }
}

/// A site that is being traced.
#[derive(Debug)]
pub struct TracedSite {
    pub site: PlannedSite,
    pub(crate) shape: usize,
}

/// Counts for the end of a session.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Events delivered.
    pub events: u64,
    /// Events that fired but could not be delivered: the ring buffer was full.
    pub lost: u64,
    /// Sites attached.
    pub sites: usize,
}

/// Loaded programs plus the attachments that feed them.
pub struct Session {
    // Attachments go first so that they are detached before anything else
    // is closed.
    attachments: Vec<Attachment>,
    programs: Vec<(String, Vec<sdt_bpf::Insn>)>,
    ring: RingBuf,
    lost: Map,
    mechanism: Mechanism,
    decoder: Decoder,
}

/// Turns records into events and counts them.
struct Decoder {
    sites: Vec<TracedSite>,
    shapes: Vec<Shape>,
    last_time: u64,
    events: u64,
    undecodable: u64,
}

impl Decoder {
    fn deliver(&mut self, record: &[u8], on_event: &mut impl FnMut(&Event<'_>)) {
        match Event::decode(record, &self.sites, &self.shapes, self.last_time) {
            Some(event) => {
                self.last_time = event.time_ns;
                self.events += 1;
                on_event(&event);
            }
            None => self.undecodable += 1,
        }
    }
}

impl Session {
    /// Generates, loads and attaches the programs for `plan`.
    pub fn start(plan: Plan, options: &Options) -> Result<Session, Error> {
        let features = Features::detect().map_err(Error::Bpf)?;
        let mechanism = match options.mechanism {
            Some(wanted) if features.supports(wanted) => wanted,
            Some(wanted) => return Err(Error::MechanismUnsupported(wanted.name())),
            None => features.best_mechanism().ok_or(Error::NoUprobes)?,
        };

        let ring = RingBuf::new(options.buffer_size).map_err(Error::Bpf)?;
        let lost = Map::create(&MapSpec::new(MapType::PerCpuArray, 4, 8, 1).name("sdt_lost"))
            .map_err(Error::Bpf)?;

        let mut shapes: Vec<Shape> = Vec::new();
        let mut sites = Vec::with_capacity(plan.sites.len());
        for site in plan.sites {
            let count = site.args.len();
            let mut strings: Vec<StringArg> = options
                .string_args
                .iter()
                .copied()
                .filter(|s| s.arg < count && s.len_arg.is_none_or(|l| l < count))
                .collect();
            strings.sort_unstable();
            strings.dedup_by_key(|s| s.arg);
            let shape = Shape {
                args: site.args.iter().map(|a| a.source).collect(),
                strings,
            };
            let index = match shapes.iter().position(|s| *s == shape) {
                Some(index) => index,
                None => {
                    shapes.push(shape);
                    shapes.len() - 1
                }
            };
            sites.push(TracedSite { site, shape: index });
        }

        // One program per shape where cookies say which site fired; one per
        // site where they cannot.
        let load = |shape: &Shape, id: SiteId, name: String| -> Result<(Program, Vec<_>), Error> {
            let insns = codegen::program(shape, id, ring.map(), options.buffer_size / 8, &lost)
                .map_err(Error::Codegen)?;
            let opts = LoadOptions {
                name: name.clone(),
                expected_attach_type: mechanism.expected_attach_type(),
            };
            let program = Program::load(&insns, &opts).map_err(Error::Load)?;
            Ok((program, insns))
        };
        let mut loaded: Vec<(Program, Vec<usize>)> = Vec::new();
        let mut programs = Vec::new();
        if mechanism.supports_cookies() {
            for (index, shape) in shapes.iter().enumerate() {
                let name = format!("sdt_trace_{index}");
                let (program, insns) = load(shape, SiteId::Cookie, name.clone())?;
                let members = (0..sites.len())
                    .filter(|&s| sites[s].shape == index)
                    .collect();
                loaded.push((program, members));
                programs.push((name, insns));
            }
        } else {
            for (index, site) in sites.iter().enumerate() {
                let id = u32::try_from(index).map_err(|_| Error::TooManySites)?;
                let name = format!("sdt_site_{index}");
                let (program, insns) =
                    load(&shapes[site.shape], SiteId::Constant(id), name.clone())?;
                loaded.push((program, vec![index]));
                programs.push((name, insns));
            }
        }

        let mut attachments = Vec::new();
        for (program, members) in &loaded {
            let mut by_file: BTreeMap<&PathBuf, Vec<UprobeSite>> = BTreeMap::new();
            for &index in members {
                let site = &sites[index].site;
                by_file
                    .entry(&site.attach_path)
                    .or_default()
                    .push(UprobeSite {
                        offset: site.attach_offset,
                        ref_ctr_offset: site.semaphore_offset,
                        // Without cookies each site has its own program, which
                        // knows its id as a constant.
                        cookie: if mechanism.supports_cookies() {
                            index as u64
                        } else {
                            0
                        },
                    });
            }
            for (path, uprobe_sites) in by_file {
                let request = UprobeAttach {
                    path: path.clone(),
                    sites: uprobe_sites,
                    pid: options.pid,
                    retprobe: false,
                };
                let attachment =
                    request
                        .attach(program, mechanism)
                        .map_err(|source| Error::Attach {
                            path: path.clone(),
                            source,
                        })?;
                attachments.push(attachment);
            }
        }

        Ok(Session {
            attachments,
            programs,
            ring,
            lost,
            mechanism,
            decoder: Decoder {
                sites,
                shapes,
                last_time: 0,
                events: 0,
                undecodable: 0,
            },
        })
    }

    /// The attach mechanism in use: `uprobe_multi`, `perf_link` or `perf_ioctl`.
    pub fn mechanism(&self) -> Mechanism {
        self.mechanism
    }

    /// The sites being traced.
    pub fn sites(&self) -> impl ExactSizeIterator<Item = &PlannedSite> {
        self.decoder.sites.iter().map(|s| &s.site)
    }

    /// The generated programs, by name, as loaded.
    pub fn programs(&self) -> &[(String, Vec<sdt_bpf::Insn>)] {
        &self.programs
    }

    /// Also ends [`poll`](Self::poll) when `fd` is readable, reporting `token`.
    pub fn watch(&mut self, fd: BorrowedFd<'_>, token: u64) -> Result<(), Error> {
        self.ring.watch(fd, token).map_err(Error::Bpf)
    }

    /// Waits for events, at most [`DELIVERY_INTERVAL`], passes each to
    /// `on_event` in ring order, and returns the tokens of watched
    /// descriptors that are ready.
    pub fn poll(&mut self, mut on_event: impl FnMut(&Event<'_>)) -> Result<Vec<u64>, Error> {
        let decoder = &mut self.decoder;
        let poll = self
            .ring
            .poll(Some(DELIVERY_INTERVAL), |record| {
                decoder.deliver(record, &mut on_event)
            })
            .map_err(Error::Bpf)?;
        Ok(poll.ready)
    }

    /// Detaches every probe, delivers the events already recorded, and
    /// returns the final counts.
    pub fn finish(mut self, mut on_event: impl FnMut(&Event<'_>)) -> Result<Summary, Error> {
        self.attachments.clear();
        let decoder = &mut self.decoder;
        self.ring
            .consume(|record| decoder.deliver(record, &mut on_event));
        let per_cpu = self
            .lost
            .lookup_per_cpu(&0u32.to_ne_bytes())
            .map_err(Error::Bpf)?
            .map(|values| {
                values
                    .iter()
                    .map(|v| u64::from_ne_bytes(v.try_into().unwrap_or_default()))
                    .sum::<u64>()
            })
            .unwrap_or_default();
        Ok(Summary {
            events: self.decoder.events,
            lost: per_cpu + self.decoder.undecodable,
            sites: self.decoder.sites.len(),
        })
    }
}
