//! The socket programs register on, and what one sends: its process id
//! (from the kernel, `SO_PEERCRED`) and its shared memory (`SCM_RIGHTS`).

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Duration;

use rustix::net::{
    self, AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendFlags,
    SocketAddrUnix, SocketFlags, SocketType,
};

use crate::layout;
use crate::shared::{Entry, Shared};
use crate::Clock;

/// How long a registering program has to send its memory.
const HELLO_WAIT: Duration = Duration::from_secs(1);

/// The abstract socket `sdt-fastpath`, bound and listening.
pub struct Listener {
    socket: OwnedFd,
}

/// A program that asked to register, not yet answered.
pub struct Pending {
    /// The process, as this tracer's PID namespace numbers it.
    pub pid: u32,
    /// Its user.
    pub uid: u32,
    socket: OwnedFd,
    memory: OwnedFd,
}

impl Listener {
    /// Binds the name; fails with `AddrInUse` when another tracer has it.
    pub fn bind() -> io::Result<Listener> {
        let socket = net::socket_with(
            AddressFamily::UNIX,
            SocketType::SEQPACKET,
            SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
            None,
        )?;
        net::bind(
            &socket,
            &SocketAddrUnix::new_abstract_name(layout::SOCKET_NAME)?,
        )?;
        net::listen(&socket, 64)?;
        Ok(Listener { socket })
    }

    /// Readable when a program asks.
    pub fn as_fd(&self) -> BorrowedFd<'_> {
        self.socket.as_fd()
    }

    /// The next program that asks, if one does: who it is, and its
    /// memory. A program that sends nothing sensible within a second is
    /// dropped, and the next one looked at.
    pub fn accept(&self) -> io::Result<Option<Pending>> {
        loop {
            let socket = match net::accept_with(&self.socket, SocketFlags::CLOEXEC) {
                Ok(socket) => socket,
                Err(rustix::io::Errno::AGAIN) => return Ok(None),
                Err(e) => return Err(e.into()),
            };
            if let Some(pending) = hello(socket) {
                return Ok(Some(pending));
            }
        }
    }
}

/// Reads a program's hello and its memory's descriptor.
fn hello(socket: OwnedFd) -> Option<Pending> {
    let cred = net::sockopt::socket_peercred(&socket).ok()?;
    net::sockopt::set_socket_timeout(&socket, net::sockopt::Timeout::Recv, Some(HELLO_WAIT))
        .ok()?;
    let mut bytes = [0u8; layout::HELLO_SIZE];
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let received = net::recvmsg(
        &socket,
        &mut [io::IoSliceMut::new(&mut bytes)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )
    .ok()?;
    let memory = control.drain().find_map(|message| match message {
        RecvAncillaryMessage::ScmRights(mut fds) => fds.next(),
        _ => None,
    })?;
    let magic = u64::from_le_bytes(bytes[..8].try_into().ok()?);
    let version = u32::from_le_bytes(bytes[8..12].try_into().ok()?);
    let size = u64::from_le_bytes(bytes[16..24].try_into().ok()?);
    let sane = received.bytes == layout::HELLO_SIZE
        && magic == layout::MAGIC
        && version == layout::VERSION
        && size == layout::SHARED_SIZE as u64;
    sane.then(|| Pending {
        pid: cred.pid.as_raw_nonzero().get() as u32,
        uid: cred.uid.as_raw(),
        socket,
        memory,
    })
}

impl Pending {
    /// Maps the program's memory, writes `entries` into its table, and
    /// answers it: from now on its hits of those probes come to the
    /// returned [`Shared`].
    pub fn admit(self, entries: &[Entry], clock: &Clock) -> io::Result<Shared> {
        let shared = Shared::map(self.memory, self.socket, self.pid)?;
        shared.start(entries, clock);
        shared.answer(0)?;
        Ok(shared)
    }

    /// Tells the program no: it keeps to the kernel's path.
    pub fn refuse(self) {
        let _ = net::send(&self.socket, &1u32.to_le_bytes(), SendFlags::NOSIGNAL);
    }
}
