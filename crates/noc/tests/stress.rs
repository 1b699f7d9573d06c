//! Many kernels on few cores: every message arrives once, in order per sender.

use std::sync::Arc;
use std::thread;

use atoll_noc::{Doorbell, Noc};

#[test]
fn sixteen_kernels_all_to_all() {
    const K: u16 = 16;
    const PER_PAIR: u64 = 2_000;
    let doorbells: Arc<[Doorbell]> = (0..K).map(|_| Doorbell::default()).collect();
    let endpoints = Noc::build_with_doorbells::<(u16, u64)>(0, 32, doorbells);
    let handles: Vec<_> = endpoints
        .into_iter()
        .map(|mut ep| {
            thread::spawn(move || {
                ep.doorbell().bind_current_thread();
                let me = ep.id();
                let peers: Vec<_> = (0..K).filter(|&i| i != me.index).collect();
                let mut next_seq = vec![0u64; K as usize];
                let mut sent = 0u64;
                let expected = PER_PAIR * (K as u64 - 1);
                let mut received = 0u64;
                while received < expected || sent < PER_PAIR || ep.flush() {
                    if sent < PER_PAIR {
                        for &p in &peers {
                            ep.send(atoll_abi::KernelId::new(0, p), (me.index, sent))
                                .unwrap();
                        }
                        sent += 1;
                    }
                    ep.flush();
                    ep.doorbell().take();
                    while let Some(m) = ep.try_recv() {
                        let (from, seq) = m.msg;
                        assert_eq!(from, m.from.index);
                        assert_eq!(seq, next_seq[from as usize], "lost or duplicated message");
                        next_seq[from as usize] += 1;
                        received += 1;
                    }
                    if sent == PER_PAIR && received < expected && !ep.flush() {
                        ep.doorbell()
                            .sleep(Some(std::time::Duration::from_millis(5)));
                    }
                }
                received
            })
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), PER_PAIR * (K as u64 - 1));
    }
}
