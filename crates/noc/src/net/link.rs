//! Links between nodes: who is in the cluster, and the two connections
//! (control and bulk) between each pair of nodes.
//!
//! A node starts alone, or joins a cluster through any member's address
//! (`atoll node --join ADDR`). The member it dials gives it a node id (unless
//! it has one: ids given are never given again, so a node that restarts is
//! a new node and the PIDs of its former life stay dead) and the list of
//! the other members, and tells those members that it joined (`Joined`).
//! Of each pair of members, the one with the larger node id dials the
//! other, whichever learnt of the other first: nodes that join at once (a
//! Slurm allocation) still end up linked in a full mesh, with exactly one
//! connection per [`Lane`] between each pair, so that a 256 MiB pre-copy on
//! the bulk lane never queues a 64-byte IPC message behind it.
//!
//! Every connection is mutual TLS with certificates of the cluster's CA
//! ([`super::tls`]). Its first frames are the dialler's `Hello`, naming
//! the member it is (checked against its certificate), and the listener's
//! `Welcome` (checked the same way) or `Refused`. After that, only kernel
//! messages travel: each names its source and destination kernels, and a
//! peer that names a source on another node, or sends anything that does
//! not decode, loses that connection and nothing else.
//!
//! Connections are served by one thread running tokio, which reads them
//! ([`super::conn`]). A kernel sends a small message itself: it encrypts
//! and writes its frame on the control connection without waking another
//! thread. A message with bulk bytes is queued for the bulk connection's
//! task, so a kernel never spends its time encrypting a process image.
//!
//! **Failure.** A connection that says nothing for [`DEAD_AFTER`] is dead
//! (each side sends a `Ping` after [`HEARTBEAT`] of silence), and so is one
//! that closes or fails. When either connection of a peer ends, the peer is
//! down: both are closed, sends to it fail at once, and the node is told
//! (`Down`), once, so that whatever waits on that node can end. A member
//! that comes back with a new incarnation replaces the old one, whose end
//! is told the same way. A member that stops in order says so first
//! (`Leaving`, [`Links::leave`]): its end is then told as a stop, not a
//! failure.
//!
//! **Mending.** A member that was given up while it lived on (a cut link,
//! a frozen machine) is dialled again every [`MEND_EVERY`], by the side
//! with the larger id, until it answers with the same incarnation; then
//! the pair is linked again. By then each side has ended what the other
//! declared dead (the kernels fence it when they hear `Down`), so the two
//! agree on what is left. A member that answers with another incarnation
//! restarted: its former life stays down, and is no longer dialled.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use atoll_abi::KernelId;
use rustls_pki_types::ServerName;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio_rustls::{TlsAcceptor, TlsConnector, TlsStream};

use super::conn::Conn;
use super::frame::{self, FrameError};
use super::identity::Identity;
use super::tls::{self, TlsError};
use super::watch::Watch;
use super::work::{LinksWork, Owed};
use crate::{Incoming, SendError, Uplink, SMALL_BULK};

/// The largest frame on a control connection: IPC, spawn requests,
/// reports. Larger messages are refused at the sender.
pub const MAX_CONTROL: u32 = 4 << 20;
/// The largest frame on a bulk connection: a pre-copy piece is 4 MiB, but
/// a stop-and-copy without dirty tracking carries the whole memory.
pub const MAX_BULK: u32 = u32::MAX;

/// How long a dialler or a listener waits for the other's first frame.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// A connection with nothing to send sends a `Ping` this often.
pub const HEARTBEAT: Duration = Duration::from_secs(1);
/// A connection that brought nothing for this long is dead.
pub const DEAD_AFTER: Duration = Duration::from_secs(5);

/// The two connections between a pair of nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Lane {
    /// Small messages: IPC, spawn, kill, commits, console output.
    Control,
    /// Messages with bulk bytes: process images, copied memory, modules.
    Bulk,
}

impl Lane {
    fn max(self) -> u32 {
        match self {
            Lane::Control => MAX_CONTROL,
            Lane::Bulk => MAX_BULK,
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// One node of the cluster, as the others know it. A node that restarts
/// comes back with the same name and id and a new incarnation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Member {
    /// The name its certificate is issued for.
    pub name: String,
    pub node: u16,
    /// Random, chosen at start.
    pub incarnation: u64,
    /// How many kernels it runs (`node.0` to `node.kernels-1`).
    pub kernels: u16,
    /// Where the others dial it.
    pub addr: SocketAddr,
}

impl fmt::Display for Member {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node {} ({}, {})", self.node, self.name, self.addr)
    }
}

/// What travels on a connection, one per frame: `M` is what kernels say
/// to each other (the node's `Packet`).
#[derive(Debug, Serialize, Deserialize)]
pub enum Wire<M> {
    /// The dialler's first frame. `assign`: it has no node id yet.
    Hello {
        member: Member,
        lane: Lane,
        assign: bool,
    },
    /// The listener's answer: who it is, the dialler's node id, and the
    /// other members (for a joining node to dial).
    Welcome {
        member: Member,
        node: u16,
        members: Vec<Member>,
    },
    /// The listener does not take the connection, and says why.
    Refused(String),
    /// Nothing to say for a while: the link is alive.
    Ping,
    /// This member has just joined through the sender.
    Joined(Member),
    /// A message from a kernel of the sending node to a kernel of the
    /// receiving one.
    Kernel {
        from: KernelId,
        to: KernelId,
        msg: M,
        /// Whether bulk bytes come with it: they are the frame's tail.
        bulk: bool,
    },
    /// The sender is stopping in order: its links going down next is news,
    /// not a failure.
    Leaving,
}

/// How a node takes part in a cluster.
#[derive(Clone, Debug)]
pub struct LinkConfig {
    pub identity: Identity,
    /// Its node id; `None` to be given one by the member it joins through
    /// (or 0 when it starts a cluster).
    pub node: Option<u16>,
    pub kernels: u16,
    /// Where it listens for other nodes.
    pub listen: SocketAddr,
    /// Where the others should dial it, when not `listen` (a node listening
    /// on 0.0.0.0, behind NAT, in a pod).
    pub advertise: Option<SocketAddr>,
    /// A member to join through; `None` starts a cluster.
    pub join: Option<SocketAddr>,
}

/// Why a node could not start its links or join.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error("cannot listen on {addr}: {error}")]
    Listen {
        addr: SocketAddr,
        error: std::io::Error,
    },
    #[error("cannot join through {addr}: {why}")]
    Join { addr: SocketAddr, why: String },
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error("cannot start the links' thread: {0}")]
    Runtime(std::io::Error),
}

/// Delivers a message that arrived for local kernel `to`.
pub type Deliver<M> = Box<dyn Fn(KernelId, Incoming<M>) + Send + Sync>;

/// Hears that a member is down (its links failed, or it came back as a
/// new incarnation): nothing more will come from that life of it. The
/// flag is `true` if it said it was stopping (an orderly stop, not a
/// failure).
pub type Down = Box<dyn Fn(&Member, bool) + Send + Sync>;

/// Hears that a lost member is linked again (the same life of it).
pub type Mended = Box<dyn Fn(&Member) + Send + Sync>;

/// A node's links to the other members of its cluster.
pub struct Links<M> {
    shared: Arc<Shared<M>>,
    runtime: Option<tokio::runtime::Runtime>,
}

struct Shared<M> {
    me: Member,
    peers: RwLock<HashMap<u16, Peer>>,
    /// Members that went down and have not come back, by node id.
    lost: RwLock<HashMap<u16, Member>>,
    deliver: Deliver<M>,
    down: Down,
    acceptor: TlsAcceptor,
    connector: TlsConnector,
    /// Numbers connections, for `Writer::id`.
    connections: AtomicU64,
    /// Members this node is dialling now: one dial at a time per member,
    /// or two connections of one lane would replace each other.
    dialling: Mutex<HashSet<u16>>,
    /// Held while a member is admitted and attached.
    joining: tokio::sync::Mutex<()>,
    /// Lost members found restarted (another incarnation at their
    /// address): their former life is not dialled again.
    restarted: Mutex<HashSet<(u16, u64)>>,
    /// Members (node id, incarnation) that said they are stopping
    /// (`Wire::Leaving`), until their links are down.
    leaving: Mutex<HashSet<(u16, u64)>>,
    /// Told of each mended link, once set.
    mended: std::sync::OnceLock<Mended>,
    /// The links' runtime, for tasks started by a frame that a kernel's
    /// thread read ([`Uplink::poll`]).
    tasks: tokio::runtime::Handle,
    /// A lazy frame may wait on some connection ([`Uplink::send_lazy`]).
    lazy: AtomicBool,
    /// What the links' thread has to do ([`Uplink::busy`]).
    work: Arc<LinksWork>,
    /// The sockets the links' thread waits on, and those kernels poll.
    watch: Arc<Watch>,
}

/// One served connection to a peer. The id tells a connection from the
/// one that replaced it. Dropping it (the peer was given up, or replaced)
/// closes the connection.
struct Attached {
    id: u64,
    conn: Arc<Conn>,
    /// The bulk connection's queue; control frames are written at once.
    queue: Option<UnboundedSender<Outgoing>>,
}

impl Drop for Attached {
    fn drop(&mut self) {
        self.conn.close();
    }
}

/// A member and its connections, by lane (`None`: down).
struct Peer {
    member: Member,
    lanes: [Option<Attached>; 2],
}

impl Peer {
    /// Seals its connections ([`Conn::seal`]), before the node hears that
    /// it is down: nothing it sent is delivered after that news.
    fn seal(&self) {
        for a in self.lanes.iter().flatten() {
            a.conn.seal();
        }
    }
}

type Stream = TlsStream<TcpStream>;

/// A connection whose first frames went through, not yet served.
struct Dialled {
    peer: Member,
    lane: Lane,
    stream: Stream,
}

impl<M> Links<M>
where
    M: Serialize + DeserializeOwned + Send + 'static,
{
    /// Listens for other nodes and, with `config.join`, joins the cluster
    /// through that member: after this returns, every member that answered
    /// is linked on both lanes. Messages for local kernels go to `deliver`;
    /// members that go down are told to `down`.
    ///
    /// # Errors
    /// The address cannot be bound, the member joined through refuses or
    /// cannot be reached, or the identity is not usable.
    pub fn start(
        config: LinkConfig,
        deliver: Deliver<M>,
        down: Down,
    ) -> Result<Links<M>, LinkError> {
        let work = Arc::new(LinksWork::default());
        let (parks, unparks) = (work.clone(), work.clone());
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("atoll-links")
            .on_thread_park(move || parks.set_awake(false))
            .on_thread_unpark(move || unparks.set_awake(true))
            .enable_io()
            .enable_time()
            .build()
            .map_err(LinkError::Runtime)?;
        let acceptor = TlsAcceptor::from(tls::server_config(&config.identity)?);
        let connector = TlsConnector::from(tls::client_config(&config.identity)?);
        let listener = runtime
            .block_on(TcpListener::bind(config.listen))
            .map_err(|error| LinkError::Listen {
                addr: config.listen,
                error,
            })?;
        let local = listener.local_addr().map_err(|error| LinkError::Listen {
            addr: config.listen,
            error,
        })?;
        let mut incarnation = [0u8; 8];
        getrandom::fill(&mut incarnation)
            .map_err(|e| LinkError::Runtime(std::io::Error::other(e.to_string())))?;
        let mut me = Member {
            name: config.identity.name.clone(),
            node: config.node.unwrap_or(0),
            incarnation: u64::from_le_bytes(incarnation),
            kernels: config.kernels,
            addr: config.advertise.unwrap_or(local),
        };
        // The member joined through first: it gives this node its id and
        // tells it who else is there.
        let (seed, members) = match config.join {
            Some(addr) => runtime
                .block_on(join(&connector, &mut me, addr, config.node.is_none()))
                .map_err(|why| LinkError::Join { addr, why })?,
            None => (Vec::new(), Vec::new()),
        };
        let shared = Arc::new(Shared {
            me,
            peers: RwLock::default(),
            lost: RwLock::default(),
            deliver,
            down,
            acceptor,
            connector,
            connections: AtomicU64::new(0),
            dialling: Mutex::default(),
            joining: tokio::sync::Mutex::new(()),
            restarted: Mutex::default(),
            leaving: Mutex::default(),
            mended: std::sync::OnceLock::new(),
            tasks: runtime.handle().clone(),
            lazy: AtomicBool::new(false),
            work,
            watch: {
                let _runtime = runtime.enter();
                Watch::new().map_err(LinkError::Runtime)?
            },
        });
        runtime.spawn(shared.watch.clone().serve());
        {
            let _runtime = runtime.enter();
            for d in seed {
                shared.serve_dialled(d);
            }
        }
        // Serving before dialling the others: those that join at once may
        // be dialling this node meanwhile.
        runtime.spawn(listen(shared.clone(), listener));
        runtime.spawn(mend(Arc::downgrade(&shared)));
        let smaller = members.into_iter().filter(|m| m.node < shared.me.node);
        let dials: Vec<_> = smaller
            .map(|m| runtime.spawn(dial_member(shared.clone(), m)))
            .collect();
        for d in dials {
            let _ = runtime.block_on(d);
        }
        tracing::info!(me = %shared.me, "links up");
        Ok(Links {
            shared,
            runtime: Some(runtime),
        })
    }

    /// Has `mended` told of each lost member linked again, by either side
    /// (what changed while they were apart can then be exchanged). Only the
    /// first call takes effect.
    pub fn on_mended(&self, mended: Mended) {
        let _ = self.shared.mended.set(mended);
    }

    /// This node, as the others know it.
    pub fn me(&self) -> &Member {
        &self.shared.me
    }

    /// The other members linked now (both lanes up), by node id.
    pub fn members(&self) -> Vec<Member> {
        let mut members: Vec<Member> = self
            .shared
            .peers
            .read()
            .expect("peers")
            .values()
            .filter(|p| p.lanes.iter().all(Option::is_some))
            .map(|p| p.member.clone())
            .collect();
        members.sort_by_key(|m| m.node);
        members
    }

    /// Members that went down and have not come back, by node id.
    pub fn lost(&self) -> Vec<Member> {
        let mut lost = self.shared.lost_members();
        lost.sort_by_key(|m| m.node);
        lost
    }
}

impl<M> Links<M> {
    /// While `on`, the links' thread reads every connection, even those
    /// kernels poll ([`Watch::hurry`](super::watch::Watch::hurry)): a
    /// thread of this node may wait for something from another node that
    /// a kernel counted as polling cannot read.
    pub fn hurry(&self, on: bool) {
        self.shared.watch.hurry(on);
    }

    /// Tells every member that this node is stopping (`Wire::Leaving`), on
    /// both lanes: a member may notice either lane close first. The links
    /// go down when they are dropped, or when the process ends.
    pub fn leave(&self) {
        if let Ok(leaving) = frame::encode(&Wire::<()>::Leaving) {
            let peers = self.shared.peers.read().expect("peers");
            for a in peers.values().flat_map(|p| p.lanes.iter().flatten()) {
                let _ = a.conn.try_send(&[&leaving]);
            }
        }
    }
}

impl<M> Drop for Links<M> {
    /// An orderly stop: the members are told ([`Links::leave`]).
    fn drop(&mut self) {
        self.leave();
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

impl<M> Uplink<M> for Links<M>
where
    M: Serialize + DeserializeOwned + Send + 'static,
{
    fn send(
        &self,
        from: KernelId,
        to: KernelId,
        msg: M,
        bulk: Option<Vec<u8>>,
    ) -> Result<(), SendError<M>> {
        let lane = if bulk.is_some() {
            Lane::Bulk
        } else {
            Lane::Control
        };
        self.send_on(lane, from, to, msg, bulk, Pace::Now)
    }

    fn send_lazy(&self, from: KernelId, to: KernelId, msg: M) -> Result<(), SendError<M>> {
        self.send_on(Lane::Control, from, to, msg, None, Pace::Lazy)?;
        self.shared.lazy.store(true, Ordering::Release);
        Ok(())
    }

    fn polling(&self, on: bool) {
        self.shared.watch.polling(on);
    }

    fn busy(&self) -> bool {
        self.shared.work.busy()
    }

    fn settle(&self) {
        self.shared.watch.settle();
    }

    fn flush(&self) {
        if !self.shared.lazy.load(Ordering::Relaxed)
            || !self.shared.lazy.swap(false, Ordering::Acquire)
        {
            return;
        }
        for peer in self.shared.peers.read().expect("peers").values() {
            if let Some(attached) = &peer.lanes[Lane::Control.index()] {
                attached.conn.flush();
            }
        }
    }

    fn send_unordered(
        &self,
        from: KernelId,
        to: KernelId,
        msg: M,
        bulk: Vec<u8>,
    ) -> Result<(), SendError<M>> {
        let lane = if bulk.len() <= SMALL_BULK {
            Lane::Control
        } else {
            Lane::Bulk
        };
        self.send_on(lane, from, to, msg, Some(bulk), Pace::Unordered)
    }

    fn reaches(&self, to: KernelId) -> bool {
        self.shared
            .peers
            .read()
            .expect("peers")
            .get(&to.node)
            .is_some_and(|p| to.index < p.member.kernels && p.lanes.iter().all(Option::is_some))
    }

    fn linked(&self) -> Vec<(u16, u16)> {
        self.shared
            .peers
            .read()
            .expect("peers")
            .values()
            .filter(|p| p.lanes.iter().all(Option::is_some))
            .map(|p| (p.member.node, p.member.kernels))
            .collect()
    }

    /// Reads the connections that are talking (`Conn::poll`), the peers'
    /// lock released first: what is delivered may send. A kernel calls
    /// this at every turn of its spin, so quiet connections cost it a
    /// clock read each and nothing more. A bulk connection that talks is
    /// read here even while it is armed for the links' thread
    /// ([`super::watch`]): a copy a process waits for comes on one, and
    /// the links' thread, on a machine whose cores all run kernels, runs
    /// only once one of them stops polling.
    fn poll(&self) {
        let polled: SmallVec<[(Arc<Conn>, u16); 8]> = self
            .shared
            .peers
            .read()
            .expect("peers")
            .values()
            .flat_map(|p| p.lanes.iter().flatten().map(move |a| (a, p.member.node)))
            .filter(|(attached, _)| match attached.queue {
                Some(_) => attached.conn.talking() || attached.conn.polled(),
                None => attached.conn.polled(),
            })
            .map(|(attached, node)| (attached.conn.clone(), node))
            .collect();
        for (conn, node) in polled {
            conn.poll(|wire, tail| receive(&self.shared, node, wire, tail));
        }
    }
}

/// How a frame goes out ([`Links::send_on`]).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pace {
    /// Written by the calling thread, or queued for the bulk lane's task.
    Now,
    /// Left for the next write on the control lane.
    Lazy,
    /// Bulk bytes that may overtake other bulk frames: on the bulk lane,
    /// written by the calling thread unless a frame is half written.
    Unordered,
}

/// The largest unordered bulk frame a kernel writes itself rather than
/// queueing it for the lane's task: a copy that a process waits for, a
/// few milliseconds of the kernel's time at most. Handing it to the task
/// costs a wake-up of the links' thread, which on a machine whose cores
/// all run kernels waits for one of them to stop polling (a copy of 64 KiB
/// and a byte between two nodes took 280 us that way, 90 us written here).
const INLINE_BULK: usize = 4 << 20;

impl<M: Serialize> Links<M> {
    /// Sends a kernel message, and its bulk bytes as the frame's tail, on
    /// `lane`: a control frame is written by the calling thread (or, if
    /// lazy, left for the next write), a bulk one queued for its
    /// connection's task, unless it may overtake the queue ([`Pace`]).
    fn send_on(
        &self,
        lane: Lane,
        from: KernelId,
        to: KernelId,
        msg: M,
        bulk: Option<Vec<u8>>,
        pace: Pace,
    ) -> Result<(), SendError<M>> {
        let unreachable = |msg, why: String| Err(SendError::Unreachable { to, msg, why });
        let peers = self.shared.peers.read().expect("peers");
        let Some(peer) = peers.get(&to.node).filter(|p| to.index < p.member.kernels) else {
            return Err(SendError::UnknownKernel { to, msg });
        };
        let Some(attached) = &peer.lanes[lane.index()] else {
            return unreachable(msg, format!("its {lane:?} connection is down"));
        };
        let wire = Wire::Kernel {
            from,
            to,
            msg: &msg,
            bulk: bulk.is_some(),
        };
        let tail = bulk.as_ref().map_or(0, Vec::len);
        let head = match frame::encode_head(&wire, tail) {
            Ok(h) if h.len() - 4 + tail > lane.max() as usize => {
                let len = h.len() + tail;
                return unreachable(msg, format!("a message of {len} bytes is too large"));
            }
            Ok(h) => h,
            Err(e) => return unreachable(msg, e.to_string()),
        };
        let parts = [&head[..], bulk.as_deref().unwrap_or_default()];
        let Some(queue) = &attached.queue else {
            return attached
                .conn
                .send(&parts, pace == Pace::Lazy)
                .or_else(|why| unreachable(msg, why));
        };
        let inline = pace == Pace::Unordered && tail <= INLINE_BULK;
        let written = if inline {
            attached.conn.try_send(&parts)
        } else {
            Ok(false)
        };
        match written {
            Ok(true) => Ok(()),
            Ok(false) => queue
                .send(Outgoing {
                    head,
                    bulk,
                    _owed: self.shared.work.owe(),
                })
                .or_else(|_| unreachable(msg, "its connection closed".into())),
            Err(why) => unreachable(msg, why),
        }
    }
}

impl<M> Shared<M> {
    fn lost_members(&self) -> Vec<Member> {
        self.lost.read().expect("lost").values().cloned().collect()
    }

    /// Records `peer`'s connection on `lane` and returns its id and, for
    /// the bulk lane, the queue its task writes. A restarted peer (new
    /// incarnation) replaces the old.
    fn attach(
        &self,
        peer: &Member,
        lane: Lane,
        conn: Arc<Conn>,
    ) -> (u64, Option<UnboundedReceiver<Outgoing>>) {
        let (queue, rx) = match lane {
            Lane::Control => (None, None),
            Lane::Bulk => {
                let (tx, rx) = unbounded_channel();
                (Some(tx), Some(rx))
            }
        };
        let id = self.connections.fetch_add(1, Ordering::Relaxed);
        let replaced = {
            let mut peers = self.peers.write().expect("peers");
            let p = peers.entry(peer.node).or_insert_with(|| Peer {
                member: peer.clone(),
                lanes: [None, None],
            });
            let replaced = (p.member.incarnation != peer.incarnation).then(|| {
                let new = Peer {
                    member: peer.clone(),
                    lanes: [None, None],
                };
                std::mem::replace(p, new)
            });
            p.lanes[lane.index()] = Some(Attached { id, conn, queue });
            replaced
        };
        let back = self.lost.write().expect("lost").remove(&peer.node);
        // The control lane is dialled, and so attached, first.
        if let (Some(m), Some(mended), Lane::Control) = (back, self.mended.get(), lane) {
            if same_life(&m, peer) {
                mended(peer);
            }
        }
        if let Some(old) = replaced {
            old.seal();
            let old = old.member;
            tracing::warn!(%old, incarnation = peer.incarnation, "a member came back: its former life is down");
            (self.down)(&old, false);
        }
        (id, rx)
    }

    /// A connection of `peer` ended: unless it was replaced meanwhile, the
    /// peer is down. Its other connection is closed (dropped), and the node
    /// is told.
    fn detach(&self, peer: &Member, lane: Lane, connection: u64) {
        let gone = {
            let mut peers = self.peers.write().expect("peers");
            let current = peers.get(&peer.node).is_some_and(|p| {
                p.member.incarnation == peer.incarnation
                    && p.lanes[lane.index()]
                        .as_ref()
                        .is_some_and(|w| w.id == connection)
            });
            current.then(|| peers.remove(&peer.node)).flatten()
        };
        if let Some(p) = gone {
            let key = (p.member.node, p.member.incarnation);
            let stopped = self.leaving.lock().expect("leaving").remove(&key);
            if stopped {
                tracing::info!(peer = %p.member, "the member stopped");
            } else {
                tracing::warn!(peer = %p.member, ?lane, "link down: the member is down");
            }
            p.seal();
            self.lost
                .write()
                .expect("lost")
                .insert(p.member.node, p.member.clone());
            (self.down)(&p.member, stopped);
        }
    }

    /// Tells the other members that `member` joined through this node.
    fn announce(&self, member: &Member) {
        let Ok(frame) = frame::encode(&Wire::<()>::Joined(member.clone())) else {
            return;
        };
        let peers = self.peers.read().expect("peers");
        for p in peers.values().filter(|p| p.member.node != member.node) {
            if let Some(a) = &p.lanes[Lane::Control.index()] {
                let _ = a.conn.send(&[&frame], false);
            }
        }
    }

    /// Decides whether `hello` may join or link, and with which node id;
    /// returns the members to tell it about.
    fn admit(&self, member: &mut Member, assign: bool) -> Result<Vec<Member>, String> {
        let peers = self.peers.read().expect("peers");
        if assign {
            // Never an id that was used, even by a member now lost: the
            // PIDs of its former life stay dead.
            let lost = self.lost.read().expect("lost");
            member.node = peers
                .keys()
                .chain(lost.keys())
                .chain([&self.me.node])
                .max()
                .map_or(0, |&n| n + 1);
        }
        if member.node == self.me.node {
            return Err(format!("node id {} is {}'s", member.node, self.me.name));
        }
        if let Some(p) = peers.get(&member.node) {
            if p.member.name != member.name {
                return Err(format!(
                    "node id {} is taken by `{}`",
                    member.node, p.member.name
                ));
            }
        }
        if let Some(p) = peers
            .values()
            .find(|p| p.member.name == member.name && p.member.node != member.node)
        {
            return Err(format!(
                "`{}` is already node {}",
                member.name, p.member.node
            ));
        }
        Ok(peers
            .values()
            .filter(|p| p.member.node != member.node)
            .map(|p| p.member.clone())
            .collect())
    }
}

/// Joins through `addr`: both lanes to that member, which gives this node
/// its id (`me.node`) and names the other members. Of those, this node
/// dials the ones whose id is smaller than its own (`dial_member`); the
/// others dial it when they hear that it joined.
async fn join(
    connector: &TlsConnector,
    me: &mut Member,
    addr: SocketAddr,
    assign: bool,
) -> Result<(Vec<Dialled>, Vec<Member>), String> {
    let (first, node, members) = dial(connector, me, addr, Lane::Control, assign).await?;
    me.node = node;
    let bulk = dial(connector, me, addr, Lane::Bulk, false).await?.0;
    Ok((vec![first, bulk], members))
}

/// How many times, and how far apart, a member that was named is dialled
/// before it is left out: one that joined at the same time may not serve
/// its address yet.
const DIAL_TRIES: u32 = 20;
const DIAL_PAUSE: Duration = Duration::from_millis(250);

/// Links to member `m` (both lanes), trying again while it does not answer;
/// nothing if it is linked or being dialled already (it may be named by
/// the welcome and by a `Joined` notice at once).
async fn dial_member<M>(shared: Arc<Shared<M>>, m: Member)
where
    M: DeserializeOwned + Send + 'static,
{
    if !shared.dialling.lock().expect("dialling").insert(m.node) {
        return;
    }
    dial_until_linked(&shared, &m).await;
    shared.dialling.lock().expect("dialling").remove(&m.node);
}

async fn dial_until_linked<M>(shared: &Arc<Shared<M>>, m: &Member)
where
    M: DeserializeOwned + Send + 'static,
{
    for attempt in 1..=DIAL_TRIES {
        if shared.peers.read().expect("peers").contains_key(&m.node) {
            return;
        }
        match link_to(&shared.connector, &shared.me, m).await {
            Ok(both) => {
                for d in both {
                    shared.serve_dialled(d);
                }
                return;
            }
            Err(why) if attempt == DIAL_TRIES => {
                tracing::warn!(member = %m, "cannot link: {why}")
            }
            Err(_) => tokio::time::sleep(DIAL_PAUSE).await,
        }
    }
}

/// How often lost members with a smaller id are dialled again.
pub const MEND_EVERY: Duration = Duration::from_secs(2);

/// Dials the lost members this node is to dial (smaller ids) once every
/// [`MEND_EVERY`], for as long as the links live.
async fn mend<M>(shared: std::sync::Weak<Shared<M>>)
where
    M: DeserializeOwned + Send + 'static,
{
    loop {
        tokio::time::sleep(MEND_EVERY).await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        for m in shared
            .lost_members()
            .into_iter()
            .filter(|m| m.node < shared.me.node)
        {
            if shared
                .restarted
                .lock()
                .expect("restarted")
                .contains(&(m.node, m.incarnation))
                || !shared.dialling.lock().expect("dialling").insert(m.node)
            {
                continue;
            }
            tokio::spawn(mend_one(shared.clone(), m));
        }
    }
}

/// One attempt to link to lost member `m` again.
async fn mend_one<M>(shared: Arc<Shared<M>>, m: Member)
where
    M: DeserializeOwned + Send + 'static,
{
    match link_to(&shared.connector, &shared.me, &m).await {
        Ok(both) if both.iter().all(|d| same_life(&d.peer, &m)) => {
            tracing::warn!(member = %m, "link mended");
            for d in both {
                shared.serve_dialled(d);
            }
        }
        Ok(_) => {
            tracing::info!(member = %m, "restarted: its former life stays down");
            let life = (m.node, m.incarnation);
            shared.restarted.lock().expect("restarted").insert(life);
        }
        Err(why) => tracing::debug!(member = %m, "not back yet: {why}"),
    }
    shared.dialling.lock().expect("dialling").remove(&m.node);
}

fn same_life(a: &Member, b: &Member) -> bool {
    (a.node, a.incarnation) == (b.node, b.incarnation)
}

/// Dials both lanes to member `m`.
async fn link_to(
    connector: &TlsConnector,
    me: &Member,
    m: &Member,
) -> Result<[Dialled; 2], String> {
    let control = dial(connector, me, m.addr, Lane::Control, false).await?.0;
    let bulk = dial(connector, me, m.addr, Lane::Bulk, false).await?.0;
    Ok([control, bulk])
}

/// Another member says that `m` joined: if this node has the larger id, it
/// dials `m` (otherwise `m` dials this node).
fn meet<M>(shared: &Arc<Shared<M>>, m: Member)
where
    M: DeserializeOwned + Send + 'static,
{
    if m.node < shared.me.node {
        shared.tasks.spawn(dial_member(shared.clone(), m));
    }
}

/// Dials one connection: TLS, `Hello`, then the listener's `Welcome`, whose
/// member name must be the one its certificate is for.
async fn dial(
    connector: &TlsConnector,
    me: &Member,
    addr: SocketAddr,
    lane: Lane,
    assign: bool,
) -> Result<(Dialled, u16, Vec<Member>), String> {
    let tcp = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("{addr}: {e}"))?;
    let _ = tcp.set_nodelay(true);
    // The name is not checked in the handshake (see `tls`), only after.
    let name = ServerName::try_from("atoll-node").expect("a valid name");
    let mut stream: Stream = connector
        .connect(name, tcp)
        .await
        .map_err(|e| format!("TLS with {addr}: {e}"))?
        .into();
    let hello = Wire::<()>::Hello {
        member: me.clone(),
        lane,
        assign,
    };
    write(&mut stream, &hello)
        .await
        .map_err(|e| e.to_string())?;
    let answer = tokio::time::timeout(HELLO_TIMEOUT, frame::read_async(&mut stream, MAX_CONTROL))
        .await
        .map_err(|_| format!("{addr} did not answer"))?
        .map_err(|e| format!("{addr}: {e}"))?;
    match answer {
        Wire::<()>::Welcome {
            member,
            node,
            members,
        } => {
            tls::check_peer(peer_certificate(&stream)?, &member.name).map_err(|e| e.to_string())?;
            let dialled = Dialled {
                peer: member,
                lane,
                stream,
            };
            Ok((dialled, node, members))
        }
        Wire::Refused(why) => Err(format!("{addr} refused: {why}")),
        _ => Err(format!("{addr} answered out of turn")),
    }
}

fn peer_certificate(stream: &Stream) -> Result<&rustls_pki_types::CertificateDer<'static>, String> {
    let certs = match stream {
        TlsStream::Client(s) => s.get_ref().1.peer_certificates(),
        TlsStream::Server(s) => s.get_ref().1.peer_certificates(),
    };
    certs
        .and_then(|c| c.first())
        .ok_or_else(|| "the peer presented no certificate".to_owned())
}

async fn write<T: Serialize>(w: &mut (impl AsyncWrite + Unpin), msg: &T) -> Result<(), FrameError> {
    w.write_all(&frame::encode(msg)?).await?;
    w.flush().await?;
    Ok(())
}

/// Accepts connections from other nodes until the node stops.
async fn listen<M>(shared: Arc<Shared<M>>, listener: TcpListener)
where
    M: DeserializeOwned + Send + 'static,
{
    loop {
        match listener.accept().await {
            Ok((tcp, from)) => {
                let shared = shared.clone();
                tokio::spawn(async move {
                    if let Err(why) = accept(shared, tcp).await {
                        tracing::warn!(%from, "refused a connection: {why}");
                    }
                });
            }
            Err(e) => {
                tracing::warn!("accepting a connection: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// The listening side of one connection: TLS, the dialler's `Hello`
/// (checked against its certificate), then `Welcome` or `Refused`.
async fn accept<M>(shared: Arc<Shared<M>>, tcp: TcpStream) -> Result<(), String>
where
    M: DeserializeOwned + Send + 'static,
{
    let _ = tcp.set_nodelay(true);
    let handshake = async {
        let mut stream: Stream = shared
            .acceptor
            .accept(tcp)
            .await
            .map_err(|e| format!("TLS: {e}"))?
            .into();
        let hello = frame::read_async::<Wire<()>>(&mut stream, MAX_CONTROL)
            .await
            .map_err(|e| e.to_string())?;
        Ok::<_, String>((stream, hello))
    };
    let (stream, hello) = tokio::time::timeout(HELLO_TIMEOUT, handshake)
        .await
        .map_err(|_| "no hello in time".to_owned())??;
    let Wire::Hello {
        mut member,
        lane,
        assign,
    } = hello
    else {
        return Err("the first frame was not a hello".into());
    };
    tls::check_peer(peer_certificate(&stream)?, &member.name).map_err(|e| e.to_string())?;
    let conn = Conn::new(stream, lane.max(), &shared.watch, shared.work.clone())
        .map_err(|e| format!("cannot watch its socket: {e}"))?;
    let conn = Arc::new(conn);
    // Admitted and attached at once, so that a member joining meanwhile
    // is either in the welcome's list or told of this one (`Joined`).
    // Attached before the welcome goes out, so that the member can be sent
    // to as soon as it is welcomed; what kernels send meanwhile is held
    // until the welcome is out.
    let admitted = {
        let _joining = shared.joining.lock().await;
        shared.admit(&mut member, assign).and_then(|members| {
            let welcome = Wire::<()>::Welcome {
                member: shared.me.clone(),
                node: member.node,
                members,
            };
            let frame = frame::encode(&welcome).map_err(|e| e.to_string())?;
            conn.hold();
            let attached = shared.attach(&member, lane, conn.clone());
            if lane == Lane::Control {
                shared.announce(&member);
            }
            // A connection that failed here is shut down: serving it ends
            // at once, and detaches it.
            let _ = conn.release(&frame);
            Ok(attached)
        })
    };
    let (id, queue) = match admitted {
        Ok(a) => a,
        Err(why) => {
            if let Ok(refused) = frame::encode(&Wire::<()>::Refused(why.clone())) {
                let _ = conn.send_all(&[&refused]).await;
            }
            conn.close();
            return Err(format!("{member}: {why}"));
        }
    };
    tracing::info!(peer = %member, ?lane, "linked");
    tokio::spawn(serve(shared, member, lane, conn, id, queue));
    Ok(())
}

impl<M> Shared<M>
where
    M: DeserializeOwned + Send + 'static,
{
    /// Serves a dialled connection: from now on its peer is linked on its
    /// lane. Runs inside the links' runtime.
    fn serve_dialled(self: &Arc<Self>, d: Dialled) {
        let conn = match Conn::new(d.stream, d.lane.max(), &self.watch, self.work.clone()) {
            Ok(conn) => Arc::new(conn),
            Err(e) => {
                return tracing::warn!(peer = %d.peer, lane = ?d.lane, "cannot watch its socket: {e}")
            }
        };
        let (id, queue) = self.attach(&d.peer, d.lane, conn.clone());
        tokio::spawn(serve(self.clone(), d.peer, d.lane, conn, id, queue));
    }
}

/// Serves connection `id` until it fails or is closed (its peer was given
/// up, or replaced): kernel messages that come in are delivered, and the
/// bulk lane's queue goes out.
async fn serve<M>(
    shared: Arc<Shared<M>>,
    peer: Member,
    lane: Lane,
    conn: Arc<Conn>,
    id: u64,
    queue: Option<UnboundedReceiver<Outgoing>>,
) where
    M: DeserializeOwned + Send + 'static,
{
    let ping = frame::encode(&Wire::<()>::Ping).expect("a ping encodes");
    let served = conn.serve(&ping, HEARTBEAT, DEAD_AFTER, |wire, tail| {
        receive(&shared, peer.node, wire, tail)
    });
    let why = match queue {
        Some(queue) => tokio::select! {
            why = served => why,
            why = transmit(queue, &conn) => why,
        },
        None => served.await,
    };
    conn.close();
    tracing::info!(%peer, ?lane, "connection closed: {why}");
    shared.detach(&peer, lane, id);
}

/// Handles one frame from node `peer`; an error closes its connection.
fn receive<M>(
    shared: &Arc<Shared<M>>,
    peer: u16,
    wire: Wire<M>,
    tail: Vec<u8>,
) -> Result<(), String>
where
    M: DeserializeOwned + Send + 'static,
{
    let (from, to, msg, bulk) = match wire {
        Wire::Kernel {
            from,
            to,
            msg,
            bulk,
        } => (from, to, msg, bulk),
        Wire::Ping => return Ok(()),
        Wire::Joined(m) => {
            meet(shared, m);
            return Ok(());
        }
        Wire::Leaving => {
            let life = shared
                .peers
                .read()
                .expect("peers")
                .get(&peer)
                .map(|p| p.member.incarnation);
            if let Some(incarnation) = life {
                shared
                    .leaving
                    .lock()
                    .expect("leaving")
                    .insert((peer, incarnation));
            }
            return Ok(());
        }
        _ => return Err("a hello out of turn".into()),
    };
    if from.node != peer || to.node != shared.me.node || to.index >= shared.me.kernels {
        return Err(format!(
            "a message from kernel {from} to {to} cannot come from node {peer}"
        ));
    }
    let bulk = match (bulk, tail.is_empty()) {
        (true, _) => Some(tail),
        (false, true) => None,
        (false, false) => return Err(format!("{} bytes after a message without bulk", tail.len())),
    };
    (shared.deliver)(to, Incoming { from, msg, bulk });
    Ok(())
}

/// A frame queued for the bulk lane: its head, then the bulk bytes where
/// the kernel left them (never copied into the frame).
struct Outgoing {
    head: Vec<u8>,
    bulk: Option<Vec<u8>>,
    /// Counted as the links' thread's work until written or dropped.
    _owed: Owed,
}

/// Writes the bulk lane's queue, one frame after the other, each at the
/// link's pace.
async fn transmit(mut queue: UnboundedReceiver<Outgoing>, conn: &Conn) -> String {
    while let Some(out) = queue.recv().await {
        let tail = out.bulk.as_deref().unwrap_or_default();
        if let Err(why) = conn.send_all(&[&out.head, tail]).await {
            return why;
        }
    }
    "the node stopped".into()
}
