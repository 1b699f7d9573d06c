//! Resource limits (`atoll run --memory`, `--cpu-time`): they hold, they
//! fail the way a program can handle, they move with the process, and
//! children inherit them.

mod common;

use atoll_abi::status;
use atoll_migration::Mode;
use atoll_process::Limits;
use common::*;

/// The MiB each "hog: took N MiB" line reports, in order.
fn took(text: &str) -> Vec<u32> {
    text.lines()
        .filter_map(|l| {
            l.strip_prefix("hog: took ")?
                .strip_suffix(" MiB")?
                .parse()
                .ok()
        })
        .collect()
}

#[test]
fn a_memory_limit_fails_malloc_moves_with_the_process_and_is_inherited() {
    for mode in [Mode::Handover, Mode::Copy] {
        let node = node_in(mode, 2);
        // Unlimited, it takes all 40 MiB it asks for.
        let (code, out) = run(&node, &job("hog", &["40", "move", "child"]));
        assert_eq!(code, 0, "{}", out.stderr());
        assert_eq!(took(&out.stdout()), [40, 40], "{}", out.stdout());
        // With 16 MiB, malloc returns NULL below it, in the child (which
        // inherited the limit) and in the parent after it moved at 10 MiB.
        let mut spec = job("hog", &["40", "move", "child"]);
        spec.limits = Limits {
            memory: Some(16 << 20),
            ..Limits::default()
        };
        let (code, out) = run(&node, &spec);
        let text = out.stdout();
        assert_eq!(code, 0, "{mode:?}: {text}{}", out.stderr());
        let took = took(&text);
        assert!(
            took.len() == 2 && took.iter().all(|&n| (10..16).contains(&n)),
            "{mode:?}: {text}"
        );
        assert_eq!(
            text.matches("hog: malloc returned NULL").count(),
            2,
            "{text}"
        );
        assert!(
            text.contains("hog: child ended with 0\nhog: moved\n"),
            "{mode:?}: {text}"
        );
    }
}

#[test]
fn a_memory_limit_below_the_programs_own_start_is_refused_at_spawn() {
    let node = node(1);
    let mut spec = job("hog", &["1"]);
    spec.limits.memory = Some(64 << 10);
    let err = node.run_job(&spec, Box::new(NullSink)).unwrap_err();
    assert!(
        format!("{err:#}").contains("exceeds memory limits"),
        "{err:#}"
    );
}

#[test]
fn a_cpu_time_limit_ends_a_spinning_process_but_not_a_sleeping_one() {
    let node = node(2);
    let mut spec = job("spin", &[]);
    spec.limits.cpu_ns = Some(200_000_000);
    let (code, out) = run(&node, &spec);
    assert_eq!(code, status::killed(status::SIGXCPU));
    assert!(
        out.stderr()
            .contains("used up its CPU time limit (0.200 s)"),
        "{}",
        out.stderr()
    );
    // Blocked time is not CPU time: 300 ms asleep under a 50 ms limit.
    let mut spec = job("sleep", &["300"]);
    spec.limits.cpu_ns = Some(50_000_000);
    let (code, out) = run(&node, &spec);
    assert_eq!(code, 0, "{}", out.stderr());
    assert_eq!(out.stdout(), "slept at least 300ms: yes\n");
}

/// What each round of `bomb` made, in order.
fn made(text: &str) -> Vec<u32> {
    text.lines()
        .filter_map(|l| {
            l.strip_prefix("bomb: made ")?
                .split(';')
                .next()?
                .parse()
                .ok()
        })
        .collect()
}

#[test]
fn a_fork_bomb_stops_at_its_jobs_limit_and_its_places_come_back_as_it_ends() {
    let node = node(2);
    // Each holds its place half a second after its first refusal, so that
    // every process of a round tries while the others still hold theirs.
    let mut bomb = job("bomb", &["500", "2"]);
    bomb.limits.processes = Some(6);
    let (code, out) = run(&node, &bomb);
    assert_eq!(code, 0, "{}", out.stderr());
    // Five more than the first, in each round: the places of one round's
    // processes are free again for the next.
    assert_eq!(made(&out.stdout()), [5, 5], "{}", out.stdout());
    assert!(out
        .stdout()
        .contains("refused: Resource temporarily unavailable"));
    assert!(
        out.stderr()
            .contains("its job has reached --max-processes 6"),
        "{}",
        out.stderr()
    );
    node.shutdown();
}

#[test]
fn a_fork_bomb_in_a_domain_is_contained_there_and_other_domains_carry_on() {
    let node = node(2);
    node.domain_create("lab", Some(4)).unwrap();
    let mut contained = job("bomb", &["500"]);
    contained.domain = Some("lab".into());
    let (pid, out, ended) = start(&node, &contained);
    // Meanwhile, in the default domain, a job of its own limit.
    let mut other = job("bomb", &["500"]);
    other.limits.processes = Some(3);
    let (code, other_out) = run(&node, &other);
    assert_eq!((code, made(&other_out.stdout())), (0, vec![2]));
    assert_eq!(ended.recv_timeout(HANG).unwrap(), 0);
    // The domain's four: the job's first process is not one of them.
    assert_eq!(made(&out.stdout()), [4], "{pid}: {}", out.stdout());
    assert!(
        out.stderr()
            .contains("its domain lab has reached --max-processes 4"),
        "{}",
        out.stderr()
    );
    node.shutdown();
}
