//! The shape of the DQDT over the nodes of the moment.
//!
//! A node with `K` kernels is a quaternary tree of height `h`, the least
//! with `4^h >= K`: level 0 is its kernels, level 1 groups them by four, and
//! so on up to the node's root. Above the nodes, level 1 groups node ids by
//! four, and so on up to the cluster's root. A node alone is its own root.
//! Groups are aligned (a group of level `l` starts at a multiple of `4^l`),
//! so a subtree is named by its level and its first member, and every
//! kernel computes the same tree from the same members.

use atoll_abi::KernelId;
use serde::{Deserialize, Serialize};

/// A subtree of the DQDT.
///
/// Shown, and written in JSON, as `kernel 0.3`, `kernels 0.0-0.15` or
/// `nodes 0-3`; binary encodings carry its fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Subtree {
    /// Kernels `first` to `first + 4^level - 1` of `node` (a leaf at level 0).
    Kernels { node: u16, level: u8, first: u16 },
    /// The nodes with ids `first` to `first + 4^level - 1`; `level >= 1`.
    Nodes { level: u8, first: u16 },
}

impl std::fmt::Display for Subtree {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Subtree::Kernels {
                node,
                level: 0,
                first,
            } => write!(f, "kernel {node}.{first}"),
            Subtree::Kernels { node, level, first } => {
                let last = (u32::from(first) + span(level) - 1).min(u32::from(u16::MAX));
                write!(f, "kernels {node}.{first}-{node}.{last}")
            }
            Subtree::Nodes { level, first } => {
                let last = (u32::from(first) + span(level) - 1).min(u32::from(u16::MAX));
                write!(f, "nodes {first}-{last}")
            }
        }
    }
}

impl std::str::FromStr for Subtree {
    type Err = String;

    fn from_str(s: &str) -> Result<Subtree, String> {
        let bad = || format!("`{s}`: expected `kernel N.I`, `kernels N.F-N.L` or `nodes F-L`");
        let kernel = |k: &str| {
            let (n, i) = k.split_once('.').ok_or_else(bad)?;
            Ok::<_, String>((
                n.parse::<u16>().map_err(|_| bad())?,
                i.parse::<u32>().map_err(|_| bad())?,
            ))
        };
        // A group of `first..=last` is aligned and spans a power of four.
        let group = |first: u32, last: u32| {
            let level = height_for(last.checked_sub(first).ok_or_else(bad)? + 1);
            let fits = span(level) == last - first + 1 && first.is_multiple_of(span(level));
            let first = u16::try_from(first).map_err(|_| bad())?;
            fits.then_some((level, first)).ok_or_else(bad)
        };
        match s.split_once(' ').ok_or_else(bad)? {
            ("kernel", k) => {
                let (node, first) = kernel(k)?;
                let first = u16::try_from(first).map_err(|_| bad())?;
                Ok(Subtree::Kernels {
                    node,
                    level: 0,
                    first,
                })
            }
            ("kernels", range) => {
                let (a, b) = range.split_once('-').ok_or_else(bad)?;
                let ((node, first), (node_b, last)) = (kernel(a)?, kernel(b)?);
                if node != node_b {
                    return Err(bad());
                }
                let (level, first) = group(first, last)?;
                Ok(Subtree::Kernels { node, level, first })
            }
            ("nodes", range) => {
                let (a, b) = range.split_once('-').ok_or_else(bad)?;
                let parse = |x: &str| x.parse::<u32>().map_err(|_| bad());
                let (level, first) = group(parse(a)?, parse(b)?)?;
                if level == 0 {
                    return Err(bad());
                }
                Ok(Subtree::Nodes { level, first })
            }
            _ => Err(bad()),
        }
    }
}

/// The fields of a [`Subtree`], for binary encodings.
#[derive(Serialize, Deserialize)]
enum Fields {
    Kernels { node: u16, level: u8, first: u16 },
    Nodes { level: u8, first: u16 },
}

impl Serialize for Subtree {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            return s.collect_str(self);
        }
        match *self {
            Subtree::Kernels { node, level, first } => Fields::Kernels { node, level, first },
            Subtree::Nodes { level, first } => Fields::Nodes { level, first },
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for Subtree {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Subtree, D::Error> {
        if d.is_human_readable() {
            let s = String::deserialize(d)?;
            return s.parse().map_err(serde::de::Error::custom);
        }
        Ok(match Fields::deserialize(d)? {
            Fields::Kernels { node, level, first } => Subtree::Kernels { node, level, first },
            Fields::Nodes { level, first } => Subtree::Nodes { level, first },
        })
    }
}

/// In JSON a subtree is the string `atoll top` shows.
impl schemars::JsonSchema for Subtree {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Subtree".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A subtree of the DQDT: a kernel (\"kernel 0.3\"), kernels of a \
                            node (\"kernels 0.0-0.3\") or nodes (\"nodes 0-3\").",
            "type": "string",
            "pattern": r"^(kernel [0-9]+\.[0-9]+|kernels [0-9]+\.[0-9]+-[0-9]+\.[0-9]+|nodes [0-9]+-[0-9]+)$"
        })
    }
}

/// How many members a group of `level` spans: `4^level`.
fn span(level: u8) -> u32 {
    1u32 << (2 * u32::from(level))
}

/// The least height whose groups hold `n` members.
fn height_for(n: u32) -> u8 {
    let mut h = 0;
    while span(h) < n {
        h += 1;
    }
    h
}

/// The first member of the group of `level` that holds `member`.
fn align(member: u16, level: u8) -> u16 {
    (u32::from(member) & !(span(level) - 1)) as u16
}

/// The nodes of the cluster and their kernel counts, which decide the tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shape {
    /// (node id, kernels), sorted by id, each with at least one kernel.
    nodes: Vec<(u16, u16)>,
}

impl Shape {
    /// The shape over `nodes` (node id, kernel count), in any order; nodes
    /// without kernels are left out.
    ///
    /// # Panics
    /// If no node has a kernel.
    pub fn new(nodes: impl IntoIterator<Item = (u16, u16)>) -> Shape {
        let mut nodes: Vec<(u16, u16)> = nodes.into_iter().filter(|&(_, k)| k > 0).collect();
        nodes.sort_unstable();
        nodes.dedup_by_key(|&mut (n, _)| n);
        assert!(!nodes.is_empty(), "a DQDT needs at least one kernel");
        Shape { nodes }
    }

    /// Every kernel of the shape, node by node.
    pub fn kernels(&self) -> impl Iterator<Item = KernelId> + '_ {
        self.nodes
            .iter()
            .flat_map(|&(n, k)| (0..k).map(move |i| KernelId::new(n, i)))
    }

    fn kernels_of(&self, node: u16) -> Option<u16> {
        self.nodes
            .binary_search_by_key(&node, |&(n, _)| n)
            .ok()
            .map(|i| self.nodes[i].1)
    }

    /// The height of the levels above the nodes (0 for a node alone).
    fn nodes_height(&self) -> u8 {
        if self.nodes.len() == 1 {
            return 0;
        }
        let top = u32::from(self.nodes.last().expect("a node").0) + 1;
        height_for(top).max(1)
    }

    /// The subtree of all of `node`'s kernels.
    pub fn node_root(&self, node: u16) -> Option<Subtree> {
        let kernels = self.kernels_of(node)?;
        Some(Subtree::Kernels {
            node,
            level: height_for(u32::from(kernels)),
            first: 0,
        })
    }

    /// The root of the whole tree.
    pub fn root(&self) -> Subtree {
        match self.nodes_height() {
            0 => self.node_root(self.nodes[0].0).expect("its own node"),
            level => Subtree::Nodes { level, first: 0 },
        }
    }

    /// Kernel `k`'s leaf.
    pub fn leaf(k: KernelId) -> Subtree {
        Subtree::Kernels {
            node: k.node,
            level: 0,
            first: k.index,
        }
    }

    /// Whether `s` exists in this shape and holds at least one kernel.
    pub fn exists(&self, s: Subtree) -> bool {
        self.first_kernel(s).is_some()
            && match s {
                Subtree::Kernels { node, level, .. } => self
                    .kernels_of(node)
                    .is_some_and(|k| level <= height_for(u32::from(k))),
                Subtree::Nodes { level, .. } => level <= self.nodes_height(),
            }
    }

    /// The subtree just above `s`, `None` for the root.
    pub fn parent(&self, s: Subtree) -> Option<Subtree> {
        match s {
            Subtree::Kernels { node, level, first } => {
                let kernels = self.kernels_of(node)?;
                if level < height_for(u32::from(kernels)) {
                    let level = level + 1;
                    return Some(Subtree::Kernels {
                        node,
                        level,
                        first: align(first, level),
                    });
                }
                (self.nodes_height() > 0).then(|| Subtree::Nodes {
                    level: 1,
                    first: align(node, 1),
                })
            }
            Subtree::Nodes { level, first } => {
                (level < self.nodes_height()).then(|| Subtree::Nodes {
                    level: level + 1,
                    first: align(first, level + 1),
                })
            }
        }
    }

    /// The subtrees just below `s` that hold kernels, in order; none for a
    /// leaf.
    pub fn children(&self, s: Subtree) -> Vec<Subtree> {
        match s {
            Subtree::Kernels { level: 0, .. } => Vec::new(),
            Subtree::Kernels { node, level, first } => {
                let kernels = u32::from(self.kernels_of(node).unwrap_or(0));
                (0..4)
                    .map(|i| u32::from(first) + i * span(level - 1))
                    .filter(|&f| f < kernels)
                    .map(|f| Subtree::Kernels {
                        node,
                        level: level - 1,
                        first: f as u16,
                    })
                    .collect()
            }
            Subtree::Nodes { level: 1, first } => (0..4)
                .filter_map(|i| u16::try_from(u32::from(first) + i).ok())
                .filter_map(|n| self.node_root(n))
                .collect(),
            Subtree::Nodes { level, first } => (0..4)
                .filter_map(|i| u16::try_from(u32::from(first) + i * span(level - 1)).ok())
                .map(|f| Subtree::Nodes {
                    level: level - 1,
                    first: f,
                })
                .filter(|&c| self.first_kernel(c).is_some())
                .collect(),
        }
    }

    /// The first kernel of `s`, if it holds any.
    fn first_kernel(&self, s: Subtree) -> Option<KernelId> {
        match s {
            Subtree::Kernels { node, first, .. } => {
                (first < self.kernels_of(node)?).then_some(KernelId::new(node, first))
            }
            Subtree::Nodes { level, first } => {
                let end = u32::from(first) + span(level);
                self.nodes
                    .iter()
                    .find(|&&(n, _)| n >= first && u32::from(n) < end)
                    .map(|&(n, _)| KernelId::new(n, 0))
            }
        }
    }

    /// The kernel that hosts `s`: its first kernel, which keeps the loads
    /// of its children.
    ///
    /// # Panics
    /// If `s` holds no kernel of this shape.
    pub fn host(&self, s: Subtree) -> KernelId {
        self.first_kernel(s)
            .unwrap_or_else(|| panic!("{s} holds no kernel"))
    }

    /// Whether kernel `k` is in `s`.
    pub fn contains(s: Subtree, k: KernelId) -> bool {
        match s {
            Subtree::Kernels { node, level, first } => {
                k.node == node && align(k.index, level) == first
            }
            Subtree::Nodes { level, first } => align(k.node, level) == first,
        }
    }

    /// The subtrees that hold kernel `k`, from its leaf up to the root.
    pub fn path(&self, k: KernelId) -> Vec<Subtree> {
        let mut path = vec![Shape::leaf(k)];
        while let Some(up) = self.parent(*path.last().expect("a leaf")) {
            path.push(up);
        }
        path
    }

    /// The subtrees `k` hosts above its leaf, lowest first.
    pub fn hosted(&self, k: KernelId) -> Vec<Subtree> {
        self.path(k)
            .into_iter()
            .skip(1)
            .take_while(|&s| self.host(s) == k)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn k(node: u16, index: u16) -> KernelId {
        KernelId::new(node, index)
    }

    #[test]
    fn a_node_alone_of_two_kernels() {
        let shape = Shape::new([(0, 2)]);
        let root = shape.root();
        assert_eq!(
            root,
            Subtree::Kernels {
                node: 0,
                level: 1,
                first: 0
            }
        );
        assert_eq!(
            shape.children(root),
            vec![Shape::leaf(k(0, 0)), Shape::leaf(k(0, 1))]
        );
        assert_eq!(shape.hosted(k(0, 0)), vec![root]);
        assert!(shape.hosted(k(0, 1)).is_empty());
        assert_eq!(shape.path(k(0, 1)), vec![Shape::leaf(k(0, 1)), root]);
    }

    #[test]
    fn a_node_alone_of_one_kernel_is_a_leaf() {
        let shape = Shape::new([(3, 1)]);
        assert_eq!(shape.root(), Shape::leaf(k(3, 0)));
        assert!(shape.children(shape.root()).is_empty());
        assert_eq!(shape.parent(shape.root()), None);
    }

    #[test]
    fn sixteen_kernels_make_two_levels_and_nodes_group_by_four() {
        let shape = Shape::new([(0, 16), (1, 2), (5, 1)]);
        let root = shape.root();
        assert_eq!(root, Subtree::Nodes { level: 2, first: 0 });
        assert_eq!(
            shape.children(root),
            vec![
                Subtree::Nodes { level: 1, first: 0 },
                Subtree::Nodes { level: 1, first: 4 }
            ]
        );
        let node0 = shape.node_root(0).unwrap();
        assert_eq!(shape.children(node0).len(), 4);
        assert_eq!(shape.path(k(0, 6)).len(), 5); // leaf, group, node, nodes 0-3, root
        assert_eq!(shape.host(Subtree::Nodes { level: 1, first: 4 }), k(5, 0));
        assert_eq!(
            shape.hosted(k(0, 0)),
            vec![
                Subtree::Kernels {
                    node: 0,
                    level: 1,
                    first: 0
                },
                node0,
                Subtree::Nodes { level: 1, first: 0 },
                root
            ]
        );
        assert_eq!(
            shape.hosted(k(5, 0)),
            vec![Subtree::Nodes { level: 1, first: 4 }]
        );
        assert!(shape.hosted(k(1, 0)).len() == 1); // its node's root only
        assert_eq!(format!("{node0}"), "kernels 0.0-0.15");
    }

    #[test]
    fn subtrees_read_back_what_they_show() {
        let shape = Shape::new([(0, 16), (1, 2), (5, 1)]);
        let mut todo = vec![shape.root()];
        while let Some(s) = todo.pop() {
            assert_eq!(s.to_string().parse::<Subtree>(), Ok(s));
            todo.extend(shape.children(s));
        }
        for bad in [
            "kernels 0.1-0.2",
            "nodes 0-2",
            "kernels 0.0-1.3",
            "kernel x",
            "nodes 3-3",
        ] {
            assert!(bad.parse::<Subtree>().is_err(), "{bad}");
        }
    }

    fn shapes() -> impl Strategy<Value = Shape> {
        prop::collection::btree_map(0u16..40, 1u16..70, 1..6).prop_map(Shape::new)
    }

    proptest! {
        /// Every kernel's path ends at the root, each subtree on it holds
        /// the kernel, and the children of each hold it exactly once.
        #[test]
        fn paths_and_children_agree(shape in shapes()) {
            let root = shape.root();
            for kernel in shape.kernels() {
                let path = shape.path(kernel);
                prop_assert_eq!(*path.last().unwrap(), root);
                for pair in path.windows(2) {
                    prop_assert!(Shape::contains(pair[0], kernel));
                    prop_assert!(shape.exists(pair[1]));
                    let holding: Vec<_> = shape
                        .children(pair[1])
                        .into_iter()
                        .filter(|&c| Shape::contains(c, kernel))
                        .collect();
                    prop_assert_eq!(holding, vec![pair[0]]);
                    prop_assert!(shape.children(pair[1]).len() <= 4);
                }
            }
        }

        /// Each subtree's host is in it, and the leaves under the root are
        /// exactly the kernels.
        #[test]
        fn hosts_are_inside_and_leaves_are_the_kernels(shape in shapes()) {
            let mut leaves = Vec::new();
            let mut todo = vec![shape.root()];
            while let Some(s) = todo.pop() {
                prop_assert!(Shape::contains(s, shape.host(s)));
                let children = shape.children(s);
                if children.is_empty() {
                    leaves.push(shape.host(s));
                }
                todo.extend(children);
            }
            leaves.sort();
            let kernels: Vec<_> = shape.kernels().collect();
            prop_assert_eq!(leaves, kernels);
        }
    }
}
