//! Links between nodes over loopback: mutual TLS with certificates from the
//! cluster's CA, frames across it, and the peers and bytes that must be
//! refused without disturbing anything else.

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use atoll_abi::KernelId;
use atoll_noc::net::frame;
use atoll_noc::net::identity::{self, Identity};
use atoll_noc::net::{tls, LinkConfig, Links};
use atoll_noc::{Incoming, SendError, Uplink};
use rustls::{ClientConnection, ServerConnection, StreamOwned};
use serde::{Deserialize, Serialize};

#[derive(Debug, PartialEq, Serialize, Deserialize)]
enum Msg {
    Hello { node: String },
    Data(Vec<u8>),
}

const MAX: u32 = 1 << 20;

fn cluster(dir: &Path, nodes: &[&str]) -> Vec<Identity> {
    identity::init_ca(dir).unwrap();
    nodes
        .iter()
        .map(|n| {
            identity::issue(dir, n).unwrap();
            Identity::load(dir, n).unwrap()
        })
        .collect()
}

/// Accepts one link as `server` and runs `serve` on it; returns what it
/// returned, or the handshake's error.
fn listen<T: Send + 'static>(
    server: Identity,
    serve: impl FnOnce(&mut StreamOwned<ServerConnection, TcpStream>) -> T + Send + 'static,
) -> (u16, thread::JoinHandle<Result<T, String>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let config = tls::server_config(&server).unwrap();
    let handle = thread::spawn(move || {
        let (tcp, _) = listener.accept().unwrap();
        let conn = ServerConnection::new(config).unwrap();
        let mut link = StreamOwned::new(conn, tcp);
        while link.conn.is_handshaking() {
            link.conn
                .complete_io(&mut link.sock)
                .map_err(|e| e.to_string())?;
        }
        Ok(serve(&mut link))
    });
    (port, handle)
}

fn dial(
    client: &Identity,
    port: u16,
    name: &str,
) -> Result<StreamOwned<ClientConnection, TcpStream>, String> {
    let config = tls::client_config(client).unwrap();
    let conn = ClientConnection::new(config, tls::server_name(name).unwrap()).unwrap();
    let mut link = StreamOwned::new(conn, TcpStream::connect(("127.0.0.1", port)).unwrap());
    while link.conn.is_handshaking() {
        link.conn
            .complete_io(&mut link.sock)
            .map_err(|e| e.to_string())?;
    }
    Ok(link)
}

#[test]
fn two_nodes_of_one_cluster_exchange_frames_and_know_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let mut ids = cluster(dir.path(), &["alpha", "beta"]);
    let beta = ids.pop().unwrap();
    let alpha = ids.pop().unwrap();
    let (port, server) = listen(alpha, |link| {
        let hello: Msg = frame::read(link, MAX).unwrap();
        let Msg::Hello { node } = &hello else {
            panic!("{hello:?}")
        };
        // The claim is checked against the certificate the peer presented.
        let cert = link.conn.peer_certificates().unwrap()[0].clone();
        tls::check_peer(&cert, node).unwrap();
        assert!(tls::check_peer(&cert, "alpha").is_err());
        let data: Msg = frame::read(link, MAX).unwrap();
        frame::write(link, &data).unwrap();
        link.flush().unwrap();
        node.clone()
    });
    let mut link = dial(&beta, port, "alpha").unwrap();
    frame::write(
        &mut link,
        &Msg::Hello {
            node: "beta".into(),
        },
    )
    .unwrap();
    frame::write(&mut link, &Msg::Data(vec![7; 100_000])).unwrap();
    link.flush().unwrap();
    assert_eq!(
        frame::read::<Msg>(&mut link, MAX).unwrap(),
        Msg::Data(vec![7; 100_000])
    );
    assert_eq!(server.join().unwrap().unwrap(), "beta");
}

#[test]
fn a_listener_is_known_by_its_certificate_not_by_the_name_dialled() {
    // Nodes are dialled by address (`--join ADDR`): the handshake accepts
    // any certificate of the cluster's CA, and the name the listener then
    // claims is checked against its certificate.
    let dir = tempfile::tempdir().unwrap();
    let mut ids = cluster(dir.path(), &["alpha", "beta"]);
    let beta = ids.pop().unwrap();
    let (port, server) = listen(ids.pop().unwrap(), |_| ());
    let link = dial(&beta, port, "gamma").unwrap();
    let cert = link.conn.peer_certificates().unwrap()[0].clone();
    tls::check_peer(&cert, "alpha").unwrap();
    let err = tls::check_peer(&cert, "gamma").unwrap_err().to_string();
    assert!(err.contains("not valid for node `gamma`"), "{err}");
    drop(link);
    server.join().unwrap().unwrap();
}

#[test]
fn a_node_of_another_cluster_is_refused_both_ways() {
    let ours = tempfile::tempdir().unwrap();
    let theirs = tempfile::tempdir().unwrap();
    let alpha = cluster(ours.path(), &["alpha"]).pop().unwrap();
    let stranger = cluster(theirs.path(), &["beta"]).pop().unwrap();
    // Whoever dials, the dialler checks the listener's certificate first
    // and refuses it (unknown issuer); the listener sees the link fail.
    let (port, server) = listen(alpha, |_| ());
    let err = dial(&stranger, port, "alpha").unwrap_err();
    assert!(err.contains("UnknownIssuer"), "{err}");
    assert!(server.join().unwrap().is_err());
    let alpha = Identity::load(ours.path(), "alpha").unwrap();
    let (port, server) = listen(stranger, |_| ());
    let err = dial(&alpha, port, "beta").unwrap_err();
    assert!(err.contains("UnknownIssuer"), "{err}");
    assert!(server.join().unwrap().is_err());
}

#[test]
fn a_listener_refuses_a_client_certificate_from_another_cluster() {
    // The stranger holds our listener's CA as its trust root (it knows whom
    // it dials) but its own certificate comes from elsewhere.
    let ours = tempfile::tempdir().unwrap();
    let theirs = tempfile::tempdir().unwrap();
    let alpha = cluster(ours.path(), &["alpha"]).pop().unwrap();
    let mut stranger = cluster(theirs.path(), &["beta"]).pop().unwrap();
    stranger.ca = alpha.ca.clone();
    let (port, server) = listen(alpha, |_| ());
    // TLS 1.3: the client may finish before the listener has judged it.
    if let Ok(mut link) = dial(&stranger, port, "alpha") {
        let _ = frame::write(
            &mut link,
            &Msg::Hello {
                node: "beta".into(),
            },
        );
        let _ = link.flush();
    }
    let err = server.join().unwrap().unwrap_err();
    assert!(err.contains("UnknownIssuer"), "{err}");
}

#[test]
fn a_client_without_a_certificate_or_speaking_garbage_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let alpha = cluster(dir.path(), &["alpha"]).pop().unwrap();
    let ca = alpha.ca.clone();
    let (port, server) = listen(alpha, |_| ());
    // TLS that trusts our CA but presents no certificate.
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let conn = ClientConnection::new(config.into(), tls::server_name("alpha").unwrap()).unwrap();
    let mut link = StreamOwned::new(conn, TcpStream::connect(("127.0.0.1", port)).unwrap());
    let _ = frame::write(
        &mut link,
        &Msg::Hello {
            node: "anyone".into(),
        },
    );
    let _ = link.flush();
    let err = server.join().unwrap().unwrap_err();
    assert!(
        err.contains("NoCertificatesPresented") || err.contains("certificate"),
        "{err}"
    );

    let dir = tempfile::tempdir().unwrap();
    let alpha = cluster(dir.path(), &["alpha"]).pop().unwrap();
    let (port, server) = listen(alpha, |_| ());
    let mut tcp = TcpStream::connect(("127.0.0.1", port)).unwrap();
    tcp.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let err = server.join().unwrap().unwrap_err();
    assert!(!err.is_empty());
}

#[test]
fn a_garbled_frame_fails_its_link_only() {
    let dir = tempfile::tempdir().unwrap();
    let mut ids = cluster(dir.path(), &["alpha", "beta"]);
    let beta = ids.pop().unwrap();
    let alpha = ids.pop().unwrap();
    let (port, server) = listen(alpha, |link| {
        let first = frame::read::<Msg>(link, MAX);
        let second = frame::read::<Msg>(link, 64);
        (
            first.map_err(|e| e.to_string()),
            second.map_err(|e| e.to_string()),
        )
    });
    let mut link = dial(&beta, port, "alpha").unwrap();
    // A frame of the right length and version whose message is nonsense.
    let version = frame::VERSION.to_le_bytes();
    link.write_all(&[4, 0, 0, 0, version[0], version[1], 99, 99])
        .unwrap();
    // Then a length beyond what the reader accepts.
    link.write_all(&u32::MAX.to_le_bytes()).unwrap();
    link.flush().unwrap();
    let (first, second) = server.join().unwrap().unwrap();
    assert!(first.unwrap_err().contains("does not decode"));
    assert!(second.unwrap_err().contains("larger than"));
}

/// Starts the links of node `id`, joining through `join`; what arrives
/// for its kernels comes out of the receiver.
fn links(
    id: Identity,
    kernels: u16,
    join: Option<std::net::SocketAddr>,
) -> (Links<String>, Arrivals) {
    links_telling_down(id, kernels, join, Box::new(|_, _| ()))
}

fn links_telling_down(
    id: Identity,
    kernels: u16,
    join: Option<std::net::SocketAddr>,
    down: atoll_noc::net::Down,
) -> (Links<String>, Arrivals) {
    let (tx, rx) = std::sync::mpsc::channel();
    let config = LinkConfig {
        identity: id,
        node: None,
        kernels,
        listen: "127.0.0.1:0".parse().unwrap(),
        advertise: None,
        join,
    };
    let deliver = Box::new(move |to, m| tx.send((to, m)).unwrap());
    (Links::start(config, deliver, down).unwrap(), rx)
}

/// What arrives for a node's kernels, with the kernel it is for.
type Arrivals = std::sync::mpsc::Receiver<(KernelId, Incoming<String>)>;

/// Two linked nodes of one kernel each, and what arrives for node 1's
/// kernel.
fn two_nodes() -> (tempfile::TempDir, Links<String>, Links<String>, Arrivals) {
    let dir = tempfile::tempdir().unwrap();
    let mut ids = cluster(dir.path(), &["n0", "n1"]).into_iter();
    let (l0, _r0) = links(ids.next().unwrap(), 1, None);
    let (l1, r1) = links(ids.next().unwrap(), 1, Some(l0.me().addr));
    (dir, l0, l1, r1)
}

#[test]
fn links_join_through_any_member_and_carry_both_lanes() {
    let dir = tempfile::tempdir().unwrap();
    let mut ids = cluster(dir.path(), &["n0", "n1", "n2"]).into_iter();
    let (l0, r0) = links(ids.next().unwrap(), 2, None);
    let (l1, r1) = links(ids.next().unwrap(), 2, Some(l0.me().addr));
    // The third joins through the second, and is told about the first.
    let (l2, r2) = links(ids.next().unwrap(), 1, Some(l1.me().addr));
    assert_eq!(
        [l0.me().node, l1.me().node, l2.me().node],
        [0, 1, 2],
        "ids are given in join order"
    );
    let nodes = |l: &Links<String>| l.members().iter().map(|m| m.node).collect::<Vec<_>>();
    assert_eq!(nodes(&l2), [0, 1]);
    let t = std::time::Instant::now();
    while nodes(&l0) != [1, 2] {
        assert!(t.elapsed().as_secs() < 10, "{:?}", nodes(&l0));
        thread::sleep(Duration::from_millis(10));
    }
    let k = KernelId::new;
    l2.send(k(2, 0), k(0, 1), "hello".into(), None).unwrap();
    let (to, m) = r0.recv().unwrap();
    assert_eq!(
        (to, m.from, m.msg, m.bulk),
        (k(0, 1), k(2, 0), "hello".into(), None)
    );
    // Bulk bytes beyond a control frame's limit take the bulk lane.
    let image = vec![7u8; 5 << 20];
    l0.send(k(0, 1), k(1, 1), "image".into(), Some(image.clone()))
        .unwrap();
    let (to, m) = r1.recv().unwrap();
    assert_eq!(
        (to, m.msg.as_str(), m.bulk),
        (k(1, 1), "image", Some(image))
    );
    // Kernels and nodes that do not exist are refused at the sender.
    assert!(l1.reaches(k(2, 0)) && !l1.reaches(k(2, 1)) && !l1.reaches(k(7, 0)));
    assert!(matches!(
        l1.send(k(1, 0), k(2, 1), "x".into(), None),
        Err(SendError::UnknownKernel { .. })
    ));
    assert!(r2.try_recv().is_err());
}

/// A node that stops in order says so: the others hear that it stopped,
/// not that its links failed, and only once.
#[test]
fn a_member_that_stops_is_heard_as_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let mut ids = cluster(dir.path(), &["n0", "n1"]).into_iter();
    let (tx, downs) = std::sync::mpsc::channel();
    let down = Box::new(move |m: &atoll_noc::net::Member, stopped| {
        tx.send((m.node, m.incarnation, stopped)).unwrap();
    });
    let (l0, _r0) = links_telling_down(ids.next().unwrap(), 1, None, down);
    let (l1, _r1) = links(ids.next().unwrap(), 1, Some(l0.me().addr));
    let t = std::time::Instant::now();
    while l0.members().is_empty() {
        assert!(t.elapsed().as_secs() < 10, "node 1 never linked");
        thread::sleep(Duration::from_millis(10));
    }
    let life = l1.me().incarnation;
    drop(l1);
    let heard = downs.recv_timeout(Duration::from_secs(30)).unwrap();
    assert_eq!(heard, (1, life, true));
    assert!(downs.recv_timeout(Duration::from_millis(300)).is_err());
    assert_eq!(l0.lost().len(), 1);
}

/// Kernels write control frames to a link themselves, from their own
/// threads, while the bulk lane's task writes large frames a piece at a
/// time: under that load, with the sockets full, every frame arrives whole,
/// once, in each sender's order.
#[test]
fn concurrent_senders_and_large_frames_never_interleave() {
    let dir = tempfile::tempdir().unwrap();
    let mut ids = cluster(dir.path(), &["n0", "n1"]).into_iter();
    let (l0, _r0) = links(ids.next().unwrap(), 4, None);
    // The receiver stalls at its first message, so that the senders find
    // the sockets full and leave the rest to the connections' tasks.
    let (tx, r1) = std::sync::mpsc::channel();
    let stalled = AtomicBool::new(false);
    let deliver = Box::new(move |to, m: Incoming<String>| {
        if !stalled.swap(true, Ordering::Relaxed) {
            thread::sleep(Duration::from_millis(300));
        }
        tx.send((to, m)).unwrap();
    });
    let config = LinkConfig {
        identity: ids.next().unwrap(),
        node: None,
        kernels: 1,
        listen: "127.0.0.1:0".parse().unwrap(),
        advertise: None,
        join: Some(l0.me().addr),
    };
    let _l1 = Links::start(config, deliver, Box::new(|_, _| ())).unwrap();
    let l0 = Arc::new(l0);
    let k = KernelId::new;
    const MESSAGES: usize = 2000;
    const IMAGES: usize = 12;
    let senders: Vec<_> = (0..3u16)
        .map(|kernel| {
            let l0 = l0.clone();
            thread::spawn(move || {
                for i in 0..MESSAGES {
                    // Long enough to fill the socket between two reads.
                    let msg = format!("{kernel}:{i}:{}", "x".repeat(i % 3000));
                    l0.send(k(0, kernel), k(1, 0), msg, None).unwrap();
                }
            })
        })
        .collect();
    let images = {
        let l0 = l0.clone();
        thread::spawn(move || {
            for i in 0..IMAGES {
                let image = vec![i as u8; (3 << 20) + i * 4097];
                l0.send(k(0, 3), k(1, 0), format!("image {i}"), Some(image))
                    .unwrap();
            }
        })
    };
    let mut next = [0usize; 3];
    let mut next_image = 0;
    while next.iter().any(|&n| n < MESSAGES) || next_image < IMAGES {
        let (to, m) = r1
            .recv_timeout(Duration::from_secs(30))
            .expect("every frame arrives");
        assert_eq!(to, k(1, 0));
        if let Some(bulk) = m.bulk {
            assert_eq!(m.from, k(0, 3));
            assert_eq!(m.msg, format!("image {next_image}"));
            assert_eq!(bulk.len(), (3 << 20) + next_image * 4097);
            assert!(bulk.iter().all(|&b| b == next_image as u8));
            next_image += 1;
            continue;
        }
        let kernel = m.from.index as usize;
        let mut parts = m.msg.splitn(3, ':');
        assert_eq!(parts.next(), Some(kernel.to_string().as_str()));
        let i: usize = parts.next().unwrap().parse().unwrap();
        assert_eq!(i, next[kernel], "kernel {kernel}'s messages in order");
        assert_eq!(parts.next().unwrap().len(), i % 3000);
        next[kernel] += 1;
    }
    for s in senders {
        s.join().unwrap();
    }
    images.join().unwrap();
    assert!(r1.try_recv().is_err(), "nothing more, nothing twice");
}

/// A kernel's thread polling `links` until `done`, by spells as kernels
/// do between their slices: the links' thread and the pollers take turns.
fn poll_in_spells(links: Arc<Links<String>>, done: Arc<AtomicBool>) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        while !done.load(Ordering::Relaxed) {
            links.polling(true);
            for _ in 0..1000 {
                links.poll();
            }
            links.polling(false);
            thread::yield_now();
        }
    })
}

/// Idle kernels read the control connections themselves (`Uplink::poll`)
/// while the links' thread reads them too: every frame is handed over
/// once, in its sender's order, whoever read it.
#[test]
fn frames_read_by_polling_kernels_arrive_once_and_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let mut ids = cluster(dir.path(), &["n0", "n1"]).into_iter();
    let (l0, _r0) = links(ids.next().unwrap(), 1, None);
    let (l1, r1) = links(ids.next().unwrap(), 2, Some(l0.me().addr));
    let l1 = Arc::new(l1);
    let done = Arc::new(AtomicBool::new(false));
    let pollers: Vec<_> = (0..2)
        .map(|_| poll_in_spells(l1.clone(), done.clone()))
        .collect();
    let k = KernelId::new;
    let mut sent = 0usize;
    for round in 0..100 {
        // Bursts for the readers to race over, and single messages that
        // the pollers take before the links' thread wakes.
        let burst = if round % 10 == 0 { 200 } else { 1 };
        for _ in 0..burst {
            let long = "x".repeat(sent % 5000);
            l0.send(k(0, 0), k(1, 1), format!("{sent}:{long}"), None)
                .unwrap();
            sent += 1;
        }
        thread::sleep(Duration::from_millis(5));
    }
    for i in 0..sent {
        let (to, m) = r1.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!((to, m.from), (k(1, 1), k(0, 0)));
        let (n, long) = m.msg.split_once(':').unwrap();
        assert_eq!(n, i.to_string(), "in order, once each");
        assert_eq!(long.len(), i % 5000);
    }
    assert!(r1.try_recv().is_err(), "nothing twice");
    done.store(true, Ordering::Relaxed);
    for p in pollers {
        p.join().unwrap();
    }
}

/// Bulk bytes whose order does not matter (`send_unordered`) travel with
/// the small messages when they are few: a 4 KiB copy is not queued
/// behind a 64 MiB image on its way. More than `SMALL_BULK` of them take
/// the bulk lane, written by the sender unless a frame is half written
/// there, and arrive whole all the same.
#[test]
fn a_few_unordered_bulk_bytes_overtake_a_large_transfer() {
    let (_dir, l0, _l1, r1) = two_nodes();
    let k = KernelId::new;
    // Both lanes carry a frame first, so that the receiver reads both
    // connections before the race: a sender may see the link up while the
    // receiver has yet to start reading one lane, and a loaded machine then
    // delivers in the order the readers started, not the lanes' order.
    l0.send(k(0, 0), k(1, 0), "hello".into(), None).unwrap();
    l0.send(k(0, 0), k(1, 0), "hello bulk".into(), Some(vec![0u8; 1]))
        .unwrap();
    for _ in 0..2 {
        r1.recv_timeout(Duration::from_secs(30)).unwrap();
    }
    let image = vec![1u8; 64 << 20];
    l0.send(k(0, 0), k(1, 0), "image".into(), Some(image))
        .unwrap();
    l0.send_unordered(k(0, 0), k(1, 0), "copy".into(), vec![2u8; 4096])
        .unwrap();
    let big = vec![3u8; atoll_noc::SMALL_BULK + 1];
    l0.send_unordered(k(0, 0), k(1, 0), "big copy".into(), big.clone())
        .unwrap();
    let mut got = Vec::new();
    for _ in 0..3 {
        let (_, m) = r1.recv_timeout(Duration::from_secs(30)).unwrap();
        got.push((m.msg, m.bulk.map(|b| (b.len(), b[0]))));
    }
    assert_eq!(got[0], ("copy".into(), Some((4096, 2))), "{got:?}");
    // The big copy goes before the image if it found the bulk lane free.
    got[1..].sort();
    assert_eq!(
        got[1..],
        [
            ("big copy".into(), Some((big.len(), 3))),
            ("image".into(), Some((64 << 20, 1))),
        ]
    );
}

/// Unordered bulk frames written by their senders' threads, while the
/// lane's task writes large ordered frames a piece at a time and kernels
/// poll the receiving end: none cuts into another frame, the ordered ones
/// keep their order, and every one arrives whole, once.
#[test]
fn unordered_bulk_frames_never_cut_into_ordered_ones() {
    let (_dir, l0, l1, r1) = two_nodes();
    let (l0, l1) = (Arc::new(l0), Arc::new(l1));
    let k = KernelId::new;
    let done = Arc::new(AtomicBool::new(false));
    let poller = poll_in_spells(l1.clone(), done.clone());
    const ROUNDS: usize = 40;
    let copier = {
        let l0 = l0.clone();
        thread::spawn(move || {
            for i in 0..ROUNDS {
                let len = atoll_noc::SMALL_BULK + 1 + i * 4096;
                l0.send_unordered(k(0, 0), k(1, 0), format!("copy {i}"), vec![i as u8; len])
                    .unwrap();
            }
        })
    };
    for i in 0..ROUNDS {
        l0.send(
            k(0, 0),
            k(1, 0),
            format!("image {i}"),
            Some(vec![i as u8; 3 << 20]),
        )
        .unwrap();
    }
    copier.join().unwrap();
    let (mut images, mut copies) = (0, 0);
    for _ in 0..2 * ROUNDS {
        let (_, m) = r1.recv_timeout(Duration::from_secs(60)).unwrap();
        let (kind, i) = m.msg.split_once(' ').unwrap();
        let i: usize = i.parse().unwrap();
        let bulk = m.bulk.unwrap();
        assert!(bulk.iter().all(|&b| b == i as u8), "{} is whole", m.msg);
        match kind {
            "image" => {
                assert_eq!((i, bulk.len()), (images, 3 << 20), "in order");
                images += 1;
            }
            _ => {
                assert_eq!(bulk.len(), atoll_noc::SMALL_BULK + 1 + i * 4096);
                copies += 1;
            }
        }
    }
    assert_eq!((images, copies), (ROUNDS, ROUNDS));
    assert!(r1.try_recv().is_err(), "nothing twice");
    done.store(true, Ordering::Relaxed);
    poller.join().unwrap();
}

/// A lazy frame waits: it goes out with the next frame to its node, ahead
/// of it, or alone at the next flush, and never after a frame sent later.
#[test]
fn a_lazy_frame_shares_the_next_write_or_goes_at_the_flush() {
    let (_dir, l0, _l1, r1) = two_nodes();
    let k = KernelId::new;
    let wait = Duration::from_secs(30);
    l0.send(k(0, 0), k(1, 0), "hello".into(), None).unwrap();
    assert_eq!(r1.recv_timeout(wait).unwrap().1.msg, "hello");

    l0.send_lazy(k(0, 0), k(1, 0), "taken".into()).unwrap();
    // The heartbeat flushes only what waited a whole beat (1 s).
    thread::sleep(Duration::from_millis(200));
    assert!(r1.try_recv().is_err(), "a lazy frame waits");
    l0.send(k(0, 0), k(1, 0), "reply".into(), None).unwrap();
    let got: Vec<_> = (0..2)
        .map(|_| r1.recv_timeout(wait).unwrap().1.msg)
        .collect();
    assert_eq!(got, ["taken", "reply"], "with the next frame, in order");

    l0.send_lazy(k(0, 0), k(1, 0), "alone".into()).unwrap();
    l0.flush();
    assert_eq!(r1.recv_timeout(wait).unwrap().1.msg, "alone");
    l0.flush();
    assert!(r1.recv_timeout(Duration::from_millis(200)).is_err(), "once");
}

/// While kernels poll, the links' thread leaves the talking connections
/// to them; once the last has stopped and one settles (a kernel going to
/// sleep, or the quantum ticker's tick), what came meanwhile and was not
/// polled is read by the links' thread all the same.
#[test]
fn what_comes_while_kernels_poll_is_read_by_them_or_after_them() {
    let (_dir, l0, l1, r1) = two_nodes();
    let k = KernelId::new;
    let wait = Duration::from_secs(30);
    for round in 0..20 {
        l0.send(k(0, 0), k(1, 0), format!("talk {round}"), None)
            .unwrap();
        assert_eq!(
            r1.recv_timeout(wait).unwrap().1.msg,
            format!("talk {round}")
        );
        l1.polling(true);
        l0.send(k(0, 0), k(1, 0), format!("polled {round}"), None)
            .unwrap();
        let polled = loop {
            l1.poll();
            if let Ok((_, m)) = r1.try_recv() {
                break m.msg;
            }
        };
        assert_eq!(polled, format!("polled {round}"));
        // Nobody polls this one before the last poller stops.
        l0.send(k(0, 0), k(1, 0), format!("after {round}"), None)
            .unwrap();
        thread::sleep(Duration::from_millis(1));
        l1.polling(false);
        l1.settle();
        assert_eq!(
            r1.recv_timeout(wait).unwrap().1.msg,
            format!("after {round}")
        );
    }
}
