//! An error chain as one line for a user.

/// `e` and its causes, joined by `: ` as anyhow's `{:#}` does, without a
/// cause the text already ends with: many errors show their source in their
/// own message and also return it as their `source()` (thiserror's
/// `#[from]` with `{0}`), which `{:#}` would print twice.
pub fn report(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let cause = cause.to_string();
        if text.ends_with(&cause) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&cause);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::report;

    #[derive(Debug, thiserror::Error)]
    #[error("cannot read x: {0}")]
    struct Shows(#[from] std::io::Error);

    #[test]
    fn a_cause_the_message_shows_is_not_repeated() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let e = anyhow::Error::new(Shows(io)).context("cannot run x");
        assert_eq!(report(&e), "cannot run x: cannot read x: no such file");
    }

    #[test]
    fn each_cause_that_adds_something_is_kept() {
        let e = anyhow::anyhow!("the link dropped")
            .context("cannot reach node 1")
            .context("cannot migrate 0.0:1:0");
        assert_eq!(
            report(&e),
            "cannot migrate 0.0:1:0: cannot reach node 1: the link dropped"
        );
    }
}
