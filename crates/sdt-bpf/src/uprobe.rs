//! Attaching programs to user-space probe sites.
//!
//! Three kernel mechanisms exist; [`Features::detect`] finds out which this
//! kernel has by asking it (never by version number), and
//! [`Features::best_mechanism`] picks, in order of preference:
//!
//! 1. [`Mechanism::UprobeMulti`] (Linux 6.6+): one link for every site of
//!    one file, with a cookie per site. The program must be loaded for it
//!    ([`Mechanism::expected_attach_type`]).
//! 2. [`Mechanism::PerfLink`]: one uprobe perf event per site, each linked
//!    to the program with `BPF_LINK_CREATE`, which carries a cookie.
//! 3. [`Mechanism::PerfIoctl`]: the same perf events, attached with
//!    `PERF_EVENT_IOC_SET_BPF`, which has no cookie. Callers that need to
//!    tell sites apart must generate one program per site
//!    ([`Mechanism::supports_cookies`]).
//!
//! USDT semaphores are handled by the kernel: a site's `ref_ctr_offset`
//! (the semaphore's file offset) makes the kernel increment the counter in
//! every process that maps the file, now and later, and decrement it on
//! detach. Nothing writes to other processes' memory.
//!
//! Everything is detached when the [`Attachment`] is dropped.

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::io::Errno;

use crate::error::{Error, Result};
use crate::insn::{Insn, Reg};
use crate::program::{AttachType, LoadOptions, Program};
use crate::sys;

const UPROBE_PMU: &str = "/sys/bus/event_source/devices/uprobe";

/// A kernel mechanism for attaching uprobe programs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mechanism {
    /// One `BPF_TRACE_UPROBE_MULTI` link for all sites of a file.
    UprobeMulti,
    /// A uprobe perf event per site, linked with `BPF_LINK_CREATE`.
    PerfLink,
    /// A uprobe perf event per site, attached with `PERF_EVENT_IOC_SET_BPF`.
    PerfIoctl,
}

impl Mechanism {
    /// The attach type to load programs with for this mechanism.
    pub fn expected_attach_type(self) -> Option<AttachType> {
        match self {
            Mechanism::UprobeMulti => Some(AttachType::UprobeMulti),
            Mechanism::PerfLink | Mechanism::PerfIoctl => None,
        }
    }

    /// Whether programs can read a per-site cookie with
    /// `bpf_get_attach_cookie`. Without cookies, generate one program per
    /// site (or per distinct behaviour) instead.
    pub fn supports_cookies(self) -> bool {
        !matches!(self, Mechanism::PerfIoctl)
    }

    /// A short name for messages: `uprobe_multi`, `perf_link` or `perf_ioctl`.
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::UprobeMulti => "uprobe_multi",
            Mechanism::PerfLink => "perf_link",
            Mechanism::PerfIoctl => "perf_ioctl",
        }
    }
}

/// What this kernel offers for uprobes.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Features {
    /// `BPF_TRACE_UPROBE_MULTI` links.
    pub uprobe_multi: bool,
    /// `BPF_LINK_CREATE` on perf events (with cookies).
    pub perf_link: bool,
    /// The uprobe PMU, if perf uprobe events exist.
    pub uprobe_pmu: Option<UprobePmu>,
    /// Semaphore support (`ref_ctr_offset`) in the uprobe PMU.
    pub ref_ctr: bool,
}

/// The perf PMU that creates uprobe events, as sysfs describes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UprobePmu {
    /// `perf_event_attr.type`.
    pub pmu_type: u32,
    /// Bit of `config` that makes a return probe.
    pub retprobe_bit: u32,
}

impl Features {
    /// Probes the running kernel. The probes have no side effects: each
    /// asks for something that fails with a telling error (`EBADF`) when
    /// the feature exists. Needs CAP_BPF to load the probe programs.
    pub fn detect() -> Result<Features> {
        let uprobe_pmu = read_uprobe_pmu();
        Ok(Features {
            uprobe_multi: probe_uprobe_multi()?,
            perf_link: probe_perf_link()?,
            ref_ctr: ref_ctr_supported(),
            uprobe_pmu,
        })
    }

    /// The preferred mechanism this kernel supports, if any.
    pub fn best_mechanism(&self) -> Option<Mechanism> {
        [
            Mechanism::UprobeMulti,
            Mechanism::PerfLink,
            Mechanism::PerfIoctl,
        ]
        .into_iter()
        .find(|m| self.supports(*m))
    }

    /// Whether this kernel supports `m`.
    pub fn supports(&self, m: Mechanism) -> bool {
        match m {
            Mechanism::UprobeMulti => self.uprobe_multi,
            Mechanism::PerfLink => self.perf_link && self.uprobe_pmu.is_some(),
            Mechanism::PerfIoctl => self.uprobe_pmu.is_some(),
        }
    }
}

/// Whether the uprobe PMU takes a semaphore offset (`ref_ctr_offset`).
fn ref_ctr_supported() -> bool {
    Path::new(UPROBE_PMU).join("format/ref_ctr_offset").exists()
}

fn read_uprobe_pmu() -> Option<UprobePmu> {
    let dir = Path::new(UPROBE_PMU);
    let pmu_type = fs::read_to_string(dir.join("type"))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    // "config:0": the bit that selects a return probe.
    let retprobe_bit = fs::read_to_string(dir.join("format/retprobe"))
        .ok()
        .and_then(|s| s.trim().strip_prefix("config:")?.parse().ok())
        .unwrap_or(0);
    Some(UprobePmu {
        pmu_type,
        retprobe_bit,
    })
}

/// `r0 = 0; exit`.
fn trivial_program(attach: Option<AttachType>) -> Result<Option<Program>> {
    let insns = [Insn::mov64_imm(Reg::R0, 0), Insn::exit()];
    let opts = LoadOptions {
        name: "sdt_probe".into(),
        expected_attach_type: attach,
        ..LoadOptions::default()
    };
    match Program::load(&insns, &opts) {
        Ok(p) => Ok(Some(p)),
        Err(e) if e.is_permission_denied() => Err(e),
        // An unknown expected_attach_type is refused with EINVAL.
        Err(_) => Ok(None),
    }
}

/// uprobe_multi exists if linking to the directory `/` fails with EBADF
/// (the path is resolved, then found not to be a regular file).
fn probe_uprobe_multi() -> Result<bool> {
    let Some(prog) = trivial_program(Some(AttachType::UprobeMulti))? else {
        return Ok(false);
    };
    let offsets = [0u64];
    let r = sys::link_create_uprobe_multi(
        prog.as_fd(),
        &sys::UprobeMulti {
            path: c"/",
            offsets: &offsets,
            ref_ctr_offsets: None,
            cookies: None,
            retprobe: false,
            pid: 0,
        },
    );
    Ok(matches!(r, Err(e) if Errno::from_io_error(&e) == Some(Errno::BADF)))
}

/// Perf links exist if linking to perf event fd -1 fails with EBADF.
fn probe_perf_link() -> Result<bool> {
    let Some(prog) = trivial_program(None)? else {
        return Ok(false);
    };
    let r = sys::link_create_perf_event(prog.as_fd(), None, 0);
    Ok(matches!(r, Err(e) if Errno::from_io_error(&e) == Some(Errno::BADF)))
}

/// One probe site in a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct UprobeSite {
    /// File offset of the probed instruction.
    pub offset: u64,
    /// File offset of the USDT semaphore, if the site has one.
    pub ref_ctr_offset: Option<u64>,
    /// Value of `bpf_get_attach_cookie` when this site fires.
    pub cookie: u64,
}

impl UprobeSite {
    /// A site without semaphore or cookie.
    pub fn new(offset: u64) -> UprobeSite {
        UprobeSite {
            offset,
            ref_ctr_offset: None,
            cookie: 0,
        }
    }
}

/// A request to attach one program to sites of one file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UprobeAttach {
    /// The file (executable or library) that holds the sites.
    pub path: PathBuf,
    pub sites: Vec<UprobeSite>,
    /// Only fire in this process (by its PID in our PID namespace).
    pub pid: Option<i32>,
    /// Fire on return from the function at each site (uretprobe).
    pub retprobe: bool,
}

/// Attached probes; dropping it detaches them all and lowers the
/// semaphores it raised.
#[derive(Debug)]
pub struct Attachment {
    mechanism: Mechanism,
    // Links are closed before the perf events they point at.
    links: Vec<OwnedFd>,
    perf_events: Vec<OwnedFd>,
}

impl Attachment {
    pub(crate) fn new(
        mechanism: Mechanism,
        links: Vec<OwnedFd>,
        perf_events: Vec<OwnedFd>,
    ) -> Attachment {
        Attachment {
            mechanism,
            links,
            perf_events,
        }
    }

    /// The descriptors that hold the probes attached: links first, then
    /// the perf events they point at, in the order they must be closed.
    /// Closing them detaches, which makes the kernel wait for a grace
    /// period; a caller may hand them to another process to close.
    pub fn into_fds(self) -> Vec<OwnedFd> {
        let mut fds = self.links;
        fds.extend(self.perf_events);
        fds
    }

    /// The mechanism that was used.
    pub fn mechanism(&self) -> Mechanism {
        self.mechanism
    }
}

impl UprobeAttach {
    /// Attaches `program` to every site with `mechanism`.
    ///
    /// `program` must have been loaded with
    /// [`mechanism.expected_attach_type()`](Mechanism::expected_attach_type).
    /// The program may be dropped afterwards: the attachment keeps it alive.
    pub fn attach(&self, program: &Program, mechanism: Mechanism) -> Result<Attachment> {
        self.check(program, mechanism)?;
        let path = CString::new(self.path.as_os_str().as_bytes()).map_err(|_| {
            Error::Invalid(format!("path {} contains a NUL byte", self.path.display()))
        })?;
        match mechanism {
            Mechanism::UprobeMulti => self.attach_multi(program, &path),
            Mechanism::PerfLink | Mechanism::PerfIoctl => {
                self.attach_perf(program, &path, mechanism)
            }
        }
    }

    fn check(&self, program: &Program, mechanism: Mechanism) -> Result<()> {
        if self.sites.is_empty() {
            return Err(Error::Invalid("no probe sites to attach".into()));
        }
        if program.expected_attach_type() != mechanism.expected_attach_type() {
            return Err(Error::Invalid(format!(
                "program `{}` was loaded with attach type {:?}, but {} needs {:?}",
                program.name(),
                program.expected_attach_type(),
                mechanism.name(),
                mechanism.expected_attach_type()
            )));
        }
        if !mechanism.supports_cookies() && self.sites.iter().any(|s| s.cookie != 0) {
            return Err(Error::Unsupported(format!(
                "{} cannot pass cookies; attach one program per site instead",
                mechanism.name()
            )));
        }
        let misaligned = self.sites.iter().find_map(|s| {
            let r = s.ref_ctr_offset.filter(|r| r % 2 != 0)?;
            Some((s.offset, r))
        });
        if let Some((offset, r)) = misaligned {
            return Err(Error::Invalid(format!(
                "semaphore offset {r:#x} of site {offset:#x} is not 2-byte aligned"
            )));
        }
        if self.sites.iter().any(|s| s.ref_ctr_offset.is_some()) && !ref_ctr_supported() {
            return Err(Error::Unsupported(
                "USDT semaphores (uprobe ref_ctr_offset)".into(),
            ));
        }
        if let Some(pid) = self.pid.filter(|&p| p <= 0) {
            return Err(Error::Invalid(format!("pid {pid} is not a process id")));
        }
        Ok(())
    }

    fn attach_multi(&self, program: &Program, path: &CString) -> Result<Attachment> {
        let offsets: Vec<u64> = self.sites.iter().map(|s| s.offset).collect();
        let ref_ctrs: Vec<u64> = self
            .sites
            .iter()
            .map(|s| s.ref_ctr_offset.unwrap_or(0))
            .collect();
        let cookies: Vec<u64> = self.sites.iter().map(|s| s.cookie).collect();
        let link = sys::link_create_uprobe_multi(
            program.as_fd(),
            &sys::UprobeMulti {
                path,
                offsets: &offsets,
                ref_ctr_offsets: ref_ctrs.iter().any(|&r| r != 0).then_some(&ref_ctrs[..]),
                cookies: cookies.iter().any(|&c| c != 0).then_some(&cookies[..]),
                retprobe: self.retprobe,
                pid: self.pid.unwrap_or(0) as u32,
            },
        )
        .map_err(|e| self.attach_error(e, None))?;
        Ok(Attachment {
            mechanism: Mechanism::UprobeMulti,
            links: vec![link],
            perf_events: Vec::new(),
        })
    }

    fn attach_perf(
        &self,
        program: &Program,
        path: &CString,
        mechanism: Mechanism,
    ) -> Result<Attachment> {
        let pmu = read_uprobe_pmu().ok_or_else(|| {
            Error::Unsupported(format!("uprobe perf events ({UPROBE_PMU} is missing)"))
        })?;
        // All processes: pid -1 on one CPU (the program runs on every CPU
        // regardless). One process: that pid on any CPU.
        let (pid, cpu) = match self.pid {
            Some(p) => (p, -1),
            None => (-1, 0),
        };
        let mut attachment = Attachment {
            mechanism,
            links: Vec::new(),
            perf_events: Vec::with_capacity(self.sites.len()),
        };
        for site in &self.sites {
            let config = (u64::from(self.retprobe) << pmu.retprobe_bit)
                | (site.ref_ctr_offset.unwrap_or(0) << 32);
            let event = sys::perf_event_open_uprobe(&sys::PerfUprobe {
                pmu_type: pmu.pmu_type,
                config,
                path,
                offset: site.offset,
                pid,
                cpu,
            })
            .map_err(|e| self.attach_error(e, Some(site)))?;
            if mechanism == Mechanism::PerfLink {
                let link =
                    sys::link_create_perf_event(program.as_fd(), Some(event.as_fd()), site.cookie)
                        .map_err(|e| Error::sys("linking program to uprobe perf event", e))?;
                attachment.links.push(link);
            } else {
                sys::perf_event_set_bpf(event.as_fd(), program.as_fd())
                    .map_err(|e| Error::sys("attaching program to uprobe perf event", e))?;
            }
            sys::perf_event_enable(event.as_fd())
                .map_err(|e| Error::sys("enabling uprobe perf event", e))?;
            attachment.perf_events.push(event);
        }
        Ok(attachment)
    }

    /// Explains a failed uprobe registration.
    fn attach_error(&self, e: io::Error, site: Option<&UprobeSite>) -> Error {
        match Errno::from_io_error(&e) {
            Some(Errno::NOENT) => Error::FileNotFound {
                path: self.path.clone(),
            },
            Some(Errno::INVAL) => {
                // Name the site with a semaphore: the one that fired, or
                // the first of a multi link.
                let culprit = site
                    .filter(|s| s.ref_ctr_offset.is_some())
                    .or_else(|| self.sites.iter().find(|s| s.ref_ctr_offset.is_some()));
                match culprit {
                    Some(s) => Error::RefCtrConflict {
                        path: self.path.clone(),
                        offset: s.offset,
                        ref_ctr_offset: s.ref_ctr_offset.unwrap_or_default(),
                    },
                    None => Error::sys("attaching uprobe", e),
                }
            }
            _ => Error::sys("attaching uprobe", e),
        }
    }
}
